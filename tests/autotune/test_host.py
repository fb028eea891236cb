"""The runner's view of the host: the cross-core round-trip probe and the wait for a quiet
host before timing (autotune.measure.host)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from autotune.measure.host import (
    CONTENDED_FACTOR,
    GIVE_UP_AFTER,
    QUIET_FACTOR,
    CrossCoreProbe,
    QuietHost,
)
from autotune.measure.runner import LocalRunner
from search.measure import MeasureConfig, MeasureInput


class FakeHost:
    """Round trips read from a script, one per probe; a clock that sleeping advances."""

    def __init__(self, rtts):
        self.rtts = list(rtts)
        self.now = 0.0
        self.probes = 0

    def probe(self):
        self.probes += 1
        return self.rtts.pop(0) if len(self.rtts) > 1 else self.rtts[0]

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def host_of(rtts):
    fake = FakeHost(rtts)
    return QuietHost(fake.probe, fake.clock, fake.sleep), fake


def test_a_quiet_host_is_not_waited_for():
    host, fake = host_of([100.0, 120.0, 90.0, 150.0])
    assert [host.wait(10.0) for _ in range(4)] == [0.0, 0.0, 0.0, 0.0]
    assert host.lowest == 90.0 and fake.probes == 4 and host.waits == 0


def test_a_slow_spell_is_waited_out():
    # Quiet, then four slow probes, then quiet again: the second candidate waits until the
    # round trip is back within QUIET_FACTOR of the lowest.
    host, fake = host_of([100.0, 400.0, 410.0, 390.0, 420.0, 110.0])
    assert host.wait(10.0) == 0.0
    waited = host.wait(10.0)
    assert 0.0 < waited < 10.0
    assert fake.now == pytest.approx(waited)
    assert fake.probes == 6 and host.waits == 1 and host.waited_seconds == waited
    assert host.lowest == 100.0 and host.failed_waits == 0


def test_a_lasting_slow_level_becomes_the_new_normal():
    host, fake = host_of([100.0] + [400.0] * 1000)
    assert host.wait(5.0) == 0.0
    for i in range(GIVE_UP_AFTER):
        waited = host.wait(5.0)
        # The wait runs out (within one pause of the limit) and the candidate is timed anyway.
        assert 5.0 <= waited <= 6.0
    # After GIVE_UP_AFTER waits that ran out, the slow level is the lowest: no more waiting.
    assert host.lowest == 400.0
    assert host.wait(5.0) == 0.0
    assert host.waits == GIVE_UP_AFTER


def test_the_threshold_is_relative_to_the_lowest_seen():
    host, _ = host_of([100.0, QUIET_FACTOR * 100.0, QUIET_FACTOR * 100.0 + 1, 100.0])
    assert host.wait(10.0) == 0.0
    assert host.wait(10.0) == 0.0          # at the factor: still quiet
    assert host.wait(10.0) > 0.0           # just over it: waited until the next probe


def test_a_thread_that_lost_its_core_is_not_waited_for():
    # Microsecond round trips: the other thread was descheduled (other work on the machine,
    # e.g. other runners measuring beside this one), not placed far away: time now.
    host, fake = host_of([100.0, CONTENDED_FACTOR * 100.0 + 1, 50_000.0, 4 * 100.0, 100.0])
    assert host.wait(10.0) == 0.0
    assert host.wait(10.0) == 0.0 and host.wait(10.0) == 0.0
    assert fake.now == 0.0 and host.waits == 0 and host.lowest == 100.0
    # Within the band it is the slow placement again: waited for.
    assert host.wait(10.0) > 0.0 and host.waits == 1


def test_no_limit_or_no_second_thread_means_no_wait():
    host, fake = host_of([100.0, 500.0])
    host.wait(10.0)
    assert host.wait(0.0) == 0.0 and fake.now == 0.0
    single = QuietHost(lambda: None, lambda: 0.0, lambda s: pytest.fail("slept"))
    assert single.wait(10.0) == 0.0 and single.lowest is None


def test_the_probe_measures_a_round_trip_between_two_threads():
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no second thread to bounce a cache line to")
    probe = CrossCoreProbe()
    rtts = [probe(300) for _ in range(5)]
    assert all(r is not None and 0 < r < 1e7 for r in rtts)
    # The flag, rounds and result live on the probe's own aligned block; each of the three
    # launches bounces a third of the rounds.
    assert probe._data.ctypes.data % 64 == 0 and probe._data[8] == 100


def test_measure_config_quiet_wait_validates(monkeypatch):
    monkeypatch.delenv("AUTOTUNE_QUIET_WAIT", raising=False)
    assert MeasureConfig().quiet_wait == 10.0
    monkeypatch.setenv("AUTOTUNE_QUIET_WAIT", "2.5")
    assert MeasureConfig().quiet_wait == 2.5
    monkeypatch.setenv("AUTOTUNE_QUIET_WAIT", "soon")
    with pytest.raises(ValueError, match="AUTOTUNE_QUIET_WAIT"):
        MeasureConfig()
    assert MeasureConfig(quiet_wait=0).quiet_wait == 0
    for bad in (-1.0, float("inf"), float("nan"), "5"):
        with pytest.raises(ValueError, match="quiet_wait"):
            MeasureConfig(quiet_wait=bad)


def test_the_runner_probes_the_host_before_timing():
    # A real candidate on a two-core target goes through the wait (a quiet host: no wait
    # counted); on one core, or with quiet_wait=0, the request carries no wait at all.
    from autotune.measure import LocalBuilder
    from tensor_ir import te

    A = te.placeholder((64, 64), "float32", name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="B")
    func = te.create_prim_func([A, B])
    for cores, wait, probed in ((2, 10.0, True), (1, 10.0, False), (2, 0.0, False)):
        inp = MeasureInput(func, f"llvm -num-cores {cores}", func.structural_hash(),
                           reference=func)
        config = MeasureConfig(repeat=1, min_repeat_ms=1.0, quiet_wait=wait)
        with LocalBuilder() as builder, LocalRunner(config) as runner:
            sent = []
            call = runner._worker.call
            runner._worker.call = lambda request, limit: (sent.append((request, limit))
                                                          or call(request, limit))
            result = runner.run([inp], builder.build([inp]))[0]
        assert result.error_kind is None, result.error_msg
        measure = [(r, lim) for r, lim in sent if r.get("op") == "measure"][0]
        assert ("quiet_wait" in measure[0]) == probed
        assert measure[1] == pytest.approx(config.timeout + (wait if probed else 0.0) + 2.0)
        assert runner.host_waits >= 0 and np.isfinite(runner.host_wait_seconds)

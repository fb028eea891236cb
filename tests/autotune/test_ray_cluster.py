"""RayBuilder and RayRunner on a real Ray cluster started here: a head and worker nodes on
this machine, each a raylet of its own with its own custom resources, as `ray start` would
make them on separate machines."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from autotune.measure import LocalBuilder, LocalRunner, MeasureConfig, MeasureInput
from records import Database, target_fingerprint
from search import SearchConfig
from tensor_ir.target import Target

from .test_measure import REFERENCE, input_writer, matmul, out_of_bounds_writer, thread_bound

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from autotune.measure.cluster import (  # noqa: E402 - after the importorskip
    RESOURCE_PREFIX,
    RayBuilder,
    RayRunner,
    measure_resource,
    node_resources,
)

RES_A = RESOURCE_PREFIX + "test-a"
RES_B = RESOURCE_PREFIX + "test-b"
KEY = "matmul64"
FAST = MeasureConfig(repeat=3, min_repeat_ms=5, timeout=3.0)
# Each candidate takes a while, so that a node can be killed while it measures.
SLOW = MeasureConfig(repeat=3, min_repeat_ms=150, timeout=5.0, slow_factor=1e9)


@pytest.fixture(scope="module")
def cluster():
    """Head (no measure resource) + node A (RES_A) + node B (RES_B, and this machine's own
    measure resources for the CLI test)."""
    c = cluster_utils.Cluster(initialize_head=True,
                              head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = {"a": c.add_node(num_cpus=1, resources={RES_A: 1}),
             "b": c.add_node(num_cpus=1, resources={RES_B: 1, **node_resources()})}
    ray.init(address=c.address, log_to_driver=False, logging_level=logging.WARNING)
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def builder(cluster):
    with RayBuilder(address=cluster[0].address, timeout=60) as b:
        yield b


def inputs_for(funcs, target="llvm"):
    return [MeasureInput(f, target, KEY, reference=REFERENCE) for f in funcs]


def test_measure_resource_names_the_hardware():
    host = Target.current_host()
    name = measure_resource(host)
    assert name.startswith(RESOURCE_PREFIX + "llvm-") and name == measure_resource("llvm")
    assert measure_resource("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72") != name
    assert node_resources()[name] == 1.0
    out = subprocess.run([sys.executable, "-m", "autotune.measure.cluster", "resources"],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out)[name] == 1.0


def test_measurements_land_only_on_the_node_with_the_resource(cluster, builder):
    c, nodes = cluster
    inputs = inputs_for([REFERENCE, REFERENCE, REFERENCE])
    builds = builder.build(inputs)
    assert all(b.ok for b in builds), [b.error for b in builds]
    for resource, node in ((RES_A, nodes["a"]), (RES_B, nodes["b"])):
        with RayRunner(FAST, address=c.address, resource=resource, start_timeout=30) as runner:
            results = runner.run(inputs, builds)
            assert all(r.error_kind is None for r in results), [r.error_msg for r in results]
            assert [n["node_id"] for n in runner.nodes()] == [node.node_id]
            assert runner.measured_on == {node.node_id: 3}
            assert "measuring on 1 node(s)" in runner.describe()


def test_results_equal_the_local_runners(cluster, builder):
    """Good, wrong, crashing, input-scribbling and unbuildable candidates give the same
    outcomes through Ray as through the local builder and runner."""
    c, _ = cluster
    funcs = [REFERENCE, matmul(transposed=True), out_of_bounds_writer(), input_writer(),
             thread_bound(), REFERENCE]
    inputs = inputs_for(funcs)
    # Every output checked: under check="best" whether a candidate is compared depends on
    # whether it timed faster than the best so far, which noise decides.  No slow cut either:
    # on a loaded 2-core host the second REFERENCE once ran 10x its first run's time and was
    # stopped after one repeat.
    config = dataclasses.replace(FAST, check="all", slow_factor=1e9)
    with LocalBuilder(max_workers=1, timeout=60) as local_builder, \
            LocalRunner(config) as local:
        expected = local.run(inputs, local_builder.build(inputs))
    with RayRunner(config, address=c.address, resource=RES_A, start_timeout=30) as runner:
        got = runner.run(inputs, builder.build(inputs))
    assert [r.error_kind for r in got] == [r.error_kind for r in expected] == \
        [None, "wrong_result", "crash", "wrong_result", "build", None]
    assert [r.checked for r in got] == [r.checked for r in expected]
    for mine, theirs in zip(got, expected):
        if mine.error_kind is None:
            assert len(mine.run_times) == 3 and 0.2 < mine.median / theirs.median < 5
        elif mine.error_kind != "build":
            assert mine.error_msg.split(":")[0] == theirs.error_msg.split(":")[0]
    # Measured elsewhere: the node's name and fingerprint come with each result.
    fingerprint = target_fingerprint(str(inputs[0].target))
    assert got[0].fingerprint == fingerprint and got[0].host
    from schedules import Schedule

    record = got[0].to_record(KEY, inputs[0].target, Schedule(REFERENCE).trace)
    assert record.fingerprint == fingerprint


def test_no_node_with_the_resource_is_an_error_record_not_a_hang(cluster, builder):
    c, _ = cluster
    inputs = inputs_for([REFERENCE])
    start = time.monotonic()
    with RayRunner(FAST, address=c.address, resource=RESOURCE_PREFIX + "nowhere") as runner:
        (result,) = runner.run(inputs, builder.build(inputs))
    assert result.error_kind == "runtime" and "nowhere" in result.error_msg
    assert "ray start" in result.error_msg
    assert time.monotonic() - start < 30


@ray.remote
class _Holder:
    """Holds one unit of a resource while it lives."""

    def ping(self) -> bool:
        return True


def test_a_resource_held_a_moment_is_waited_for_and_one_held_too_long_is_an_error(
        cluster, builder):
    """Every unit of RES_A taken (as by the actor of a runner closed just before: Ray frees
    it a moment later): a runner waits for it rather than failing its batch; held past the
    start time-out, the error says the resource is taken, not missing."""
    c, _ = cluster
    inputs = inputs_for([REFERENCE])
    builds = builder.build(inputs)
    holder = _Holder.options(resources={RES_A: 1}, num_cpus=0).remote()
    ray.get(holder.ping.remote())
    release = threading.Timer(1.5, lambda: ray.kill(holder, no_restart=True))
    release.start()
    try:
        with RayRunner(FAST, address=c.address, resource=RES_A, start_timeout=30) as runner:
            (result,) = runner.run(inputs, builds)
    finally:
        release.join()
    assert result.error_kind is None, result.error_msg
    holder = _Holder.options(resources={RES_A: 1}, num_cpus=0).remote()
    ray.get(holder.ping.remote())
    try:
        with RayRunner(FAST, address=c.address, resource=RES_A, start_timeout=1) as runner:
            (result,) = runner.run(inputs, builds)
    finally:
        ray.kill(holder, no_restart=True)
    assert result.error_kind == "runtime"
    assert "stayed taken for 1 s" in result.error_msg and RES_A in result.error_msg


def test_build_errors_and_time_outs_are_build_results(cluster):
    c, _ = cluster
    with RayBuilder(address=c.address, timeout=60) as b:
        ok, bad = b.build(inputs_for([REFERENCE, thread_bound()]))
        assert ok.ok and os.path.getsize(ok.artifact_path) > 0
        assert not bad.ok and "thread" in bad.error
    # A build that takes too long (a Ray task's round trip alone takes milliseconds) is
    # cancelled and reported; the builder goes on working.
    with RayBuilder(address=c.address, timeout=0.001) as b:
        (late,) = b.build(inputs_for([REFERENCE]))
        assert not late.ok and "timed out after 0.001 s" in late.error
        b.timeout = 60.0
        assert b.build(inputs_for([REFERENCE]))[0].ok


def test_a_node_lost_mid_batch_costs_a_rerun_and_a_hung_one_times_out(cluster, builder):
    """Two nodes offer RES_B: one is stopped (SIGSTOP: it hangs without dying), then one is
    killed while it measures; every candidate still gets its measurement."""
    c, nodes = cluster
    extra = [c.add_node(num_cpus=1, resources={RES_B: 1}) for _ in range(2)]
    inputs = inputs_for([REFERENCE] * 6)
    builds = builder.build(inputs)
    lines = []
    try:
        with RayRunner(SLOW, address=c.address, resource=RES_B, node_timeout=3,
                       reference_timeout=10, start_timeout=30, log=lines.append) as runner:
            # Start the actors (one per node with RES_B) on a first candidate.
            assert runner.run(inputs[:1], builds[:1])[0].error_kind is None
            actors = runner.nodes()
            assert len(actors) == 3
            # 1. A hung node: its candidate goes elsewhere after the deadline.
            hung = next(a for a in actors if a["node_id"] == extra[0].node_id)
            os.kill(hung["pid"], signal.SIGSTOP)
            try:
                results = runner.run(inputs[:3], builds[:3])
            finally:
                os.kill(hung["pid"], signal.SIGCONT)
            assert all(r.error_kind is None for r in results), [r.error_msg for r in results]
            assert hung["node_id"] in runner.lost_nodes
            # 2. A node killed mid-batch: as soon as it has returned its first candidate of
            # the batch, so that it is measuring its second (a timer raced the batch's end
            # when the hung node's resource was free again and a third actor sped it up).
            victim = extra[1]
            before = runner.measured_on.get(victim.node_id, 0)

            def kill_the_victim_mid_measure():
                deadline = time.monotonic() + 60
                while (runner.measured_on.get(victim.node_id, 0) <= before
                       and time.monotonic() < deadline):
                    time.sleep(0.01)
                c.remove_node(victim, allow_graceful=False)

            killer = threading.Thread(target=kill_the_victim_mid_measure)
            killer.start()
            batch_in, batch_builds = inputs * 2, builds * 2  # 12: the victim gets several
            results = runner.run(batch_in, batch_builds)
            killer.join()
            assert all(r.error_kind is None for r in results), [r.error_msg for r in results]
            assert len(results) == 12
            assert victim.node_id in runner.lost_nodes
            left = [n["node_id"] for n in runner.nodes()]
            assert nodes["b"].node_id in left and victim.node_id not in left
            assert set(left) <= {nodes["b"].node_id, extra[0].node_id}
            assert any("lost the measuring node" in line for line in lines)
    finally:
        for node in extra[:1]:
            c.remove_node(node)


def test_tune_through_ray_finishes_its_budget_when_a_node_dies(cluster, builder, tmp_path):
    """autotune.tune with the Ray builder and runner on two nodes, one killed mid-run: the
    whole budget is measured and in the database, no record lost, each record with the
    measuring node's fingerprint."""
    import autotune

    c, _ = cluster
    resource = RESOURCE_PREFIX + "test-tune"
    pair = [c.add_node(num_cpus=1, resources={resource: 1}) for _ in range(2)]
    db_path = tmp_path / "ray.db"
    # A generous kernel time-out: a slow random candidate on a loaded machine must not
    # turn into an error record; the node deadline (node_timeout past it) is what is tested.
    config = MeasureConfig(repeat=3, min_repeat_ms=60, timeout=30.0)
    with RayRunner(config, address=c.address, resource=resource, node_timeout=5,
                   reference_timeout=30, start_timeout=30) as runner:

        def kill_one_after_some_trials():
            deadline = time.monotonic() + 120
            while sum(runner.measured_on.values()) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            c.remove_node(pair[1], allow_graceful=False)

        killer = threading.Thread(target=kill_one_after_some_trials)
        killer.start()
        result = autotune.tune(matmul(), "llvm", trials=12, database=str(db_path),
                               search=SearchConfig(batch_size=4, remeasure_top=0), builder=builder,
                               runner=runner, log=False)
        killer.join()
        assert pair[1].node_id in runner.lost_nodes
        assert set(runner.measured_on) <= {pair[0].node_id, pair[1].node_id}
    assert result.best_schedule is not None and 0 < result.best_time < float("inf")
    with Database(str(db_path), readonly=True) as db:
        records = [r for w in db.workloads() for r in db.records(w.key)]
    assert len(records) == 12
    errors = [f"{r.error_kind}: {r.error_msg}" for r in records if r.error_kind is not None]
    assert not errors
    assert all(r.fingerprint == target_fingerprint(r.target) for r in records)


def test_tune_model_cli_with_ray(cluster, tmp_path):
    """tune-model --ray ADDRESS measures on the cluster's node that has this machine's
    measure resource (node B)."""
    from .tiny_onnx import write_tiny_mlp

    c, _ = cluster
    model = write_tiny_mlp(tmp_path / "tiny.onnx")
    db = tmp_path / "cli.db"
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.cli", str(model), "--ray", c.address,
         "--db", str(db), "--trials", "8", "--batch-size", "4", "--no-live",
         "--remeasure-top", "0", "--repeat", "2", "--min-repeat-ms", "5"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ray: measuring on 1 node(s)" in proc.stderr
    with Database(str(db), readonly=True) as database:
        assert database.count() >= 8



def test_intrinsics_registered_here_are_built_and_measured_on_the_nodes(cluster, builder):
    """A candidate tensorized with an intrinsic registered in this (driving) process only:
    its definition travels with the build task and the measurement request."""
    from tensor_ir import intrinsics, te
    from tensor_ir.intrinsics import ReferenceImpl

    from ..schedules.test_tensorize import schedule_dot

    name = "test_ray_ref_dot_4x2"
    a = te.placeholder((2,), "float32", name="A")
    b = te.placeholder((4, 2), "float32", name="B")
    r = te.reduce_axis(2, name="k")
    c = te.compute((4,), lambda i: te.sum(a[r] * b[i, r], axis=r), name="C")
    intrinsics.register(name, te.create_prim_func([a, b, c], name=name), ReferenceImpl(),
                        override=True)
    sch, _ = schedule_dot(REFERENCE, 4, name, pack=False, k_tile=2)
    inputs = inputs_for([sch.func])
    (build,) = builder.build(inputs)
    assert build.ok, build.error
    config = dataclasses.replace(FAST, check="all")
    with RayRunner(config, address=cluster[0].address, resource=RES_A,
                   start_timeout=30) as runner:
        (result,) = runner.run(inputs, [build])
    assert result.error_kind is None and result.checked, result.error_msg

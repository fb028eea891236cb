"""Whether the host is fit to time a parallel CPU kernel: the cross-core round trip of two
threads of the parallel runtime, and the runner's wait for it to come back to its quiet level.

A virtual machine's two cores are not always placed alike on the host.  On the machine this
was measured on (2 vCPUs of a Zen 5 EPYC) a ping-pong of one cache line between two threads
took 90-130 ns for minutes, then 370-450 ns for minutes, and back; in the slow state a
4 MiB buffer written by one core reads at 43 GB/s on the other instead of 120 GB/s, while
each core's own cache latencies do not move.  Kernels whose threads read what the other
thread wrote (the memory-bound ones most: Winograd transforms, depthwise convolutions) then
run 1.7-2.7x slower, compute-bound ones 1.1-1.2x.  A tuning run that times some of a task's
candidates in each state ranks them by the state they met.  Of two fresh MobileNetV2 runs of
2000 trials on otherwise the same code, the one without this wait built 4.5% slower (1.721
against 1.647 ms); set beside an earlier run, five of its early tasks had kept schedules
that run 10-36% slower in the model.

So before timing a candidate the CPU runner measures the round trip (the median of three
probes of about 330 round trips, 0.1-0.5 ms in all) and, when it is over QUIET_FACTOR times
the lowest this worker has seen, waits for it to come down, up to
``MeasureConfig.quiet_wait`` seconds.  A wait that runs out times the candidate anyway;
after GIVE_UP_AFTER such waits in a row the slow level is taken as the host's new normal
(the lowest is reset to it), so a lasting change costs a bounded delay, not a stalled run.

A round trip over CONTENDED_FACTOR times the lowest is not that state but a thread that
lost its core to other work (a probe then reads microseconds): waiting for a quiet
placement would not help, and other processes measuring beside this one (several Ray
actors on one machine, a test suite) must not stall each other, so it is not waited for.
"""
from __future__ import annotations

import ctypes
import time

import numpy as np

__all__ = ["CrossCoreProbe", "QuietHost", "QUIET_FACTOR", "CONTENDED_FACTOR", "GIVE_UP_AFTER",
           "NOW_IR"]

# A round trip this many times the lowest seen marks the slow state (the two states measured
# 90-130 ns and 370-450 ns; a preempted probe reads far higher still).
QUIET_FACTOR = 2.0
# Over this many times the lowest, a probe met a descheduled thread, not a slow placement.
CONTENDED_FACTOR = 8.0
# Waits in a row that run out before the lowest round trip is reset to the current one.
GIVE_UP_AFTER = 3
PROBE_ROUNDS = 1000

# clock_gettime's monotonic clock (the clock of time.perf_counter), by this platform's number.
CLOCK_MONOTONIC = getattr(time, "CLOCK_MONOTONIC", 1)

# ``@now(ptr %ts) -> i64``: the monotonic clock in nanoseconds (``%ts``: two i64 of scratch),
# for the native timing helpers here and in the runner.
NOW_IR = f"""
declare i32 @clock_gettime(i32, ptr)
define internal i64 @now(ptr %ts) {{
  %r = call i32 @clock_gettime(i32 {CLOCK_MONOTONIC}, ptr %ts)
  %np = getelementptr inbounds i64, ptr %ts, i64 1
  %s = load i64, ptr %ts
  %ns = load i64, ptr %np
  %s9 = mul i64 %s, 1000000000
  %t = add i64 %s9, %ns
  ret i64 %t
}}
"""

# Threads 0 and 1 take turns: at step s (of 2 x rounds) the thread s % 2 stores s+1 and the
# other waits to see it, so thread 0 sends 2i+1 and thread 1 answers 2i+2.  Thread 0 stores
# the elapsed nanoseconds of all rounds at data[9] (rounds at data[8]), or -1 when the team
# has a single thread.  The flag (data[0]) sits alone on its cache line.
_PROBE_IR = NOW_IR + """
declare void @tir_parallel_launch(ptr, ptr, i32)

define internal void @pingpong_team(ptr %data, i32 %team, i32 %tid) {
entry:
  %ts = alloca [2 x i64], align 8
  %rp = getelementptr inbounds i64, ptr %data, i64 8
  %rounds = load i64, ptr %rp
  %outp = getelementptr inbounds i64, ptr %data, i64 9
  %alone = icmp slt i32 %team, 2
  br i1 %alone, label %single, label %which
single:
  store i64 -1, ptr %outp
  br label %done
which:
  %player = icmp ult i32 %tid, 2
  br i1 %player, label %start, label %done
start:
  %t0 = call i64 @now(ptr %ts)
  %me = zext i32 %tid to i64
  %steps = shl i64 %rounds, 1
  br label %step
step:
  %s = phi i64 [0, %start], [%snext, %stepped]
  %turn = and i64 %s, 1
  %mine = icmp eq i64 %turn, %me
  %value = add i64 %s, 1
  br i1 %mine, label %send, label %await
send:
  store atomic i64 %value, ptr %data release, align 8
  br label %stepped
await:
  %v = load atomic i64, ptr %data acquire, align 8
  %seen = icmp eq i64 %v, %value
  br i1 %seen, label %stepped, label %await
stepped:
  %snext = add i64 %s, 1
  %more = icmp slt i64 %snext, %steps
  br i1 %more, label %step, label %finish
finish:
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %record, label %done
record:
  %t1 = call i64 @now(ptr %ts)
  %dt = sub i64 %t1, %t0
  store i64 %dt, ptr %outp
  br label %done
done:
  ret void
}

define i64 @cross_core_probe(ptr %data) {
  call void @tir_parallel_launch(ptr @pingpong_team, ptr %data, i32 2)
  %outp = getelementptr inbounds i64, ptr %data, i64 9
  %r = load i64, ptr %outp
  ret i64 %r
}
"""


class CrossCoreProbe:
    """``probe(rounds)``: nanoseconds per round trip of a cache line between two threads of
    the thread pool (the team the runner's kernels run on), the median of three launches of a
    third of ``rounds`` each (one launch that met a preemption does not decide), or None when
    the pool gives a single thread.  Compiled on the first call."""

    def __init__(self):
        self._fn = None
        self._jit = None
        # 16 int64 on a 64-byte boundary: the flag alone on its line, then rounds and result.
        raw = np.zeros(32, np.int64)
        offset = (-raw.ctypes.data % 64) // 8
        self._raw, self._data = raw, raw[offset:offset + 16]

    def __call__(self, rounds: int = PROBE_ROUNDS) -> float | None:
        if self._fn is None:
            from tensor_ir.codegen import LLVMTarget, compile_module

            self._jit = compile_module(_PROBE_IR, LLVMTarget()).jit()
            self._fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(
                self._jit.function_address("cross_core_probe"))
        rounds = max(1, int(rounds) // 3)
        rtts = []
        for _ in range(3):
            self._data[:] = 0
            self._data[8] = rounds
            elapsed = self._fn(self._data.ctypes.data)
            if elapsed < 0:
                return None
            rtts.append(elapsed / rounds)
        return sorted(rtts)[1]


class QuietHost:
    """The worker's view of the host across candidates: the lowest round trip seen, and
    ``wait(limit)`` (see the module text).  ``probe``, ``clock`` and ``sleep`` are
    replaceable for tests."""

    def __init__(self, probe=None, clock=time.monotonic, sleep=time.sleep):
        self.probe = probe if probe is not None else CrossCoreProbe()
        self.clock, self.sleep = clock, sleep
        self.lowest: float | None = None
        self.failed_waits = 0
        self.waits = 0
        self.waited_seconds = 0.0

    def _quiet(self) -> tuple[bool, float | None]:
        """(whether to time now, the round trip): yes when the round trip is within
        QUIET_FACTOR of the lowest, or beyond CONTENDED_FACTOR (see the module text)."""
        rtt = self.probe()
        if rtt is None:
            return True, None
        if self.lowest is None or rtt < self.lowest:
            self.lowest = rtt
        return rtt <= QUIET_FACTOR * self.lowest or rtt > CONTENDED_FACTOR * self.lowest, rtt

    def wait(self, limit: float) -> float:
        """Seconds spent waiting (0.0 when the host is quiet or ``limit`` is 0) for the round
        trip to come within QUIET_FACTOR of the lowest seen; at most about ``limit``."""
        quiet, rtt = self._quiet()
        if quiet or limit <= 0:
            if quiet:
                self.failed_waits = 0
            return 0.0
        start = self.clock()
        pause = 0.05
        self.waits += 1
        while True:
            self.sleep(pause)
            pause = min(2 * pause, 1.0)
            quiet, rtt = self._quiet()
            waited = self.clock() - start
            if quiet:
                self.failed_waits = 0
                break
            if waited >= limit:
                self.failed_waits += 1
                if self.failed_waits >= GIVE_UP_AFTER:
                    # The slow level has lasted through several waits: take it as the host's
                    # level now (a quieter probe later lowers it again).
                    self.lowest, self.failed_waits = rtt, 0
                break
        self.waited_seconds += waited
        return waited

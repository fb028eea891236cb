"""The parallel runtime (tensor_ir/codegen/threadpool.py): kernels equal numpy whatever the
extent, team and state of the workers; concurrent, nested and forked launches; the held team;
exports that run without libgomp.  Everything that launches threads runs in a subprocess with
a timeout, so a hang fails the test instead of stopping the suite."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tensor_ir.codegen import threadpool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 240

# Shared by the scripts: kernels built straight from lowered PrimFuncs (no tuner imports).
PRELUDE = '''
import ctypes, os, sys, threading, time
import numpy as np
from tensor_ir.buffer import decl_buffer
from tensor_ir.codegen import CodegenOptions, codegen, compile_module, parallel, threadpool
from tensor_ir.expr import FloatImm, IntImm, Var, cast
from tensor_ir.func import PrimFunc
from tensor_ir.stmt import BufferStore, For

def loop(var, extent, body, kind="serial"):
    return For(var, IntImm(0), IntImm(extent), kind, body, None, ())

def affine(extent, num_threads=0, name="f"):
    """B[i] = 2 A[i] + i, its loop parallel; returns (call(a, b), compiled)."""
    A = decl_buffer((max(extent, 1),), "float32", "A")
    B = decl_buffer((max(extent, 1),), "float32", "B")
    i = Var("i")
    value = A[i] * FloatImm(2.0, "float32") + cast("float32", i)
    func = PrimFunc((A, B), loop(i, extent, BufferStore(B, value, (i,)), "parallel"), name,
                    (("lowered", True),))
    compiled = compile_module(codegen(func, options=CodegenOptions(num_threads=num_threads)))
    jit = compiled.jit()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(jit.function_address(name))
    def call(a, b, jit=jit):
        fn(a.ctypes.data, b.ctypes.data)
    return call, compiled

def expected(a, extent):
    out = np.zeros_like(a)
    out[:extent] = 2 * a[:extent] + np.arange(extent, dtype=np.float32)
    return out

def check(call, extent, rng, times=1):
    n = max(extent, 1)
    a = rng.uniform(-1, 1, n).astype(np.float32)
    for _ in range(times):
        b = np.zeros(n, np.float32)
        call(a, b)
        np.testing.assert_array_equal(b, expected(a, extent))

def wait_for(condition, seconds=20.0):
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)
rng = np.random.default_rng(0)
'''


def run_script(body: str, timeout: int = TIMEOUT) -> str:
    """Run PRELUDE + ``body`` in a fresh interpreter; it must print OK and exit 0."""
    code = PRELUDE + textwrap.dedent(body) + "\nprint('OK')\n"
    try:
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise AssertionError(f"the script hung (killed after {timeout} s):\n"
                             f"{err.stdout}\n{err.stderr}") from None
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("OK"), (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc.stdout


# ---------------------------------------------------------------------------------------------
# kernels against numpy
# ---------------------------------------------------------------------------------------------

def test_parallel_kernels_equal_numpy_for_every_extent_and_team():
    # 0 and 1 iterations, fewer iterations than threads, odd sizes; teams of the default
    # size, one, two, more than the cores and more than the counters' owners.
    run_script('''
    for extent in (0, 1, 2, 3, 5, 7, 63, 64, 1001, 4099):
        for num_threads in (0, 1, 2, 3, 8, 70):
            call, compiled = affine(extent, num_threads)
            check(call, extent, rng, times=3)
    assert threadpool.worker_count() == 69, threadpool.worker_count()
    ''')


def test_repeated_launches_and_launches_after_the_workers_sleep():
    run_script('''
    call, _ = affine(1001, 2)
    check(call, 1001, rng, times=2000)
    # No polling at all: every worker goes to sleep after each launch; the next launch
    # wakes them (or runs without them) and is still exact.
    assert threadpool.set_spin_count(0) == threadpool.DEFAULT_SPIN_COUNT
    for _ in range(30):
        wait_for(lambda: threadpool.sleeping_workers() == threadpool.worker_count())
        check(call, 1001, rng)
    # Sleeping launches in a row, with a short poll window.
    threadpool.set_spin_count(50)
    for _ in range(300):
        check(call, 1001, rng)
        time.sleep(0.0005)
    # A team larger than the pool so far: new workers start; the launch does not wait for
    # them to run.
    big, _ = affine(999, 12)
    for _ in range(50):
        check(big, 999, rng)
    ''')


def test_launches_from_two_python_threads_at_once():
    run_script('''
    kernels = [affine(n, 2, name=f"k{n}") for n in (517, 1024, 33)]
    errors = []
    def worker(k):
        try:
            call, _ = kernels[k % len(kernels)]
            extent = (517, 1024, 33)[k % len(kernels)]
            local = np.random.default_rng(k)
            check(call, extent, local, times=400)
        except BaseException as err:
            errors.append(err)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ''')


def test_nested_parallel_loops_and_a_launch_inside_a_launch():
    run_script('''
    from tensor_ir.codegen.compile import compile_module as compile_text
    # Codegen: a parallel loop inside a parallel body runs serially inside.
    A = decl_buffer((9, 13), "int32", "A")
    i, j = Var("i"), Var("j")
    func = PrimFunc((A,), loop(i, 9, loop(j, 13, BufferStore(A, cast("int32", i * 100 + j),
                    (i, j)), "parallel"), "parallel"), "nest", (("lowered", True),))
    jit = compile_module(codegen(func, options=CodegenOptions(num_threads=2))).jit()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(jit.function_address("nest"))
    for _ in range(100):
        a = np.zeros((9, 13), np.int32)
        fn(a.ctypes.data)
        np.testing.assert_array_equal(a, np.arange(9)[:, None] * 100 + np.arange(13))
    # The runtime: every thread of an outer launch launches an inner one (which finds the
    # pool busy and runs on that thread alone); each inner call records its team size.
    text = """
    declare void @tir_parallel_launch(ptr, ptr, i32)
    define internal void @inner(ptr %data, i32 %team, i32 %tid) {
      %slot = getelementptr inbounds i32, ptr %data, i32 %tid
      %old = atomicrmw add ptr %slot, i32 1 seq_cst
      %teams = getelementptr inbounds i32, ptr %data, i32 64
      %t = atomicrmw add ptr %teams, i32 %team seq_cst
      ret void
    }
    define internal void @outer(ptr %data, i32 %team, i32 %tid) {
      call void @tir_parallel_launch(ptr @inner, ptr %data, i32 4)
      ret void
    }
    define void @nested(ptr %data) {
      call void @tir_parallel_launch(ptr @outer, ptr %data, i32 4)
      ret void
    }
    """
    jit2 = compile_text(text).jit()
    nested = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(jit2.function_address("nested"))
    for _ in range(200):
        counts = np.zeros(65, np.int32)
        nested(counts.ctypes.data)
        outer_threads = counts[64]      # each inner launch ran alone: team 1
        assert 1 <= outer_threads <= 4 and counts[0] == outer_threads, counts
        assert counts[1:64].sum() == 0, counts
    ''')


def test_join_protocol_caller_is_thread_zero_and_no_thread_joins_twice():
    run_script('''
    from tensor_ir.codegen.compile import compile_module as compile_text
    text = """
    declare void @tir_parallel_launch(ptr, ptr, i32)
    define internal void @record(ptr %data, i32 %team, i32 %tid) {
      %slot = getelementptr inbounds i32, ptr %data, i32 %tid
      %old = atomicrmw add ptr %slot, i32 1 seq_cst
      %bad = icmp sge i32 %tid, %team
      br i1 %bad, label %flag, label %done
    flag:
      %f = getelementptr inbounds i32, ptr %data, i32 255
      store i32 1, ptr %f
      br label %done
    done:
      ret void
    }
    define void @launch(ptr %data, i32 %team) {
      call void @tir_parallel_launch(ptr @record, ptr %data, i32 %team)
      ret void
    }
    """
    jit = compile_text(text).jit()
    launch = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(
        jit.function_address("launch"))
    threadpool.set_spin_count(200)
    joined = 0
    for k in range(3000):
        team = (1, 2, 3, 6)[k % 4]
        calls = np.zeros(256, np.int32)
        launch(calls.ctypes.data, team)
        assert calls[0] == 1 and calls[255] == 0, calls[:8]
        assert calls[:team].max() == 1 and calls[team:255].sum() == 0, calls[:8]
        joined += int(calls[1:team].sum())
        if k % 100 == 0:
            time.sleep(0.002)   # now and then the workers go to sleep
    assert joined > 0           # the workers do take part
    ''')


# ---------------------------------------------------------------------------------------------
# fork, hold, spin
# ---------------------------------------------------------------------------------------------

def test_a_forked_child_starts_its_own_workers():
    run_script('''
    call, _ = affine(2049, 3)
    check(call, 2049, rng, times=20)
    assert threadpool.worker_count() == 2
    for round_ in range(3):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # The parent's workers do not exist here: the child's pool starts empty.
                assert threadpool.worker_count() == 0
                check(call, 2049, np.random.default_rng(round_), times=50)
                assert threadpool.worker_count() == 2
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        # The parent's pool is untouched.
        check(call, 2049, rng, times=20)
        assert threadpool.worker_count() == 2
    ''')


def test_multiprocessing_fork_children_run_parallel_kernels():
    run_script('''
    import multiprocessing as mp
    call, _ = affine(777, 2)
    check(call, 777, rng, times=5)
    def child(seed):
        check(call, 777, np.random.default_rng(seed), times=20)
        return threadpool.worker_count()
    with mp.get_context("fork").Pool(2) as pool:
        assert pool.map(child, range(4)) == [1] * 4
    ''')


def test_a_held_team_does_not_sleep_and_release_lets_it():
    run_script('''
    call, _ = affine(1001, 3)
    threadpool.set_spin_count(0)
    check(call, 1001, rng)
    wait_for(lambda: threadpool.sleeping_workers() == 2)
    # hold wakes the sleepers and keeps them polling, across launches and idle time.
    threadpool.hold()
    wait_for(lambda: threadpool.sleeping_workers() == 0)
    for _ in range(20):
        check(call, 1001, rng)
        time.sleep(0.01)
        assert threadpool.sleeping_workers() == 0
    with threadpool.held():          # holds nest
        check(call, 1001, rng)
    time.sleep(0.02)
    assert threadpool.sleeping_workers() == 0
    threadpool.release()
    wait_for(lambda: threadpool.sleeping_workers() == 2)
    # A release without a hold changes nothing.
    threadpool.release()
    threadpool.hold()
    wait_for(lambda: threadpool.sleeping_workers() == 0)
    threadpool.release()
    wait_for(lambda: threadpool.sleeping_workers() == 2)
    ''')


def test_the_model_executor_holds_the_team_for_a_run():
    run_script('''
    sys.path.insert(0, os.getcwd())
    from autotune.graph.build import build_model
    from tests.graph.helpers import TARGET, conv_bn_relu_model, random_inputs
    model = conv_bn_relu_model()
    lib = build_model(model, TARGET)
    assert any("tir_parallel_launch" in s.kernel.get_source("ll-raw") for s in lib.steps)
    feed = random_inputs(model)
    reference = lib.run(feed)
    # Workers that sleep after every launch: the run holds them, so none sleeps during it,
    # and the results are the same.
    threadpool.set_spin_count(0)
    for _ in range(20):
        out = lib.run(feed)
        for name in reference:
            np.testing.assert_array_equal(out[name], reference[name])
    wait_for(lambda: threadpool.sleeping_workers() == threadpool.worker_count())
    lib.profile(feed, repeat=2)
    lib.benchmark(feed, repeat=2, number=2, warmup=0)
    wait_for(lambda: threadpool.sleeping_workers() == threadpool.worker_count())
    ''')


def test_spin_count_takes_non_negative_polls():
    with pytest.raises(ValueError, match="non-negative"):
        threadpool.set_spin_count(-1)
    with pytest.raises(ValueError, match="non-negative"):
        threadpool.set_spin_count(1.5)
    previous = threadpool.set_spin_count(123)
    try:
        assert threadpool.spin_count() == 123
    finally:
        threadpool.set_spin_count(previous)


def test_team_size_is_the_usable_core_count_unless_given():
    assert threadpool.team_size(0) == len(os.sched_getaffinity(0))
    assert threadpool.team_size(5) == 5


def test_the_runtime_refuses_an_architecture_without_a_known_futex_number():
    from tensor_ir.errors import BuildError

    with pytest.raises(BuildError, match="futex"):
        threadpool.runtime_ir("riscv64-unknown-linux-gnu")
    for triple, number in (("x86_64-unknown-linux-gnu", 202),
                           ("aarch64-unknown-linux-gnu", 98)):
        assert f"@syscall(i64 {number}," in threadpool.runtime_ir(triple)


# ---------------------------------------------------------------------------------------------
# no libgomp: the IR, single kernel libraries, exported models
# ---------------------------------------------------------------------------------------------

def _parallel_func(extent=300):
    from tensor_ir.buffer import decl_buffer
    from tensor_ir.expr import FloatImm, IntImm, Var
    from tensor_ir.func import PrimFunc
    from tensor_ir.stmt import BufferStore, For

    A = decl_buffer((extent,), "float32", "A")
    B = decl_buffer((extent,), "float32", "B")
    i = Var("i")
    body = BufferStore(B, A[i] * FloatImm(3.0, "float32"), (i,))
    return PrimFunc((A, B), For(i, IntImm(0), IntImm(extent), "parallel", body, None, ()),
                    "triple3", (("lowered", True),))


def test_no_kernel_ir_mentions_gomp_and_gomp_stays_selectable():
    run_script('''
    import autotune
    from tensor_ir.errors import BuildError
    sys.path.insert(0, os.getcwd())
    from tests.tensor_ir.test_threadpool import _parallel_func
    a = np.arange(300, dtype=np.float32)
    kernel = autotune.build(_parallel_func(), "llvm -num-cores 2")
    for fmt in ("ll-raw", "ll"):
        assert "GOMP" not in kernel.get_source(fmt) and "omp_" not in kernel.get_source(fmt)
    assert "tir_parallel_launch" in kernel.get_source("ll-raw")
    assert parallel.runtime() == "pool"
    # Both runtimes in one process, side by side.
    with parallel.using_runtime("gomp"):
        gomp_kernel = autotune.build(_parallel_func(), "llvm -num-cores 2")
    assert parallel.runtime() == "pool"
    assert "GOMP_parallel" in gomp_kernel.get_source("ll-raw")
    assert "tir_parallel" not in gomp_kernel.get_source("ll-raw")
    # Libraries: the pool's kernel carries its runtime, the gomp one links libgomp.
    import tempfile
    from autotune.runtime.build import load_module
    folder = tempfile.mkdtemp()
    kernel.export_library(os.path.join(folder, "pool.so"))
    gomp_kernel.export_library(os.path.join(folder, "gomp.so"))
    loaded = [load_module(os.path.join(folder, name)) for name in ("pool.so", "gomp.so")]
    for _ in range(50):
        for k in (kernel, gomp_kernel, *loaded):
            b = np.zeros(300, np.float32)
            k(a, b)
            np.testing.assert_array_equal(b, 3 * a)
    try:
        parallel.set_runtime("tbb")
    except BuildError as err:
        assert "unknown parallel runtime" in str(err)
    else:
        raise AssertionError("an unknown runtime was accepted")
    ''')


_NO_GOMP_CHECK = '''
with open("/proc/self/maps") as f:
    maps = f.read()
assert "libgomp" not in maps, "libgomp is loaded"
assert "llvmlite" not in maps and "llvmlite" not in sys.modules
'''


def test_a_kernel_library_runs_without_libgomp(tmp_path):
    import autotune

    kernel = autotune.build(_parallel_func(), "llvm -num-cores 3")
    path = tmp_path / "k.so"
    kernel.export_library(str(path))
    script = f'''
import ctypes, sys
import numpy as np
lib = ctypes.CDLL({str(path)!r})
fn = lib.triple3
a = np.arange(300, dtype=np.float32)
for _ in range(200):
    b = np.zeros(300, np.float32)
    fn(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(b.ctypes.data))
    np.testing.assert_array_equal(b, 3 * a)
# The runtime stays inside the library: none of its entry points is exported.
assert not hasattr(lib, "tir_parallel_launch") and not hasattr(lib, "tir_pool_hold")
''' + _NO_GOMP_CHECK + "print('OK')\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr


def test_an_exported_model_runs_with_its_own_pool_and_without_libgomp(tmp_path):
    run_script(f'''
    sys.path.insert(0, os.getcwd())
    import subprocess
    from autotune.graph.build import build_model
    from tests.graph.helpers import TARGET, conv_bn_relu_model, random_inputs
    from tests.tensor_ir.test_threadpool import LOADER_SCRIPT, TIMEOUT
    model = conv_bn_relu_model()
    lib = build_model(model, TARGET)
    assert any("tir_parallel_launch" in s.kernel.get_source("ll-raw") for s in lib.steps)
    folder = lib.export_library({str(tmp_path / "artifact")!r})
    feed = random_inputs(model)
    reference = lib.run(feed)
    io = {str(tmp_path / "io.npz")!r}
    np.savez(io, **{{f"in_{{k}}": v for k, v in feed.items()}},
             **{{f"out_{{k}}": v for k, v in reference.items()}})
    proc = subprocess.run([sys.executable, "-c", LOADER_SCRIPT.format(folder=folder, io=io)],
                          capture_output=True, text=True, timeout=TIMEOUT,
                          cwd={str(tmp_path)!r})
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr
    ''')


# Run in a process of its own, with numpy alone: the exported model through its loader.
LOADER_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, {folder!r})
from loader import load
io = np.load({io!r})
feed = {{k[3:]: io[k] for k in io.files if k.startswith("in_")}}
model = load({folder!r})
lib = model._library
assert not hasattr(lib, "tir_parallel_launch") and not hasattr(lib, "tir_pool_hold")
for _ in range(30):
    out = model.run(feed)
    for k in io.files:
        if k.startswith("out_"):
            np.testing.assert_allclose(out[k[4:]], io[k], rtol=1e-5, atol=1e-6)
model.benchmark(repeat=2, min_repeat_ms=1)
assert "autotune" not in sys.modules
with open("/proc/self/maps") as f:
    maps = f.read()
assert "libgomp" not in maps, "libgomp is loaded"
assert "llvmlite" not in maps and "llvmlite" not in sys.modules
print("OK")
"""


# ---------------------------------------------------------------------------------------------
# the A/B benchmark's rounds
# ---------------------------------------------------------------------------------------------

def test_idle_gap_alternates_the_sides_within_each_round():
    from benchmarks import idle_gap

    events = []
    sides = {name: (lambda name=name: events.append(name)) for name in ("a", "b", "c")}
    result = idle_gap.alternating_rounds(sides, 0.0, rounds=3, sleep=lambda s: None)
    per_turn = idle_gap.HOT_RUNS + idle_gap.TIMED_RUNS
    turns = [events[k] for k in range(0, len(events), per_turn)]
    assert turns == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert set(result) == {"a", "b", "c"}
    assert all(len(v) == idle_gap.TIMED_RUNS for v in result.values())
    assert idle_gap.RUNTIMES["ab"] == ("pool", "gomp")
    with pytest.raises(SystemExit):
        idle_gap.main(["--model", "mobilenet_v2", "--runtime", "tbb"])

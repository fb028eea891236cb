"""The parallel runtime kernels launch their parallel loops on: a thread pool written as LLVM IR.

A kernel's parallel loop calls ``tir_parallel_launch(tramp, data, team)``: the calling thread
opens a *launch* that up to ``team - 1`` pool workers may join, runs its own share
``tramp(data, team, 0)``, closes the launch and waits for the workers that joined it, and no
others.  Each joiner runs ``tramp(data, team, tid)`` with the tid it was given when it joined
(1, 2, ...).  The trampoline (tensor_ir/codegen/parallel.py) gives thread t the t-th segment
of the iterations and lets the running threads take what is left of the others' segments, so
a worker that is slow to wake or has not started yet costs nothing: its chunks are done by the
threads that run.

Join and close.  One 64-bit state word holds the launch's generation (bits 32..63), an *open*
bit (bit 16) and the number of workers that joined (bits 0..15).  The caller publishes the
launch (trampoline, data, team, capacity) and then stores a new generation with the open bit.
A worker joins with a compare-and-swap that adds one to the count, which only succeeds while
that same launch is open and has room; the caller closes with an atomic ``and`` that clears
the open bit and returns the count.  So after the close no worker can join, and the caller
knows exactly how many to wait for (each joiner adds one to a *done* counter as its last touch
of the launch).  A worker that arrives late finds the bit clear and never reads the launch's
data, which lives on the caller's stack.

Idle workers poll the state word ``spin`` times (``set_spin_count``) and then sleep on a futex
(``syscall(SYS_futex)``; the caller wakes them with the next launch).  While the team is
*held* (``hold`` / ``release``, which the model executor calls around a run) they poll without
a limit, so the kernels of one model run never meet a sleeping worker; ``hold`` also wakes the
sleepers, so they are polling again by the time the first kernel launches.

Only one launch runs at a time: a launch that finds another one running (another Python
thread, or a parallel loop inside a parallel body) runs on its calling thread alone.  The pool
starts on first use and grows to the largest team asked for (at most MAX_WORKERS workers).  It
remembers the process that started it: in a forked child, whose copy of the state names
threads that do not exist there, the first call resets the state and starts new workers.

The same module is JIT-compiled once per process (its entry points registered with
``llvm.add_symbol`` so that JIT-loaded kernels resolve them) and linked into exported shared
libraries; it needs libc alone (pthread_create, syscall, sched_getaffinity, getpid).
"""
from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Iterator

import llvmlite.binding as llvm

from ..errors import BuildError

# Polls of an idle worker before it sleeps.  The kernels of a model run back to back with a
# few microseconds between them (and a held team polls without a limit), so this window only
# has to bridge the gaps of code that launches kernels one by one; on a loaded machine a long
# poll takes the core from a thread that has work.
DEFAULT_SPIN_COUNT = 20000
# The most workers the pool starts (the count of joiners has 16 bits in the state word).
MAX_WORKERS = 255
# The futex system call's number per architecture (the first part of the triple).
FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98, "arm64": 98}
# The spin-wait hint per architecture, as an intrinsic (declaration, call); elsewhere a plain
# poll.  An intrinsic rather than inline assembly: emitting inline assembly needs the target's
# assembly parser, which the process may not have initialised.
_PAUSE = {
    "x86_64": ("declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"),
    "aarch64": ("declare void @llvm.aarch64.hint(i32)", "call void @llvm.aarch64.hint(i32 1)"),
}
_PAUSE["arm64"] = _PAUSE["aarch64"]

# Entry points kernels (and the model entry) call.
LAUNCH = "tir_parallel_launch"
TEAM = "tir_parallel_team"
HOLD = "tir_pool_hold"
RELEASE = "tir_pool_release"
# Entry points for this module's Python functions and tests.
SET_SPIN = "tir_pool_set_spin"
GET_SPIN = "tir_pool_spin"
WORKERS = "tir_pool_workers"
SLEEPERS = "tir_pool_sleepers"
ENTRY_POINTS = (LAUNCH, TEAM, HOLD, RELEASE, SET_SPIN, GET_SPIN, WORKERS, SLEEPERS)

_OPEN = 1 << 16
_COUNT_MASK = _OPEN - 1

_TEMPLATE = r"""
@pool_state = internal global i64 0, align 64
@pool_fn = internal global ptr null, align 64
@pool_data = internal global ptr null, align 8
@pool_team = internal global i32 0, align 4
@pool_capacity = internal global i32 0, align 4
@pool_done = internal global i64 0, align 64
@pool_wake = internal global i32 0, align 64
@pool_sleepers = internal global i32 0, align 4
@pool_hold = internal global i32 0, align 64
@pool_spin = internal global i64 {SPIN}, align 8
@pool_busy = internal global i32 0, align 64
@pool_owner = internal global i32 0, align 64
@pool_workers = internal global i32 0, align 4
@pool_cores = internal global i32 1, align 4

declare i64 @syscall(i64, ...)
declare i32 @getpid()
declare i32 @sched_yield()
declare i32 @sched_getaffinity(i32, i64, ptr)
declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_detach(i64)
declare i64 @llvm.ctpop.i64(i64)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

{PAUSE_DECL}
define internal void @pool_pause() alwaysinline nounwind {
  {PAUSE}
  ret void
}

; FUTEX_WAIT_PRIVATE (128): sleep while *addr == val (returns at once when it differs).
define internal void @pool_futex_wait(ptr %addr, i32 %val) nounwind {
  %v = zext i32 %val to i64
  %r = call i64 (i64, ...) @syscall(i64 {FUTEX}, ptr %addr, i64 128, i64 %v, ptr null,
                                    ptr null, i64 0)
  ret void
}

; FUTEX_WAKE_PRIVATE (129): wake every thread sleeping on addr.
define internal void @pool_futex_wake(ptr %addr) nounwind {
  %r = call i64 (i64, ...) @syscall(i64 {FUTEX}, ptr %addr, i64 129, i64 2147483647, ptr null,
                                    ptr null, i64 0)
  ret void
}

; The cores this process may run on (its affinity mask), at least 1.
define internal i32 @pool_count_cores() nounwind {
entry:
  %mask = alloca [128 x i64], align 8
  call void @llvm.memset.p0.i64(ptr %mask, i8 0, i64 1024, i1 false)
  %r = call i32 @sched_getaffinity(i32 0, i64 1024, ptr %mask)
  %ok = icmp eq i32 %r, 0
  br i1 %ok, label %loop, label %none
loop:
  %i = phi i64 [0, %entry], [%inext, %loop]
  %sum = phi i64 [0, %entry], [%snext, %loop]
  %p = getelementptr inbounds i64, ptr %mask, i64 %i
  %word = load i64, ptr %p
  %bits = call i64 @llvm.ctpop.i64(i64 %word)
  %snext = add i64 %sum, %bits
  %inext = add i64 %i, 1
  %more = icmp ult i64 %inext, 128
  br i1 %more, label %loop, label %count
count:
  %n = trunc i64 %snext to i32
  %any = icmp sgt i32 %n, 0
  %cores = select i1 %any, i32 %n, i32 1
  ret i32 %cores
none:
  ret i32 1
}

; The pool's state belongs to the process that set it up.  In a forked child (another pid) the
; state describes the parent's threads: the first thread to notice claims the reset (owner =
; -pid while it resets), resets every word and starts no one (workers start on demand).
define internal void @pool_check_owner() nounwind {
entry:
  %me = call i32 @getpid()
  %resetting = sub i32 0, %me
  br label %check
check:
  %owner = load atomic i32, ptr @pool_owner acquire, align 4
  %mine = icmp eq i32 %owner, %me
  br i1 %mine, label %done, label %other
other:
  %busy = icmp eq i32 %owner, %resetting
  br i1 %busy, label %wait, label %claim
wait:
  %y = call i32 @sched_yield()
  br label %check
claim:
  %pair = cmpxchg ptr @pool_owner, i32 %owner, i32 %resetting acq_rel acquire
  %won = extractvalue { i32, i1 } %pair, 1
  br i1 %won, label %reset, label %check
reset:
  store atomic i64 0, ptr @pool_state monotonic, align 8
  store atomic i64 0, ptr @pool_done monotonic, align 8
  store atomic i32 0, ptr @pool_wake monotonic, align 4
  store atomic i32 0, ptr @pool_sleepers monotonic, align 4
  store atomic i32 0, ptr @pool_hold monotonic, align 4
  store atomic i32 0, ptr @pool_busy monotonic, align 4
  store atomic i32 0, ptr @pool_workers monotonic, align 4
  store ptr null, ptr @pool_fn
  store ptr null, ptr @pool_data
  store atomic i32 0, ptr @pool_capacity monotonic, align 4
  %cores = call i32 @pool_count_cores()
  store i32 %cores, ptr @pool_cores
  store atomic i32 %me, ptr @pool_owner release, align 4
  br label %done
done:
  ret void
}

; A worker: wait for a launch it has not seen, join it when it is open and has room, run its
; share, count itself done; poll `spin` times (no limit while held), then sleep on the futex.
define internal ptr @pool_worker(ptr %arg) nounwind {
entry:
  %s0 = load atomic i64, ptr @pool_state acquire, align 8
  %g0 = lshr i64 %s0, 32
  %open0 = and i64 %s0, {OPEN}
  %was_open = icmp ne i64 %open0, 0
  %g0m = sub i64 %g0, 1
  %seen0 = select i1 %was_open, i64 %g0m, i64 %g0
  br label %idle
idle:
  %seen = phi i64 [%seen0, %entry], [%g, %arrived], [%g, %full], [%g, %ran],
                  [%seen, %awake], [%seen, %no_sleep]
  br label %poll
poll:
  %polls = phi i64 [0, %idle], [%polls_next, %again]
  %s = load atomic i64, ptr @pool_state acquire, align 8
  %sg = lshr i64 %s, 32
  %new = icmp ne i64 %sg, %seen
  br i1 %new, label %arrived_from_poll, label %count
count:
  %held = load atomic i32, ptr @pool_hold monotonic, align 4
  %is_held = icmp sgt i32 %held, 0
  %polls1 = add i64 %polls, 1
  %polls_next = select i1 %is_held, i64 0, i64 %polls1
  %spin = load atomic i64, ptr @pool_spin monotonic, align 8
  %spent = icmp sge i64 %polls1, %spin
  %free = xor i1 %is_held, true
  %tired = and i1 %spent, %free
  br i1 %tired, label %sleep, label %again
again:
  call void @pool_pause()
  br label %poll
arrived_from_poll:
  br label %arrived
arrived:
  %st = phi i64 [%s, %arrived_from_poll], [%seen_value, %lost]
  %g = lshr i64 %st, 32
  %open = and i64 %st, {OPEN}
  %is_open = icmp ne i64 %open, 0
  br i1 %is_open, label %room, label %idle
room:
  %joined = and i64 %st, {MASK}
  ; Atomic: the caller may be publishing a later launch meanwhile (the compare-and-swap
  ; below then fails).
  %cap32 = load atomic i32, ptr @pool_capacity monotonic, align 4
  %cap = zext i32 %cap32 to i64
  %has_room = icmp ult i64 %joined, %cap
  br i1 %has_room, label %join, label %full
full:
  br label %idle
join:
  %plus = add i64 %st, 1
  %pair = cmpxchg ptr @pool_state, i64 %st, i64 %plus acq_rel acquire
  %ok = extractvalue { i64, i1 } %pair, 1
  br i1 %ok, label %run, label %lost
lost:
  %seen_value = extractvalue { i64, i1 } %pair, 0
  br label %arrived
run:
  %fn = load ptr, ptr @pool_fn
  %data = load ptr, ptr @pool_data
  %team = load i32, ptr @pool_team
  %tid64 = add i64 %joined, 1
  %tid = trunc i64 %tid64 to i32
  call void %fn(ptr %data, i32 %team, i32 %tid)
  %d = atomicrmw add ptr @pool_done, i64 1 release
  br label %ran
ran:
  br label %idle
sleep:
  %sl = atomicrmw add ptr @pool_sleepers, i32 1 seq_cst
  %w = load atomic i32, ptr @pool_wake seq_cst, align 4
  %s2 = load atomic i64, ptr @pool_state seq_cst, align 8
  %g2 = lshr i64 %s2, 32
  %moved = icmp ne i64 %g2, %seen
  %h2 = load atomic i32, ptr @pool_hold seq_cst, align 4
  %held2 = icmp sgt i32 %h2, 0
  %stay = or i1 %moved, %held2
  br i1 %stay, label %no_sleep, label %doze
doze:
  call void @pool_futex_wait(ptr @pool_wake, i32 %w)
  br label %awake
awake:
  %sl2 = atomicrmw sub ptr @pool_sleepers, i32 1 seq_cst
  br label %idle
no_sleep:
  %sl3 = atomicrmw sub ptr @pool_sleepers, i32 1 seq_cst
  br label %idle
}

; Start workers until there are `want` (fewer when pthread_create fails).  Called by the
; thread that holds the launch lock.
define internal void @pool_grow(i32 %want) nounwind {
entry:
  %handle = alloca i64, align 8
  br label %check
check:
  %have = load atomic i32, ptr @pool_workers monotonic, align 4
  %short = icmp slt i32 %have, %want
  br i1 %short, label %start, label %done
start:
  %r = call i32 @pthread_create(ptr %handle, ptr null, ptr @pool_worker, ptr null)
  %ok = icmp eq i32 %r, 0
  br i1 %ok, label %started, label %done
started:
  %h = load i64, ptr %handle
  %dr = call i32 @pthread_detach(i64 %h)
  %next = add i32 %have, 1
  store atomic i32 %next, ptr @pool_workers monotonic, align 4
  br label %check
done:
  ret void
}

; The team a launch with `requested` threads gets (0: every core of the affinity mask).
define {VIS} i32 @tir_parallel_team(i32 %requested) nounwind {
entry:
  %given = icmp sgt i32 %requested, 0
  br i1 %given, label %as_given, label %cores
as_given:
  ret i32 %requested
cores:
  call void @pool_check_owner()
  %n = load i32, ptr @pool_cores
  ret i32 %n
}

define {VIS} void @tir_parallel_launch(ptr %fn, ptr %data, i32 %team) nounwind {
entry:
  %alone = icmp slt i32 %team, 2
  br i1 %alone, label %serial, label %lock
lock:
  call void @pool_check_owner()
  %pair = cmpxchg ptr @pool_busy, i32 0, i32 1 acquire monotonic
  %got = extractvalue { i32, i1 } %pair, 1
  br i1 %got, label %setup, label %serial
serial:
  ; One thread: a team of one (its segment is the whole loop).
  call void %fn(ptr %data, i32 1, i32 0)
  ret void
setup:
  %cap0 = sub i32 %team, 1
  %big = icmp sgt i32 %cap0, {MAX_WORKERS}
  %cap1 = select i1 %big, i32 {MAX_WORKERS}, i32 %cap0
  %have = load atomic i32, ptr @pool_workers monotonic, align 4
  %grow = icmp slt i32 %have, %cap1
  br i1 %grow, label %grow_pool, label %publish
grow_pool:
  call void @pool_grow(i32 %cap1)
  br label %publish
publish:
  %now = load atomic i32, ptr @pool_workers monotonic, align 4
  %fewer = icmp slt i32 %now, %cap1
  %cap = select i1 %fewer, i32 %now, i32 %cap1
  store ptr %fn, ptr @pool_fn
  store ptr %data, ptr @pool_data
  store i32 %team, ptr @pool_team
  store atomic i32 %cap, ptr @pool_capacity monotonic, align 4
  store atomic i64 0, ptr @pool_done monotonic, align 8
  %old = load atomic i64, ptr @pool_state monotonic, align 8
  %oldgen = lshr i64 %old, 32
  %gen = add i64 %oldgen, 1
  %genbits = shl i64 %gen, 32
  %state = or i64 %genbits, {OPEN}
  store atomic i64 %state, ptr @pool_state seq_cst, align 8
  %wk = atomicrmw add ptr @pool_wake, i32 1 seq_cst
  %sleepers = load atomic i32, ptr @pool_sleepers seq_cst, align 4
  %asleep = icmp sgt i32 %sleepers, 0
  br i1 %asleep, label %wake, label %share
wake:
  call void @pool_futex_wake(ptr @pool_wake)
  br label %share
share:
  call void %fn(ptr %data, i32 %team, i32 0)
  %closed = atomicrmw and ptr @pool_state, i64 {NOT_OPEN} acq_rel
  %joined = and i64 %closed, {MASK}
  br label %wait
wait:
  %polls = phi i64 [0, %share], [%polls1, %pause], [0, %yield]
  %done = load atomic i64, ptr @pool_done acquire, align 8
  %all = icmp uge i64 %done, %joined
  br i1 %all, label %finish, label %spin
spin:
  %polls1 = add i64 %polls, 1
  %long = icmp ugt i64 %polls1, 4096
  br i1 %long, label %yield, label %pause
pause:
  call void @pool_pause()
  br label %wait
yield:
  ; A joined worker that is still running was descheduled: give it the core.
  %y = call i32 @sched_yield()
  br label %wait
finish:
  store atomic i32 0, ptr @pool_busy release, align 4
  ret void
}

; Keep the workers polling (no sleep) until the matching release; wake those asleep now.
define {VIS} void @tir_pool_hold() nounwind {
entry:
  call void @pool_check_owner()
  %h = atomicrmw add ptr @pool_hold, i32 1 seq_cst
  %wk = atomicrmw add ptr @pool_wake, i32 1 seq_cst
  %sleepers = load atomic i32, ptr @pool_sleepers seq_cst, align 4
  %asleep = icmp sgt i32 %sleepers, 0
  br i1 %asleep, label %wake, label %done
wake:
  call void @pool_futex_wake(ptr @pool_wake)
  br label %done
done:
  ret void
}

; Undo one hold (never below zero: a release without its hold, e.g. across a fork, is ignored).
define {VIS} void @tir_pool_release() nounwind {
entry:
  call void @pool_check_owner()
  br label %try
try:
  %h = load atomic i32, ptr @pool_hold monotonic, align 4
  %positive = icmp sgt i32 %h, 0
  br i1 %positive, label %dec, label %done
dec:
  %h1 = sub i32 %h, 1
  %pair = cmpxchg ptr @pool_hold, i32 %h, i32 %h1 seq_cst monotonic
  %ok = extractvalue { i32, i1 } %pair, 1
  br i1 %ok, label %done, label %try
done:
  ret void
}

define {VIS} void @tir_pool_set_spin(i64 %polls) nounwind {
  %neg = icmp slt i64 %polls, 0
  %p = select i1 %neg, i64 0, i64 %polls
  store atomic i64 %p, ptr @pool_spin monotonic, align 8
  ret void
}

define {VIS} i64 @tir_pool_spin() nounwind {
  %p = load atomic i64, ptr @pool_spin monotonic, align 8
  ret i64 %p
}

define {VIS} i32 @tir_pool_workers() nounwind {
  call void @pool_check_owner()
  %n = load atomic i32, ptr @pool_workers monotonic, align 4
  ret i32 %n
}

define {VIS} i32 @tir_pool_sleepers() nounwind {
  call void @pool_check_owner()
  %n = load atomic i32, ptr @pool_sleepers monotonic, align 4
  ret i32 %n
}
"""


def _arch(triple: str) -> str:
    return triple.split("-")[0]


def runtime_ir(triple: str, hidden: bool = False,
               spin_count: int = DEFAULT_SPIN_COUNT) -> str:
    """The runtime module's IR text for ``triple``.  ``hidden``: the entry points get hidden
    visibility (a shared library that carries the runtime keeps its own and exports none of
    it).  BuildError for an architecture whose futex system call number is not known."""
    arch = _arch(triple)
    if arch not in FUTEX_SYSCALL:
        raise BuildError(f"the parallel runtime has no futex system call number for "
                         f"{arch!r} (triple {triple!r}); known: {sorted(FUTEX_SYSCALL)}; "
                         f"build with the 'gomp' parallel runtime instead")
    text = _TEMPLATE
    for key, value in (("{SPIN}", str(max(0, int(spin_count)))),
                       ("{PAUSE_DECL}", _PAUSE.get(arch, ("", ""))[0]),
                       ("{PAUSE}", _PAUSE.get(arch, ("", ""))[1]),
                       ("{FUTEX}", str(FUTEX_SYSCALL[arch])),
                       ("{OPEN}", str(_OPEN)), ("{NOT_OPEN}", str(~_OPEN)),
                       ("{MASK}", str(_COUNT_MASK)), ("{MAX_WORKERS}", str(MAX_WORKERS)),
                       ("{VIS}", "hidden" if hidden else "")):
        text = text.replace(key, value)
    return f'target triple = "{triple}"\n' + text


def _optimised(text: str, machine: llvm.TargetMachine) -> llvm.ModuleRef:
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as err:
        raise BuildError(f"LLVM rejected the parallel runtime module: {err}") from err
    module.data_layout = str(machine.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pb = llvm.create_pass_builder(machine, pto)
    pb.getModulePassManager().run(module, pb)
    return module


def runtime_module(machine: llvm.TargetMachine, triple: str) -> llvm.ModuleRef:
    """The runtime, optimised for ``machine``, with hidden entry points: what an exported
    model links into its module (``ModuleRef.link_in``)."""
    return _optimised(runtime_ir(triple, hidden=True), machine)


def runtime_object(machine: llvm.TargetMachine, triple: str) -> bytes:
    """The runtime as a relocatable object for ``machine`` (position-independent when the
    machine is), to link into a shared library beside a kernel's object."""
    return machine.emit_object(runtime_module(machine, triple))


# ---------------------------------------------------------------------------------------------
# The JIT's copy: compiled once per process, kept alive for the process
# ---------------------------------------------------------------------------------------------

_jit_lock = threading.Lock()
_jit_engine = None
_jit_addresses: dict[str, int] = {}


def register_jit_runtime() -> None:
    """Compile the runtime into an engine of its own and register its entry points with the
    JIT's symbol resolution (``llvm.add_symbol``).  Called by ``compile._initialize`` before
    any kernel is loaded (so it builds its target machine itself rather than through
    ``compile``, whose initialisation is under way); does nothing the second time."""
    global _jit_engine
    with _jit_lock:
        if _jit_engine is not None:
            return
        # Idempotent: for a call before any kernel was compiled (a Python function below).
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        triple = llvm.get_process_triple()
        target = llvm.Target.from_triple(triple)
        # The large code model: absolute addresses for the libc functions and the data,
        # wherever MCJIT places this code relative to them.
        machine = target.create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
            opt=2, codemodel="large")
        module = _optimised(runtime_ir(triple), machine)
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.finalize_object()
        addresses = {}
        for name in ENTRY_POINTS:
            address = engine.get_function_address(name)
            if not address:
                raise BuildError(f"the parallel runtime lacks its entry point {name!r}")
            addresses[name] = address
            llvm.add_symbol(name, address)
        _jit_addresses.update(addresses)
        _jit_engine = engine


def _ensure_jit() -> None:
    """Make sure the JIT's copy exists (normally the compile module's one-time initialisation
    has made it already)."""
    if not _jit_addresses:
        register_jit_runtime()


def _entry(name: str, restype, *argtypes):
    _ensure_jit()
    return ctypes.CFUNCTYPE(restype, *argtypes)(_jit_addresses[name])


_functions: dict[str, object] = {}


def _call(name: str, restype, argtypes: tuple, *args):
    fn = _functions.get(name)
    if fn is None:
        fn = _functions[name] = _entry(name, restype, *argtypes)
    return fn(*args)


def set_spin_count(polls: int) -> int:
    """How many times an idle worker polls for the next launch before it sleeps (like
    GOMP_SPINCOUNT; 0: sleep at once, as OMP_WAIT_POLICY=passive).  Returns the previous
    count.  Applies to this process's JIT runtime (an exported library has its own)."""
    if not isinstance(polls, int) or isinstance(polls, bool) or polls < 0:
        raise ValueError(f"set_spin_count takes a non-negative number of polls, got "
                         f"{polls!r}")
    previous = spin_count()
    _call(SET_SPIN, None, (ctypes.c_int64,), polls)
    return previous


def spin_count() -> int:
    """The polls an idle worker makes before it sleeps (see set_spin_count)."""
    return int(_call(GET_SPIN, ctypes.c_int64, ()))


def hold() -> None:
    """Keep the team polling (no worker sleeps) until the matching ``release``; wakes the
    workers that sleep now.  Holds nest."""
    _call(HOLD, None, ())


def release() -> None:
    """End one ``hold``."""
    _call(RELEASE, None, ())


@contextlib.contextmanager
def held() -> Iterator[None]:
    """``hold()`` for the duration of the block (e.g. around one model run)."""
    hold()
    try:
        yield
    finally:
        release()


def worker_count() -> int:
    """Workers this process's pool has started (0 before the first parallel launch, and in a
    forked child until its first)."""
    return int(_call(WORKERS, ctypes.c_int32, ()))


def sleeping_workers() -> int:
    """Workers asleep on the futex now."""
    return int(_call(SLEEPERS, ctypes.c_int32, ()))


def team_size(requested: int = 0) -> int:
    """The team a parallel loop compiled with ``num_threads=requested`` runs on (0: every
    core this process may use, as ``Target``'s core count)."""
    return int(_call(TEAM, ctypes.c_int32, (ctypes.c_int32,), requested))

"""Building and measuring on a Ray cluster: RayBuilder and RayRunner.

    from autotune.measure.cluster import RayBuilder, RayRunner, connect
    connect("auto")                       # or an address, or "local" (a one-node cluster here)
    with RayBuilder() as builder, RayRunner() as runner:
        autotune.tune(func, "llvm", trials=256, builder=builder, runner=runner)

Both implement the measurement contract of :mod:`search.measure`, so the tuning loop, the
database and ``tune-model --ray ADDRESS`` use them exactly as the local pool and runner.

Who measures what
    A node advertises the devices it can time as Ray custom resources, one per target it can
    measure, named from the hardware part of the target's fingerprint
    (``autotune-measure-llvm-<hash>``; see :func:`measure_resource`).  ``python -m
    autotune.measure.cluster resources`` prints the JSON to give ``ray start --resources``.
    The runner starts one measuring actor per unit of the resource its target asks for; each
    holds its unit for the run, so no two kernels are ever timed at once on one device, and
    a node whose hardware differs never measures (its resource has another name).  Every
    result carries the measuring node's host name and fingerprint into its record.

What is sent
    Per candidate, the builder sends the scheduled function as JSON (a few kB) and the
    canonical target string to a Ray task (one CPU, anywhere in the cluster); the task returns
    the artifact's bytes (an object file, tens of kB), which the tuner keeps in its work
    folder.  Keeping artifacts with the tuner, not in the object store of the node that built
    them, means a node lost after building costs nothing: the bytes are already here.  The
    runner sends those bytes to a measuring actor with the candidate; the actor writes them
    to its own disk and measures them with a :class:`LocalRunner`, in that LocalRunner's
    isolated worker process as on one machine (a crashing or hanging kernel costs that
    worker, not the actor).  The workload's reference is sent once per actor; its inputs and
    reference outputs are computed on the node and stay there.

What stays central, and what a lost node costs
    The search, the cost model and the database stay in the tuning process, which writes the
    database once per batch as it does locally.  Per actor the runner keeps one candidate in
    flight, with a deadline (the measurement time-out, plus a reference's computation the
    first time an actor meets a workload, plus ``node_timeout``); an actor that dies, or
    misses its deadline (a hung or unreachable node), is dropped and its candidate goes back
    to the queue for another actor, at most ``retries`` times; with no actor left the
    remaining candidates become "runtime" error records.  A build whose node dies is retried
    by Ray once; a build past its time-out is cancelled and is a build error.

Scaling
    Per candidate the tuner sends ~20 kB (the function as JSON) and receives the artifact
    (tens of kB), through a few Ray calls: an empty task's round trip takes 1.3 ms here, and
    going through Ray costs a build 4.5 ms and a measurement 3.4 ms more than the local pool
    and runner do (``benchmarks/ray_throughput``, medians of three runs).  So one tuning
    process keeps on the order of a hundred build workers busy (a search-space build takes
    0.1-1 s).  The database takes one transaction per batch, and ``benchmarks/db_write``
    holds it under 5 ms per record: at least 200 records a second, where each measuring node
    produces one or two, so the database binds only past a hundred or so nodes.  Before that,
    the search itself binds (proposing and scoring a batch takes about a second in Python): run
    one ``tune-model`` per model or per target, each with its own database, and merge the
    databases afterwards (``python -m records export`` then ``import``).
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from records import canonical_target, hardware_hash, host_name, target_fingerprint
from search.measure import (
    Builder,
    BuildResult,
    MeasureConfig,
    MeasureInput,
    MeasureResult,
    SequentialRunner,
    check_lengths,
)
from tensor_ir import intrinsics
from tensor_ir.devices import opencl_device_facts
from tensor_ir.func import PrimFunc
from tensor_ir.target import Target

from ..backends import backend_for
from .builder import clean_stale_build_dirs, handle_build_request, make_build_dir

__all__ = ["RayBuilder", "RayRunner", "connect", "measure_resource", "node_resources"]

RESOURCE_PREFIX = "autotune-measure-"

# Seconds the runner waits for its measuring actors to start (a node must start a Python
# worker and import the project; on a loaded node that takes several seconds).
_START_TIMEOUT = 60.0
# Seconds added to MeasureConfig.timeout for loading the artifact, the check and transfers.
_GRACE_SECONDS = 2.0


def _ray():
    """The ray module, imported on first use: it is an optional extra (``.[ray]``)."""
    try:
        import ray
    except ImportError:
        raise ImportError("the Ray builder and runner need Ray: pip install 'autotune[ray]' "
                          "(or pip install ray)") from None
    return ray


# ---------------------------------------------------------------------------------------------
# Resources and the connection
# ---------------------------------------------------------------------------------------------

def measure_resource(target: Target | str) -> str:
    """The Ray custom resource of a node that can time ``target``: named from the hardware
    part of the target's fingerprint, so nodes with the same CPU (or GPU) share it and a
    node with other hardware never takes a measurement meant for this one."""
    target = target if isinstance(target, Target) else Target(target)
    digest = hardware_hash(target_fingerprint(canonical_target(target)))
    return f"{RESOURCE_PREFIX}{target.kind}-{digest[:16]}"


def node_resources() -> dict[str, float]:
    """The resources this machine should advertise (``ray start --resources``): one unit of
    the measure resource of its CPU, and of its OpenCL device when it has one."""
    out = {measure_resource(Target.current_host()): 1.0}
    if opencl_device_facts(None):  # empty without an OpenCL runtime: nothing more to advertise
        out[measure_resource(Target("opencl"))] = 1.0
    return out


def connect(address: str | None = "auto") -> None:
    """Join the Ray cluster at ``address`` ("auto": the one started on this machine with
    ``ray start``; "local": start a one-node cluster here that advertises this machine's
    measure resources).  Nothing happens when this process is connected already."""
    ray = _ray()
    if ray.is_initialized():
        return
    import logging

    options = {"logging_level": logging.WARNING, "log_to_driver": False,
               "configure_logging": True}
    if address in (None, "local"):
        ray.init(resources=node_resources(), include_dashboard=False, **options)
    else:
        ray.init(address=address, **options)


# ---------------------------------------------------------------------------------------------
# Builder
# ---------------------------------------------------------------------------------------------

def build_to_bytes(candidate: dict, suffix: str, extras: dict | None = None) -> dict:
    """Ray task body: build one candidate (its MeasureInput.to_json form) as the local
    builder's workers do, and return its artifact's bytes (the tuner's machine keeps them)
    with the node that built it.  ``extras``: what the target's backend adds to a build
    request (Backend.build_request: the run-time registered intrinsics it uses)."""
    folder = make_build_dir()  # owned: swept by clean_stale_build_dirs if the task is killed
    try:
        path = os.path.join(folder, "candidate" + suffix)
        request = {**(extras or {}), "input": candidate, "path": path}
        reply = handle_build_request(request, {})
        if not reply.get("error"):
            with open(path, "rb") as f:
                reply["artifact"] = f.read()
        reply["host"] = host_name()
        return reply
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class RayBuilder(Builder):
    """Builds candidates as Ray tasks anywhere in the cluster (``num_cpus`` each), at most
    ``max_in_flight`` at a time (default: the cluster's CPUs), each within ``timeout``
    seconds of starting.  Artifacts are written under ``work_dir`` on this machine (default:
    a temporary folder removed by ``close``).  ``address`` is passed to :func:`connect`."""

    def __init__(self, address: str | None = "auto", timeout: float = 30.0,
                 work_dir: str | None = None, max_in_flight: int | None = None,
                 num_cpus: float = 1.0):
        if not timeout > 0:
            raise ValueError(f"RayBuilder: timeout must be > 0 seconds, got {timeout!r}")
        if max_in_flight is not None and not (isinstance(max_in_flight, int)
                                              and max_in_flight >= 1):
            raise ValueError(f"RayBuilder: max_in_flight must be an int >= 1, got "
                             f"{max_in_flight!r}")
        connect(address)
        ray = _ray()
        self.timeout = float(timeout)
        self.max_in_flight = max_in_flight or max(1, int(ray.cluster_resources().get("CPU",
                                                                                      1)))
        self._task = ray.remote(build_to_bytes).options(num_cpus=num_cpus, max_retries=1,
                                                         retry_exceptions=False)
        self._own_dir = work_dir is None
        self.work_dir = make_build_dir() if work_dir is None \
            else work_dir
        os.makedirs(self.work_dir, exist_ok=True)
        self._counter = 0
        self._closed = False
        self.hosts: dict[str, int] = {}  # host name -> candidates it built

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        if self._closed:
            raise RuntimeError("RayBuilder.build called after close()")
        ray = _ray()
        results: list[BuildResult | None] = [None] * len(inputs)
        pending = list(range(len(inputs)))[::-1]
        flight: dict = {}  # ObjectRef -> (input index, start)
        while pending or flight:
            while pending and len(flight) < self.max_in_flight:
                i = pending.pop()
                inp = inputs[i]
                # The wire form carries the resolved target string: a node resolving plain
                # "llvm" would compile for its own CPU, not for the one the tuner asked for.
                backend, extras = backend_for(inp.target), {}
                backend.build_request(inp, extras)
                ref = self._task.remote(inp.to_json(reference=False), backend.artifact_suffix,
                                        extras)
                flight[ref] = (i, time.monotonic())
            nearest = min(start for _, start in flight.values()) + self.timeout
            ready, _ = ray.wait(list(flight), num_returns=1,
                                timeout=max(0.0, nearest - time.monotonic()))
            now = time.monotonic()
            for ref in list(flight):
                i, start = flight[ref]
                if ref in ready:
                    results[i] = self._result(ref, now - start)
                elif now - start >= self.timeout:
                    ray.cancel(ref, force=True)
                    results[i] = BuildResult(None, f"build timed out after {self.timeout:g} s "
                                                   "(lowering, codegen and LLVM compilation)",
                                             now - start)
                else:
                    continue
                del flight[ref]
        return results

    def _result(self, ref, seconds: float) -> BuildResult:
        ray = _ray()
        try:
            reply = ray.get(ref)
        except ray.exceptions.WorkerCrashedError as err:
            return BuildResult(None, f"the compiler crashed: {_first_line(err)}", seconds)
        except ray.exceptions.RayError as err:  # a lost node after the retry, a task error
            return BuildResult(None, f"build failed on the cluster: {type(err).__name__}: "
                                     f"{_first_line(err)}", seconds)
        self.hosts[reply["host"]] = self.hosts.get(reply["host"], 0) + 1
        if reply.get("error"):
            return BuildResult(None, reply["error"], reply.get("seconds", seconds))
        self._counter += 1
        suffix = ".json" if reply["artifact"][:1] == b"{" else ".o"
        path = os.path.join(self.work_dir, f"cand{self._counter:07d}{suffix}")
        with open(path, "wb") as f:
            f.write(reply["artifact"])
        return BuildResult(path, None, reply.get("seconds", seconds))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._own_dir:
                shutil.rmtree(self.work_dir, ignore_errors=True)

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


# ---------------------------------------------------------------------------------------------
# Runner
# ---------------------------------------------------------------------------------------------

class Measurer:
    """Ray actor body: a LocalRunner on the node that holds the device (one per unit of the
    measure resource).  Its LocalRunner keeps the workloads' inputs and reference outputs
    between candidates, as it does on one machine."""

    def __init__(self, config: dict, reference_timeout: float):
        from .runner import LocalRunner

        clean_stale_build_dirs()  # those of actors and build tasks killed on this node
        self._runner = LocalRunner(MeasureConfig(**config), reference_timeout)
        self._references: dict[str, PrimFunc | None] = {}
        self._fingerprints: dict[str, dict] = {}

    def info(self) -> dict:
        ray = _ray()
        return {"node_id": ray.get_runtime_context().get_node_id(), "host": host_name(),
                "pid": os.getpid()}

    def measure(self, request: dict) -> dict:
        candidate = request["input"]
        key, target = candidate["workload_key"], candidate["target"]
        if candidate.get("reference") is not None:
            self._references[key] = PrimFunc.from_json(candidate["reference"])
        elif request.get("first"):
            self._references[key] = None
        if request["best"] is not None:
            self._runner.seed_best(key, request["best"])
        try:
            for spec in request.get("intrinsics", ()):
                intrinsics.install(spec)
        except intrinsics.IntrinsicError as err:
            # This node cannot import what the candidate needs: its error, not a lost node.
            reply = MeasureResult.error("runtime", f"on {host_name()}: {err}",
                                        request["build_seconds"]).to_json()
            reply["host"] = host_name()
            return reply
        inp = MeasureInput.from_json(candidate, reference=self._references.get(key))
        # A folder per candidate, marked with this process: the cluster ends actors with
        # ray.kill (no close() runs), and the next builder or actor on the node sweeps it.
        folder = make_build_dir()
        try:
            path = os.path.join(folder, "candidate" + request["suffix"])
            with open(path, "wb") as f:
                f.write(request["artifact"])
            result = self._runner.run([inp], [BuildResult(path, None,
                                                          request["build_seconds"])])[0]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if target not in self._fingerprints:
            self._fingerprints[target] = target_fingerprint(target)
        reply = result.to_json()
        reply["node_id"] = _ray().get_runtime_context().get_node_id()
        reply["host"] = host_name()
        reply["fingerprint"] = self._fingerprints[target]
        return reply

    def close(self) -> None:
        self._runner.close()


@dataclass
class _Actor:
    handle: object
    resource: str
    node_id: str = ""
    host: str = ""
    pid: int = 0
    workloads: set = None  # workload keys whose reference it has been sent

    def __post_init__(self):
        if self.workloads is None:
            self.workloads = set()


class RayRunner(SequentialRunner):
    """Measures candidates on the cluster's nodes that hold the target's hardware.

    ``resource`` overrides the measure resource derived from each candidate's target (see
    :func:`measure_resource`).  ``node_timeout``: seconds past a candidate's own time-out after
    which its node is taken for lost.  ``retries``: how often a candidate whose node was lost
    is measured again elsewhere.  ``log``: called with a line when a node is lost or none is
    left.  ``config``/``reference_timeout`` as for LocalRunner.
    """

    def __init__(self, config: MeasureConfig | None = None, address: str | None = "auto",
                 resource: str | None = None, reference_timeout: float = 300.0,
                 node_timeout: float = 30.0, retries: int = 2,
                 start_timeout: float = _START_TIMEOUT,
                 log: Callable[[str], None] | None = None):
        if not node_timeout > 0:
            raise ValueError(f"RayRunner: node_timeout must be > 0 seconds, got "
                             f"{node_timeout!r}")
        if not (isinstance(retries, int) and retries >= 0):
            raise ValueError(f"RayRunner: retries must be an int >= 0, got {retries!r}")
        connect(address)
        super().__init__()
        self.config = config or MeasureConfig()
        self.resource = resource
        self.reference_timeout = float(reference_timeout)
        self.node_timeout = float(node_timeout)
        self.retries = retries
        self.start_timeout = float(start_timeout)
        self.log = log
        self._actor_class = None
        self._actors: dict[str, list[_Actor]] = {}  # resource -> live actors
        self._lock = threading.Lock()
        self.lost_nodes: list[str] = []        # Ray node ids of the actors dropped
        self.measured_on: dict[str, int] = {}  # Ray node id -> candidates measured there

    # -- what the tuner asks ----------------------------------------------------------------
    def nodes(self) -> list[dict]:
        """The measuring actors in use: host, Ray node id, process id, resource and how many
        candidates each measured."""
        with self._lock:
            return [{"host": a.host, "node_id": a.node_id, "pid": a.pid,
                     "resource": a.resource, "measured": self.measured_on.get(a.node_id, 0)}
                    for actors in self._actors.values() for a in actors]

    def describe(self) -> str:
        """One line for a progress display: the nodes measuring and what each measured."""
        nodes = self.nodes()
        if not nodes and not self.lost_nodes:
            return "ray: no measuring node started yet"
        shown = ", ".join(f"{n['host']}/{n['node_id'][:6]} ({n['measured']})" for n in nodes)
        lost = f"; {len(self.lost_nodes)} lost" if self.lost_nodes else ""
        return f"ray: measuring on {len(nodes)} node(s): {shown or 'none'}{lost}"

    # -- the contract ------------------------------------------------------------------------
    def run(self, inputs: Sequence[MeasureInput],
            builds: Sequence[BuildResult]) -> list[MeasureResult]:
        if self._closed:
            raise RuntimeError("RayRunner.run called after close()")
        check_lengths(inputs, builds)
        results: list[MeasureResult | None] = [None] * len(inputs)
        groups: dict[str, list[int]] = {}
        for i, (inp, b) in enumerate(zip(inputs, builds)):
            if b.error is not None:
                results[i] = MeasureResult.error("build", b.error, b.build_seconds)
                continue
            resource = self.resource or measure_resource(inp.target)
            groups.setdefault(resource, []).append(i)
        for resource, indices in groups.items():
            self._run_group(resource, indices, inputs, builds, results)
        return results

    def _run_group(self, resource: str, indices: list[int], inputs, builds, results) -> None:
        ray = _ray()
        actors = self._ensure_actors(resource)
        pending = list(indices)[::-1]
        attempts = dict.fromkeys(indices, 0)
        idle = list(actors)
        flight: dict = {}  # ObjectRef -> (index, actor, start, deadline)
        while pending or flight:
            if pending and not idle and not flight:
                # Every actor is gone: try once more for fresh ones (a node may have joined
                # or restarted), else the rest of the group cannot be measured.
                idle = self._ensure_actors(resource)
                if not idle:
                    if _ray().cluster_resources().get(resource, 0) >= 1:
                        why = (f"every unit of the resource {resource} stayed taken for "
                               f"{self.start_timeout:g} s (another tuner measuring on its "
                               f"nodes?)")
                    else:
                        why = (f"no node of the Ray cluster offers the resource {resource} "
                               f"(start one with `ray start ... --resources` as printed by "
                               f"`python -m autotune.measure.cluster resources` on it)")
                    if self.lost_nodes:
                        why = f"every node measuring {resource} was lost; {why}"
                    for i in pending:
                        results[i] = MeasureResult.error("runtime", why,
                                                         builds[i].build_seconds)
                    if self.log:
                        self.log(f"[ray] {why}")
                    return
            while pending and idle:
                i = pending.pop()
                try:
                    with open(builds[i].artifact_path, "rb") as f:
                        artifact = f.read()
                except OSError as err:
                    results[i] = MeasureResult.error(
                        "runtime", f"cannot read the artifact {builds[i].artifact_path}: "
                                   f"{err.strerror or err}", builds[i].build_seconds)
                    continue
                actor = idle.pop()
                request, deadline = self._request(inputs[i], builds[i], artifact, actor)
                try:
                    ref = actor.handle.measure.remote(request)
                except ray.exceptions.RayError:
                    self._drop(actor, "it could not be reached")
                    pending.append(i)
                    continue
                flight[ref] = (i, actor, time.monotonic(), deadline)
            if not flight:
                continue
            nearest = min(d for *_, d in flight.values())
            ready, _ = ray.wait(list(flight), num_returns=1,
                                timeout=max(0.0, nearest - time.monotonic()))
            now = time.monotonic()
            for ref in list(flight):
                i, actor, start, deadline = flight[ref]
                if ref in ready:
                    try:
                        reply = ray.get(ref)
                    except ray.exceptions.RayError as err:
                        self._drop(actor, f"{type(err).__name__}: {_first_line(err)}")
                        reply = None
                else:
                    if now < deadline:
                        continue
                    self._drop(actor, f"no reply within {deadline - start:.0f} s")
                    reply = None
                del flight[ref]
                if reply is None:
                    attempts[i] += 1
                    if attempts[i] > self.retries:
                        results[i] = MeasureResult.error(
                            "runtime", f"lost the node measuring it {attempts[i]} times",
                            builds[i].build_seconds, now - start)
                    else:
                        pending.append(i)
                    continue
                idle.append(actor)
                results[i] = self._result(inputs[i], reply)

    def _request(self, inp: MeasureInput, build: BuildResult, artifact: bytes,
                 actor: _Actor) -> tuple[dict, float]:
        key = inp.workload_key
        # The first candidate of a workload on this actor carries the reference, and may
        # wait for the reference outputs to be computed.
        first = key not in actor.workloads
        request = {"input": inp.to_json(reference=first), "first": first,
                   "artifact": artifact,
                   "suffix": os.path.splitext(build.artifact_path)[1] or ".o",
                   "build_seconds": build.build_seconds, "best": self._best.get(key)}
        backend_for(inp.target).build_request(inp, request)  # the intrinsics it ships
        # A node may first wait for its host to be quiet (MeasureConfig.quiet_wait).
        budget = (self.config.timeout + self.config.quiet_wait + _GRACE_SECONDS
                  + self.node_timeout)
        if first:
            actor.workloads.add(key)
            budget += self.reference_timeout
        return request, time.monotonic() + budget

    def _result(self, inp: MeasureInput, reply: dict) -> MeasureResult:
        node = reply.pop("node_id")
        result = MeasureResult.from_json(reply)  # with the node's host and fingerprint
        self.measured_on[node] = self.measured_on.get(node, 0) + 1
        if not result.is_error:
            best = self._best.get(inp.workload_key)
            if best is None or result.median < best:
                self._best[inp.workload_key] = result.median
        return result

    # -- actors ------------------------------------------------------------------------------
    def _ensure_actors(self, resource: str) -> list[_Actor]:
        """The live actors for ``resource``, starting one per unit the cluster has free."""
        ray = _ray()
        with self._lock:
            live = self._actors.setdefault(resource, [])
        free = int(ray.available_resources().get(resource, 0))
        if free < 1 and not live and ray.cluster_resources().get(resource, 0) >= 1:
            # The cluster has the resource but every unit is taken: by the actors of a
            # runner closed just now (Ray frees a killed actor's resources a moment later, so
            # a runner opened right after another found none and failed its whole batch) or
            # by another tuner.  Wait for a unit as long as for an actor to start.
            deadline = time.monotonic() + self.start_timeout
            while free < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
                free = int(ray.available_resources().get(resource, 0))
        if free < 1:
            return list(live)
        if self._actor_class is None:
            self._actor_class = ray.remote(Measurer)
        config = {name: getattr(self.config, name)
                  for name in MeasureConfig.__dataclass_fields__}
        started = [_Actor(self._actor_class.options(
            resources={resource: 1}, num_cpus=0, max_restarts=0,
            max_concurrency=1).remote(config, self.reference_timeout), resource)
            for _ in range(free)]
        refs = {a.handle.info.remote(): a for a in started}
        ready, waiting = ray.wait(list(refs), num_returns=len(refs),
                                  timeout=self.start_timeout)
        for ref in ready:
            actor = refs[ref]
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError:
                ray.kill(actor.handle, no_restart=True)
                continue
            actor.node_id, actor.host, actor.pid = info["node_id"], info["host"], info["pid"]
            with self._lock:
                live.append(actor)
        for ref in waiting:  # the resource was taken meanwhile (another tuner): give it back
            ray.kill(refs[ref].handle, no_restart=True)
        return list(live)

    def _drop(self, actor: _Actor, why: str) -> None:
        ray = _ray()
        with self._lock:
            live = self._actors.get(actor.resource, [])
            if actor in live:
                live.remove(actor)
        with contextlib.suppress(Exception):
            ray.kill(actor.handle, no_restart=True)
        self.lost_nodes.append(actor.node_id)
        if self.log:
            self.log(f"[ray] lost the measuring node {actor.host} ({actor.node_id[:8]}): "
                     f"{why}; its candidate goes to another node")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        ray = _ray()
        with self._lock:
            actors = [a for live in self._actors.values() for a in live]
            self._actors.clear()
        if not ray.is_initialized():
            return
        closing = [a.handle.close.remote() for a in actors]
        with contextlib.suppress(Exception):
            ray.wait(closing, num_returns=len(closing), timeout=10)
        for a in actors:
            with contextlib.suppress(Exception):
                ray.kill(a.handle, no_restart=True)

    def __del__(self):
        with contextlib.suppress(Exception):
            self.close()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv != ["resources"]:
        print("usage: python -m autotune.measure.cluster resources\n  prints the --resources "
              "JSON of this machine for `ray start`", file=sys.stderr)
        return 2
    print(json.dumps(node_resources()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

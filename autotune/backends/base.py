"""The Backend interface and the registry that maps a target to its backend.

A backend is everything the rest of the package needs to know about one kind of hardware: why
code for a target cannot run here, how a function compiles into a kernel in this process, the
schedule a build takes without a tuning record and the first programs a tuning run measures,
the device a model executor keeps its buffers on, and the two halves of measurement: what the
tuner's side adds to a build or run request, and what the builder's and runner's worker
processes do with it (build an artifact, load it, time it by :mod:`autotune.measure.protocol`).

Backends are registered by name; :func:`backend_for` gives the most recently registered one
that claims a target (a backend claims the targets of its kind unless it says otherwise), so a
custom target registered later (the simulated accelerator, ``autotune.accel``) takes over the
targets it names from the generic CPU backend.  Code outside this package asks the backend; it
never compares ``target.kind`` strings.
"""
from __future__ import annotations

import threading

from tensor_ir.errors import BuildError
from tensor_ir.target import Target, TargetError

__all__ = ["Backend", "backend_for", "register", "registered"]


class Backend:
    """One kind of hardware.  Subclasses set ``name`` and ``kind`` and override what their
    hardware does differently; the defaults here say "not supported" with a typed error."""

    #: Registry key.  Workers find a request's backend again from its target string.
    name: str = ""
    #: The Target kind whose targets this backend serves (see :meth:`claims`).
    kind: str = ""
    #: Kernels run on the host's CPU cores out of host memory: the model's cache state is
    #: reproduced when its tasks are timed, the rerank times records inside the built
    #: model, and the report's peak figures apply.
    cpu: bool = False
    #: The file name ending of a candidate's build artifact.
    artifact_suffix: str = ".o"

    def claims(self, target: Target) -> bool:
        """Whether this backend serves ``target``."""
        return target.kind == self.kind

    # -- in this process -----------------------------------------------------------------------
    def unavailable(self, target: Target) -> str | None:
        """Why code for ``target`` cannot run on this machine (no device, no runtime, another
        CPU), or None when it can."""
        return f"the {self.name} backend runs nothing on this machine"

    def compile(self, func, target: Target, name: str | None = None):
        """A callable kernel of the scheduled (or lowered) ``func`` for ``target``."""
        raise BuildError(f"the {self.name} backend cannot build kernels in this process")

    def default_schedule(self, func, target: Target, seed: int = 0):
        """The program a build takes for ``func`` without a tuning record (a PrimFunc), or
        None when there is none."""
        return None

    def tuning_seeds(self, func, target: Target) -> list:
        """Traces a tuning run measures first, before any search."""
        return []

    def model_device(self, target: Target):
        """The device a model executor keeps its buffers on; None: host memory (the
        CPU executor)."""
        raise BuildError(f"the {self.name} backend does not build whole models")

    # -- measurement, the tuner's side ---------------------------------------------------------
    def build_request(self, inp, request: dict) -> None:
        """Add to ``request`` what the build worker needs beyond the candidate's wire form
        (MeasureInput.to_json) and only this process knows."""

    def run_request(self, inp, request: dict, config) -> str | None:
        """Add what the run worker needs to ``request``; returns why the candidate cannot be
        run here instead, or None."""
        return None

    # -- measurement, the workers' side --------------------------------------------------------
    def build_artifact(self, inp, path: str) -> None:
        """Build worker: write the artifact of the candidate ``inp`` (a MeasureInput) to
        ``path`` (typed errors for a program that cannot be a kernel)."""
        raise BuildError(f"the {self.name} backend has no build worker")

    def measure(self, request: dict, work: dict, state: dict) -> dict:
        """Run worker: load and time one artifact against its prepared workload ``work``;
        the reply of autotune.measure.runner's protocol."""
        return {"error_kind": "runtime",
                "error_msg": f"the {self.name} backend has no run worker"}

    def reference_kernel(self, func, target: Target):
        """Run worker: a host CPU kernel computing the unscheduled ``func``'s outputs, the
        reference every candidate is checked against."""
        raise BuildError(f"the {self.name} backend computes no reference outputs")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} for {self.kind} targets>"


_REGISTRY: dict[str, Backend] = {}
_LOCK = threading.Lock()


def register(backend: Backend, overwrite: bool = False) -> Backend:
    """Add ``backend`` under its name; it then serves the targets it claims, ahead of those
    registered before it.  A name registered twice is a TargetError unless ``overwrite``."""
    if not isinstance(backend, Backend) or not backend.name or not backend.kind:
        raise TargetError(f"register: {backend!r} is not a Backend with a name and a kind")
    with _LOCK:
        if backend.name in _REGISTRY and not overwrite:
            raise TargetError(f"a backend named {backend.name!r} is already registered")
        _REGISTRY.pop(backend.name, None)
        _REGISTRY[backend.name] = backend
    return backend


def registered() -> dict[str, Backend]:
    """The registered backends by name, in registration order."""
    with _LOCK:
        return dict(_REGISTRY)


def backend_for(target: Target | str) -> Backend:
    """The backend serving ``target``: the last registered that claims it."""
    target = target if isinstance(target, Target) else Target(target)
    for backend in reversed(list(registered().values())):
        if backend.claims(target):
            return backend
    raise TargetError(f"no backend serves target {str(target)!r} (registered: "
                      f"{', '.join(registered()) or 'none'})")

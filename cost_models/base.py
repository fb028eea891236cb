"""CostModel: the interface every cost model implements, candidates, and the model registry.

    model = cost_models.create("xgb", seed=0)
    model.update(candidates, run_times)        # measured seconds; None / inf for errors
    scores = model.predict(more_candidates)    # higher is better (faster)
    model.save("model.json"); again = cost_models.load("model.json")

A candidate is a scheduled (or lowered) PrimFunc, or a :class:`ModelInput` that caches its
features and names its workload (the query group the ranking objectives compare within).
A user model subclasses :class:`CostModel` and is registered with :func:`register`, or passed
as an instance wherever a kind is accepted.
"""
from __future__ import annotations

import abc
import json
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensor_ir.func import PrimFunc

from . import features as _features

# JSON key naming the model kind in a saved file (read by load()).
KIND_KEY = "cost_model"


class CostModelError(ValueError):
    """A cost model was misused (unknown kind, mismatched lengths, an unreadable or
    incompatible saved file)."""


class ModelInput:
    """What a cost model takes: a candidate program with what the models derive from it,
    computed once (named apart from schedules.Candidate and search.SearchCandidate).

    ``func`` is the scheduled PrimFunc (or a lowered one); ``workload`` a key for the workload
    it implements (candidates are only ranked against others of the same workload; by
    default the function's name and parameter shapes); ``features`` may be given when known
    (read back from a database), in which case ``func`` may be None.  ``target`` (a Target or
    its string) is what ``func`` is built for: a GPU target lowers it as the GPU build does and
    sizes the occupancy estimate; None tells GPU programs by their thread bindings.
    """

    __slots__ = ("_features", "_workload", "func", "target")

    def __init__(self, func: PrimFunc | None = None, workload: str | None = None,
                 features: np.ndarray | None = None, target=None):
        if func is None and features is None:
            raise CostModelError("a ModelInput needs a func or precomputed features")
        if func is not None and not isinstance(func, PrimFunc):
            raise CostModelError(f"ModelInput func must be a PrimFunc, got {type(func).__name__}")
        if features is not None:
            features = np.asarray(features, dtype=np.float32)
            if features.shape != (_features.NUM_FEATURES,):
                raise CostModelError(f"ModelInput features have shape {features.shape}; expected "
                                     f"({_features.NUM_FEATURES},) for feature version "
                                     f"{_features.FEATURE_VERSION}")
        self.func = func
        self.target = target
        self._workload = workload
        self._features = features

    @property
    def workload(self) -> str:
        if self._workload is None:
            self._workload = default_workload_key(self.func) if self.func is not None else ""
        return self._workload

    @property
    def features(self) -> np.ndarray:
        if self._features is None:
            self._features = _features.features(self.func, self.target)
        return self._features

    def __repr__(self) -> str:
        name = self.func.name if self.func is not None else "<features>"
        return f"ModelInput({name}, workload={self.workload!r})"


def default_workload_key(func: PrimFunc) -> str:
    """Name, parameter shapes and dtypes: what scheduling never changes."""
    parts = []
    for buf in func.params:
        dims = "x".join(str(getattr(s, "value", "?")) for s in buf.shape)
        parts.append(f"{buf.dtype}[{dims}]")
    return f"{func.name}({', '.join(parts)})"



def as_candidates(candidates: Sequence) -> list[ModelInput]:
    out = []
    for i, c in enumerate(candidates):
        if isinstance(c, ModelInput):
            out.append(c)
        elif isinstance(c, PrimFunc):
            out.append(ModelInput(c))
        else:
            raise CostModelError(f"candidate {i} is a {type(c).__name__}; expected a PrimFunc "
                                 f"or a cost_models.ModelInput")
    return out


def feature_matrix(candidates: Sequence) -> np.ndarray:
    """``float32 [n, NUM_FEATURES]`` for PrimFuncs and Candidates, or a feature matrix as is.

    Candidates without cached features are featurised in one batch and keep the result.
    """
    if isinstance(candidates, np.ndarray):
        if candidates.ndim != 2 or candidates.shape[1] != _features.NUM_FEATURES:
            raise CostModelError(f"a feature matrix must be [n, {_features.NUM_FEATURES}], got "
                                 f"shape {candidates.shape}")
        return candidates.astype(np.float32, copy=False)
    cands = as_candidates(candidates)
    # One batch per target (its string names it): the target decides the lowering.
    by_target: dict[str, list[ModelInput]] = {}
    for c in cands:
        if c._features is None:
            by_target.setdefault(str(c.target) if c.target is not None else "", []).append(c)
    for missing in by_target.values():
        rows = _features.extract([c.func for c in missing], missing[0].target)
        for c, row in zip(missing, rows):
            c._features = row
    if not cands:
        return np.zeros((0, _features.NUM_FEATURES), dtype=np.float32)
    return np.stack([c.features for c in cands]).astype(np.float32, copy=False)


def run_times(results: Sequence, n: int) -> np.ndarray:
    """Measured seconds as floats; None, NaN, non-positive and inf mean an error (inf)."""
    if len(results) != n:
        raise CostModelError(f"got {len(results)} results for {n} candidates")
    out = np.empty(n)
    for i, r in enumerate(results):
        if r is None:
            out[i] = math.inf
            continue
        try:
            value = float(r)
        except (TypeError, ValueError) as err:
            raise CostModelError(f"result {i} is {r!r}; expected run time in seconds or None "
                                 f"for an error") from err
        out[i] = value if (math.isfinite(value) and value > 0) else math.inf
    return out


def normalized_throughput(times: np.ndarray, groups: Sequence[str]) -> np.ndarray:
    """``min_time / time`` within each workload group (1 for its fastest), 0 for errors."""
    times = np.asarray(times, dtype=np.float64)
    out = np.zeros(len(times))
    groups = np.asarray(groups, dtype=object)
    for key in dict.fromkeys(groups.tolist()):
        mask = groups == key
        t = times[mask]
        ok = np.isfinite(t)
        if ok.any():
            best = t[ok].min()
            out[mask] = np.where(ok, best / np.where(ok, t, 1.0), 0.0)
    return out


def pairwise_accuracy(scores, times, groups: Sequence[str] | None = None) -> float:
    """Share of candidate pairs (same group, both measured, different times) that ``scores``
    order like the measured throughput; 0.5 is chance.  NaN when there is no such pair."""
    scores = np.asarray(scores, dtype=np.float64)
    times = np.asarray(times, dtype=np.float64)
    if scores.shape != times.shape:
        raise CostModelError(f"{scores.shape[0]} scores for {times.shape[0]} times")
    if groups is None:
        groups = np.zeros(len(times), dtype=np.int64)
    groups = np.asarray(groups, dtype=object)
    right = total = 0.0
    for key in dict.fromkeys(groups.tolist()):
        mask = (groups == key) & np.isfinite(times)
        s, t = scores[mask], times[mask]
        faster = t[:, None] < t[None, :]            # i is faster than j
        higher = s[:, None] > s[None, :]
        ties = s[:, None] == s[None, :]
        total += faster.sum()
        right += (faster & higher).sum() + 0.5 * (faster & ties).sum()
    return float(right / total) if total else math.nan


class CostModel(abc.ABC):
    """Scores candidates so that the search measures the promising ones first.

    ``predict`` returns one score per candidate, higher meaning faster; only the order of the
    scores of one workload matters.  ``update`` adds measured candidates (run times in seconds,
    None or inf for errors) and retrains.  ``save``/``load`` write and read one JSON file
    (never pickle) that :func:`load` can reopen without knowing the kind.
    """

    kind: str = ""

    @abc.abstractmethod
    def update(self, candidates: Sequence, results: Sequence) -> None:
        """Learn from measured ``candidates`` (PrimFuncs or Candidates) and their run times."""

    @abc.abstractmethod
    def predict(self, candidates) -> np.ndarray:
        """Scores (float64 ``[n]``, higher is better) for PrimFuncs, Candidates or a feature
        matrix."""

    @abc.abstractmethod
    def save(self, path: str | os.PathLike) -> None:
        """Write the model (and what it learned from) to ``path``."""

    @abc.abstractmethod
    def load(self, path: str | os.PathLike) -> None:
        """Replace this model's state by the one saved at ``path``."""

    @property
    def is_trained(self) -> bool:
        """Whether ``predict`` orders candidates by something learned.  Search ranks by the
        scores only then: a model pre-trained on other workloads is trained before the first
        measurement of a new task.  False unless a model says otherwise (a random model
        never does)."""
        return False


_REGISTRY: dict[str, Callable[..., CostModel]] = {}


def register(kind: str, factory: Callable[..., CostModel]) -> None:
    """Make ``create(kind, **options)`` call ``factory(**options)`` (a CostModel subclass or
    any callable returning a CostModel)."""
    if not isinstance(kind, str) or not kind:
        raise CostModelError(f"a cost model kind must be a non-empty string, got {kind!r}")
    _REGISTRY[kind] = factory


def kinds() -> list[str]:
    return sorted(_REGISTRY)


def create(kind_or_instance: str | CostModel = "xgb", **options: Any) -> CostModel:
    """A cost model of a registered kind ("xgb", "random", ...), or ``kind_or_instance``
    itself when it already is one (then no options may be given)."""
    if isinstance(kind_or_instance, CostModel):
        if options:
            raise CostModelError(f"options {sorted(options)} were given with a ready "
                                 f"{type(kind_or_instance).__name__} instance")
        return kind_or_instance
    factory = _REGISTRY.get(kind_or_instance) if isinstance(kind_or_instance, str) else None
    if factory is None:
        raise CostModelError(f"unknown cost model {kind_or_instance!r}; known kinds: "
                             f"{', '.join(kinds())}")
    model = factory(**options)
    if not isinstance(model, CostModel):
        raise CostModelError(f"cost model kind {kind_or_instance!r} made a "
                             f"{type(model).__name__}, not a CostModel")
    return model


def read_saved(path: str | os.PathLike, kind: str | None = None) -> dict:
    """The JSON document of a saved model, checked to be of ``kind`` when given."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except OSError as err:
        raise CostModelError(f"cannot read cost model file {os.fspath(path)!r}: {err}") from err
    except json.JSONDecodeError as err:
        raise CostModelError(f"cost model file {os.fspath(path)!r} is not JSON: {err}") from err
    if not isinstance(doc, dict) or KIND_KEY not in doc:
        raise CostModelError(f"{os.fspath(path)!r} is not a saved cost model (no "
                             f"{KIND_KEY!r} key)")
    if kind is not None and doc[KIND_KEY] != kind:
        raise CostModelError(f"{os.fspath(path)!r} holds a {doc[KIND_KEY]!r} cost model, not "
                             f"{kind!r}")
    return doc


def write_saved(path: str | os.PathLike, doc: dict) -> None:
    """Write ``doc`` atomically (a killed process leaves the old file or the new one)."""
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, separators=(",", ":"))
    os.replace(tmp, path)


def load(path: str | os.PathLike) -> CostModel:
    """Reopen a saved model of any registered kind."""
    doc = read_saved(path)
    model = create(doc[KIND_KEY])
    model.load(path)
    return model

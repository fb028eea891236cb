"""Cost models trained from a database's records, and a check that they transfer to new workloads.

    data = training_set("tuning.db", target="llvm")       # every record, replayed and featurised
    model = pretrain("tuning.db", out="model.json")         # trained on them, saved
    report = evaluate("tuning.db", folds=5)                 # held-out workloads, model vs random
    autotune.tune(func, search=search.SearchConfig(cost_model="model.json"))  # starts from it

Why: a cold cost model ranks nothing until a task's first batches are measured, so the first
trials of every task are spent at random.  The records of other workloads tuned on the same kind
of hardware already say which program shapes run fast there (vector lanes, register tiles, cache
footprints), so a model trained on them ranks a new workload's candidates from trial 0 and keeps
learning from the new measurements as usual.

Records are replayed through :func:`schedules.postproc.replay`, the one path every consumer of a
record takes (builds, tuning results, re-measurements), for the target each was measured on; a
record that no longer replays in this library version is skipped and counted.  Records of other
target families (see :func:`target_family`) are left out: run times on another machine rank
programs differently.  Workloads are the query groups of the ranking (their database keys, the
keys a tuning run uses), so a pre-trained model compares candidates only within a workload.

:func:`evaluate` holds whole workloads out (scikit-learn's ``GroupKFold``): what it reports is
how the model ranks programs of workloads it never saw, next to a random model's scores on the
same rows, which is what "no transfer" looks like.
"""
from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from records import Database, DatabaseError, workload_key
from schedules.postproc import replay
from tensor_ir.target import Target, TargetError

from . import features as _features
from .base import (
    CostModel,
    CostModelError,
    ModelInput,
    create,
    kinds,
    load,
    normalized_throughput,
    pairwise_accuracy,
)
from .random_model import RandomCostModel

__all__ = ["TrainingSet", "evaluate", "from_spec", "pretrain", "target_family", "training_set"]

# Candidates per workload whose order NDCG judges (the programs a search would measure next).
DEFAULT_TOP_K = 10
# Random scorings the "no transfer" baseline of evaluate() averages its metrics over.
RANDOM_DRAWS = 10


@dataclass(frozen=True)
class TrainingSet:
    """Replayed records of one target family, ready for a cost model.

    ``candidates``: one :class:`ModelInput` per record (the replayed program, its workload key,
    the target it was measured on, and its features, already extracted); ``times``: seconds
    (the record's ranking score: its median, re-measurements pooled in), ``math.inf`` for a
    measurement error; ``workloads``: each row's workload key; ``names``: a readable name per
    workload key; ``family``: the target family; ``skipped``: records left out, by reason
    ("other_target", "no_replay", "no_features")."""

    candidates: tuple[ModelInput, ...]
    times: np.ndarray
    workloads: tuple[str, ...]
    names: dict[str, str]
    family: str
    skipped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.candidates)

    def features(self) -> np.ndarray:
        """``float32 [n, NUM_FEATURES]``."""
        if not self.candidates:
            return np.zeros((0, _features.NUM_FEATURES), dtype=np.float32)
        return np.stack([c.features for c in self.candidates]).astype(np.float32, copy=False)

    def summary(self) -> dict:
        """Counts for a report: rows, errors, workloads, rows per workload, skipped."""
        per = {k: 0 for k in dict.fromkeys(self.workloads)}
        for k in self.workloads:
            per[k] += 1
        return {"family": self.family, "rows": len(self),
                "errors": int(np.sum(~np.isfinite(self.times))), "workloads": len(per),
                "rows_per_workload": {self.names.get(k, k): n for k, n in per.items()},
                "skipped": dict(self.skipped)}


def target_family(target: str | Target) -> str:
    """What records must share with a target to train its model: the kind of target and the
    hardware its programs are compiled for -- for a CPU the triple and the CPU (``-mcpu``), not
    the core count or ``-mattr`` changes; for CUDA the architecture; OpenCL devices as one
    family.  A string that does not parse is a CostModelError naming it."""
    try:
        t = target if isinstance(target, Target) else Target(target)
    except TargetError as err:
        raise CostModelError(f"unknown target {target!r}: {err}") from None
    if t.kind == "llvm":
        return f"llvm -mtriple={t.triple} -mcpu={t.cpu}"
    if t.kind == "cuda":
        return f"cuda -arch={t.arch}"
    return t.kind


def training_set(db: str | os.PathLike | Database, target: str | Target | None = None,
                 workloads: Iterable | None = None, exclude: Iterable | None = None,
                 max_per_workload: int | None = None) -> TrainingSet:
    """Every record of ``db`` (a path or a records.Database) of one target family, replayed
    into its scheduled program and featurised.

    ``target``: the family to read (a target string or Target; see :func:`target_family`);
    None takes the database's only family, and is an error when it holds several.
    ``workloads``/``exclude``: workloads to keep / to leave out, each given as its key, a
    unique prefix of its key (reports show 12 characters), a records.Workload or a PrimFunc:
    what a transfer experiment holds out.  ``max_per_workload``: at most this many records
    per workload, evenly spaced over the order they were measured in (so both a run's
    random start and its refined end are kept), to keep one long-tuned workload from
    dominating the training.

    Error records stay in, with time ``math.inf``: that a program failed (too slow, rejected)
    is something to rank last.  Raises CostModelError for a database that cannot be read, a
    target that does not parse, an unknown workload, or when nothing is left."""
    if max_per_workload is not None and (not isinstance(max_per_workload, int)
                                         or isinstance(max_per_workload, bool)
                                         or max_per_workload < 1):
        raise CostModelError(f"max_per_workload must be a positive int or None, got "
                             f"{max_per_workload!r}")
    want = None if target is None else target_family(target)
    with _opened(db) as database:
        where = database.path
        try:
            # 1. The family: given, or the database's only one.
            families = _families(database.targets())
            present = sorted({f for f in families.values() if f is not None})
            if want is None:
                if not present:
                    raise CostModelError(f"database {where} holds no records")
                if len(present) > 1:
                    raise CostModelError(f"database {where} holds records of several target "
                                         f"families ({'; '.join(present)}); choose one with "
                                         f"target=")
                want = present[0]
            elif want not in present:
                raise CostModelError(f"database {where} holds no records for target family "
                                     f"{want!r}; it holds: {'; '.join(present) or 'none'}")
            # 2. The workloads.
            stored = database.workloads()
            keys = [w.key for w in stored]
            chosen = keys if workloads is None else _resolve(workloads, keys, where)
            dropped = set() if exclude is None else set(_resolve(exclude, keys, where))
            chosen = [k for k in dict.fromkeys(chosen) if k not in dropped]
            by_key = {w.key: w for w in stored}
            # 3. Replay and featurise, workload by workload.
            out = _Collected()
            for key in chosen:
                records = database.records(key)
                ours = [r for r in records if families.get(r.target) == want]
                out.skipped["other_target"] += len(records) - len(ours)
                if max_per_workload is not None and len(ours) > max_per_workload:
                    picks = np.unique(np.linspace(0, len(ours) - 1, max_per_workload)
                                      .round().astype(int))
                    ours = [ours[i] for i in picks]
                _add_workload(out, by_key[key], ours)
        except DatabaseError as err:
            raise CostModelError(f"cannot read tuning records from {where}: {err}") from None
    if not out.candidates:
        raise CostModelError(
            f"no usable records of target family {want!r} in {where} ({len(chosen)} "
            f"workload(s) selected; skipped: {_format_counts(out.skipped)})")
    names = {key: by_key[key].name for key in dict.fromkeys(out.workloads)}
    return TrainingSet(tuple(out.candidates), np.asarray(out.times, dtype=np.float64),
                       tuple(out.workloads), names, want, dict(out.skipped))


def pretrain(db: str | os.PathLike | Database | TrainingSet, out: str | os.PathLike | None = None,
             kind: str | CostModel = "xgb", seed: int = 0, **filters) -> CostModel:
    """A cost model of ``kind`` (a registered kind, created with ``seed``, or an instance)
    trained on :func:`training_set` ``(db, **filters)`` (or on ``db`` itself when it is a
    TrainingSet read before), and saved to ``out`` when given.

    The saved file is what ``autotune.tune(func, search=SearchConfig(cost_model=path))`` and ``tune-model
    --cost-model-file`` start from: the model with its training data, so the tuning loop's
    retraining keeps what it learned from the other workloads."""
    data = _data(db, filters)
    if not _has_order(data):
        raise CostModelError(f"no workload of the {data.family!r} records has two successful "
                             f"records of different speed: there is no ranking to learn")
    model = create(kind, seed=seed) if isinstance(kind, str) else create(kind)
    model.update(list(data.candidates), data.times)
    if out is not None:
        model.save(out)
    return model


def evaluate(db: str | os.PathLike | Database | TrainingSet, kind: str = "xgb", folds: int = 5,
             seed: int = 0, top_k: int = DEFAULT_TOP_K, **filters) -> dict:
    """How well a model of ``kind`` trained on some workloads ranks the programs of others.

    The workloads of :func:`training_set` ``(db, **filters)`` (or of ``db``, a TrainingSet)
    are split into ``folds`` groups
    (scikit-learn ``GroupKFold``; fewer when there are fewer workloads); each group in turn is
    held out, a fresh model is trained on the rest and scores the held-out rows.  Metrics,
    computed only within a workload (across workloads, times are not comparable):

    ``accuracy``  pairwise ranking accuracy (:func:`~cost_models.pairwise_accuracy`: share of
                  measured pairs ordered right; 0.5 is chance), pooled over pairs.
    ``spearman``, ``kendall``   rank correlation of score and throughput per workload
                  (measured rows only; scipy.stats), averaged over workloads.
    ``ndcg``      ``sklearn.metrics.ndcg_score`` at ``top_k`` per workload, relevance the
                  normalised throughput (``best / time``, 0 for errors), averaged.

    The same metrics are given for a random model on the same rows ("random", averaged over
    RANDOM_DRAWS seeded scorings): what no transfer scores.  Returns a JSON-ready dict: ``pooled`` ({"model": ..., "random": ...}),
    ``per_fold`` and ``per_workload`` lists, and the counts.  NaN where a metric has nothing to
    compare (a workload with fewer than two measured rows)."""
    from sklearn.model_selection import GroupKFold

    if not isinstance(folds, int) or isinstance(folds, bool) or folds < 2:
        raise CostModelError(f"folds must be an int >= 2, got {folds!r}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise CostModelError(f"top_k must be a positive int, got {top_k!r}")
    if not isinstance(kind, str) or kind not in kinds():
        raise CostModelError(f"unknown cost model {kind!r}; known kinds: {', '.join(kinds())}")
    data = _data(db, filters)
    groups = np.asarray(data.workloads, dtype=object)
    unique = list(dict.fromkeys(data.workloads))
    if len(unique) < 2:
        raise CostModelError(f"evaluate holds whole workloads out, so it needs records of at "
                             f"least two workloads; the {data.family!r} records are of "
                             f"{len(unique)}")
    n_folds = min(folds, len(unique))
    x = data.features()
    candidates = list(data.candidates)
    predicted = np.zeros(len(data))
    # The baseline needs no training: RANDOM_DRAWS seeded random scorings of every row, whose
    # metrics are averaged (one draw alone swings by several points on a small workload).
    draws = np.stack([RandomCostModel(seed=seed + d).predict(x) for d in range(RANDOM_DRAWS)])

    def both(rows) -> dict:
        t, g = data.times[rows], groups[rows]
        runs = [_metrics(r[rows], t, g, top_k) for r in draws]
        return {"model": _metrics(predicted[rows], t, g, top_k),
                "random": {k: _mean([m[k] for m in runs]) for k in runs[0]}}

    per_fold = []
    splits = GroupKFold(n_splits=n_folds).split(x, groups=groups)
    for fold, (train, test) in enumerate(splits):
        # 1. Train a fresh model on the other workloads, 2. score the held-out ones.
        model = create(kind, seed=seed)
        model.update([candidates[i] for i in train], data.times[train])
        predicted[test] = model.predict(x[test])
        held = list(dict.fromkeys(groups[test].tolist()))
        per_fold.append({"fold": fold, "train_rows": len(train), "test_rows": len(test),
                         "train_workloads": len(unique) - len(held),
                         "test_workloads": [data.names[k] for k in held], **both(test)})
    per_workload = []
    for key in unique:
        rows = groups == key
        per_workload.append({"workload": key, "name": data.names[key], "rows": int(rows.sum()),
                             "measured": int(np.isfinite(data.times[rows]).sum()),
                             **both(rows)})
    return {
        "kind": kind, "family": data.family, "folds": n_folds, "seed": seed, "top_k": top_k,
        "rows": len(data), "workloads": len(unique), "skipped": dict(data.skipped),
        "random_draws": RANDOM_DRAWS, "pooled": both(np.ones(len(data), dtype=bool)),
        "per_fold": per_fold, "per_workload": per_workload,
    }


def from_spec(spec: str | os.PathLike | CostModel, seed: int = 0) -> CostModel:
    """The cost model a tuning call asks for: a CostModel instance as it is; a registered kind
    (created with ``seed``); or the path of a saved model (an ``os.PathLike``, or a string
    naming an existing file), loaded -- a pre-trained model, which tuning keeps training in
    memory and never writes back.  A kind's name wins over a file of the same name.  Anything
    else is a CostModelError naming both readings."""
    if isinstance(spec, CostModel):
        return spec
    if isinstance(spec, str) and spec in kinds():
        return create(spec, seed=seed)
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and os.path.isfile(spec)):
        if not os.path.isfile(spec):
            raise CostModelError(f"cost model file {os.fspath(spec)!r} does not exist")
        return load(spec)
    if isinstance(spec, str):
        raise CostModelError(f"cost model {spec!r} is neither a registered kind (known: "
                             f"{', '.join(kinds())}) nor an existing saved model file")
    raise CostModelError(f"a cost model is given as a kind, a saved model's path or a "
                         f"CostModel instance, got {type(spec).__name__}")


# -- helpers ------------------------------------------------------------------------------------
def _data(db, filters: dict) -> TrainingSet:
    """``db`` as a TrainingSet: read with ``filters``, or one read before (then no filters)."""
    if not isinstance(db, TrainingSet):
        return training_set(db, **filters)
    if filters:
        raise CostModelError(f"filters {sorted(filters)} were given with a ready TrainingSet")
    return db


@dataclass
class _Collected:
    candidates: list = field(default_factory=list)
    times: list = field(default_factory=list)
    workloads: list = field(default_factory=list)
    skipped: dict = field(default_factory=lambda: {"other_target": 0, "no_replay": 0,
                                                   "no_features": 0})


class _opened:
    """A Database for ``db`` (a path, opened read-only and closed on exit, or an open one)."""

    def __init__(self, db):
        self.db = db
        self.own = False

    def __enter__(self) -> Database:
        if isinstance(self.db, Database):
            return self.db
        if not isinstance(self.db, (str, os.PathLike)):
            raise CostModelError(f"a tuning-record database is given as a path or a "
                                 f"records.Database, got {type(self.db).__name__}")
        path = os.fspath(self.db)
        if not os.path.isfile(path):
            raise CostModelError(f"cannot read tuning records: no database file at {path!r}")
        try:
            self.db = Database(path, create=False, readonly=True)
        except (DatabaseError, OSError, ValueError) as err:
            raise CostModelError(f"cannot read tuning records from {path!r}: {err}") from None
        self.own = True
        return self.db

    def __exit__(self, *exc) -> None:
        if self.own:
            self.db.close()


def _families(target_strings: Iterable[str]) -> dict[str, str | None]:
    """Family per stored target string; None for one that no longer parses."""
    out: dict[str, str | None] = {}
    for text in target_strings:
        try:
            out[text] = target_family(text)
        except CostModelError:
            out[text] = None
    return out


def _resolve(given: Iterable, keys: Sequence[str], where: str) -> list[str]:
    """Workload keys for keys, unique key prefixes, Workloads or PrimFuncs."""
    if isinstance(given, (str, bytes)):
        given = [given]
    out = []
    for item in given:
        try:
            key = workload_key(item)
        except TypeError as err:
            raise CostModelError(str(err)) from None
        matches = [k for k in keys if k == key] or [k for k in keys if k.startswith(key)]
        if not matches:
            raise CostModelError(f"database {where} has no workload {key!r}")
        if len(matches) > 1:
            raise CostModelError(f"workload {key!r} is ambiguous in {where}: it starts "
                                 f"{len(matches)} keys")
        out.append(matches[0])
    return out


def _add_workload(out: _Collected, workload, records) -> None:
    """Replay ``records`` of ``workload`` and featurise the programs (per target, batched)."""
    replayed: dict[str, list] = {}
    targets: dict[str, Target] = {}
    for rec in records:
        try:
            target = targets.get(rec.target) or targets.setdefault(rec.target,
                                                                    Target(rec.target))
            func = replay(rec.trace(), workload.func, target).func
        except Exception:  # noqa: BLE001 - a record this version cannot replay is skipped
            out.skipped["no_replay"] += 1
            continue
        seconds = rec.score if rec.score is not None else rec.median
        seconds = math.inf if rec.is_error or seconds is None else float(seconds)
        replayed.setdefault(rec.target, []).append((func, seconds))
    for text, rows in replayed.items():
        target = targets[text]
        funcs = [f for f, _ in rows]
        try:
            x = list(_features.extract(funcs, target))
        except _features.FeatureError:
            x = [_features_or_none(f, target) for f in funcs]
        for (func, seconds), row in zip(rows, x):
            if row is None:
                out.skipped["no_features"] += 1
                continue
            out.candidates.append(ModelInput(func, workload.key, row, target))
            out.times.append(seconds)
            out.workloads.append(workload.key)


def _features_or_none(func, target) -> np.ndarray | None:
    try:
        return _features.features(func, target)
    except Exception:  # noqa: BLE001 - any failure: the record is skipped, and counted
        return None


def _has_order(data: TrainingSet) -> bool:
    groups = np.asarray(data.workloads, dtype=object)
    for key in dict.fromkeys(data.workloads):
        t = data.times[groups == key]
        t = t[np.isfinite(t)]
        if len(t) >= 2 and np.ptp(t) > 0:
            return True
    return False


def _metrics(scores: np.ndarray, times: np.ndarray, groups: np.ndarray, top_k: int) -> dict:
    """accuracy (pooled over pairs), spearman, kendall and ndcg (means over workloads)."""
    from scipy import stats
    from sklearn.metrics import ndcg_score

    relevance = normalized_throughput(times, groups)
    spearman, kendall, ndcg = [], [], []
    for key in dict.fromkeys(groups.tolist()):
        rows = groups == key
        s, t, rel = scores[rows], times[rows], relevance[rows]
        ok = np.isfinite(t)
        if ok.sum() >= 2 and np.ptp(t[ok]) > 0 and np.ptp(s[ok]) > 0:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ties: scipy warns and still answers
                spearman.append(float(stats.spearmanr(s[ok], -t[ok])[0]))
                kendall.append(float(stats.kendalltau(s[ok], -t[ok])[0]))
        elif ok.sum() >= 2 and np.ptp(t[ok]) > 0:
            spearman.append(0.0)   # a constant score orders nothing: no correlation
            kendall.append(0.0)
        if len(s) >= 2 and rel.max() > 0:
            ndcg.append(float(ndcg_score(rel[None, :], s[None, :], k=min(top_k, len(s)))))
    return {"accuracy": pairwise_accuracy(scores, times, groups),
            "spearman": _mean(spearman), "kendall": _mean(kendall), "ndcg": _mean(ndcg)}


def _mean(values: list[float]) -> float:
    values = [v for v in values if math.isfinite(v)]
    return float(np.mean(values)) if values else math.nan


def _format_counts(counts: dict[str, int]) -> str:
    shown = [f"{n} {reason.replace('_', ' ')}" for reason, n in counts.items() if n]
    return ", ".join(shown) or "none"

"""Choosing each heavy task's record inside the built model.

    chosen = rerank_in_model("bert_base_layer", "llvm -num-cores 2", "tuning.db")
    lib = build_model("bert_base_layer", "llvm -num-cores 2", database="tuning.db")  # uses them

The tuner ranks a task's candidates by timing each kernel alone.  Inside the model the same
kernel meets other cache contents: its weights evicted by the kernels between two of its calls,
its input freshly written by its producer, on whichever core wrote it.  The weight rotation and
rewritten inputs of the runner (autotune.measure.runner) bring the alone timing close, but not
close enough to rank candidates within a few percent of each other.  Measured on the BERT
layer's 2000-trial records (2-vCPU Xeon): among the eight best records of FFN1 and of FFN2 by
score, the fastest in the model ran 10-12% faster there than the best by score, in each of two
sets of 15 alternating rounds minutes apart; by score they were within 2% of it.

So after tuning, ``rerank_in_model`` builds the model once per candidate of each heavy task
(the ``k`` best records by score, and the record chosen before), every other task on its best
record, and times the task's kernels inside the model run (``Executor.profile``: the kernels in
order, each call timed) in alternating rounds.  The fastest median becomes the task's choice
for this model (``Database.choose``, context = the model's name), which ``build_model`` with a
database and ``apply_history_best`` prefer over the best by score when they build that model.
A task below ``min_share`` of the model's time is left alone: its candidates' differences are
under the noise of one run.  CPU (llvm) targets only.
"""
from __future__ import annotations

import os
import statistics
import time

from records import Database
from schedules.postproc import replay
from search.loop import make_logger
from tensor_ir.errors import BuildError
from tensor_ir.target import Target

from ..backends import backend_for
from ..frontends import Model, load_model
from ..graph.tasks import Partition
from ..graph.build import build_model, database_lookup

__all__ = ["rerank_in_model"]


def rerank_in_model(model, target: str | Target, database, k: int = 8, rounds: int = 15,
                    min_share: float = 0.05, seed: int = 0, log=False) -> list[dict]:
    """Time the ``k`` best records of each task of ``model`` that takes at least ``min_share``
    of its run inside the built model, ``rounds`` alternating rounds, and store the fastest
    as the task's choice for this model (see the module text).  ``model``: also its
    Partition; ``database``: a records.Database or a path.  Returns per task re-ranked:
    ``task``, ``key``, ``share``, ``chosen`` (record id), ``best_by_score`` (record id),
    ``in_model_ms`` ({record id: median ms}), ``seconds``."""
    for name, value in (("k", k), ("rounds", rounds)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"rerank_in_model: {name} must be an int >= 1, got {value!r}")
    if not 0 <= min_share < 1:
        raise ValueError(f"rerank_in_model: min_share is a share in [0, 1), got {min_share!r}")
    target = target if isinstance(target, Target) else Target(target)
    backend = backend_for(target)
    if not backend.cpu:
        raise BuildError(f"rerank_in_model times kernels in a CPU build; {target} is served "
                         f"by the {backend.name} backend")
    if not isinstance(model, (Model, Partition)):
        model = load_model(model)
    model = Partition.of(model)
    owned = isinstance(database, (str, os.PathLike))
    db = Database(os.fspath(database), create=False) if owned else database
    say = make_logger(log)
    try:
        return _rerank(model, target, db, k, rounds, min_share, seed, say)
    finally:
        if owned:
            db.close()


def _rerank(model: Partition, target: Target, db: Database, k: int, rounds: int,
            min_share: float, seed: int, say) -> list[dict]:
    by_score = database_lookup(db, target)
    base = build_model(model, target, lookup=by_score, seed=seed, warn=False)
    # The tasks' shares of the run, from the kernels' times in the model (a task called
    # twice, like the BERT layer's two layer norms, counts both calls).  Every profile runs
    # on Executor.profile's own seeded random inputs, the same in every build.
    profile = [ms for _, ms in base.profile(repeat=5)]
    total = sum(profile) or 1.0
    per_task: dict[str, float] = {}
    for step, ms in zip(base.steps, profile):
        per_task[step.key] = per_task.get(step.key, 0.0) + ms
    names = {step.key: step.name for step in base.steps}
    del base
    out = []
    for key, ms in sorted(per_task.items(), key=lambda kv: -kv[1]):
        share = ms / total
        if share < min_share:
            break
        candidates = db.best_k(key, str(target), k)
        before = db.chosen(key, str(target), model.name)
        if before is not None and all(r.record_id != before.record_id for r in candidates):
            candidates.append(before)
        if len(candidates) < 2:
            continue
        started = time.perf_counter()
        medians = _time_in_model(model, target, db, by_score, key, candidates, rounds,
                                 seed)
        if not medians:
            continue
        winner = min(medians, key=medians.get)
        db.choose(key, str(target), winner, model.name,
                  details={"in_model_ms": {str(r): m for r, m in medians.items()},
                           "rounds": rounds, "share": share})
        first = next(r.record_id for r in candidates if r.record_id in medians)
        gain = medians[first] / medians[winner] - 1
        say(f"[rerank {model.name}] {names[key]} ({share:.0%} of the run): record "
            f"{winner} chosen, {medians[winner]:.3f} ms in the model against "
            f"{medians[first]:.3f} ms for the best by score ({gain:+.1%}), "
            f"{len(medians)} candidates x {rounds} rounds")
        out.append({"task": names[key], "key": key, "share": share, "chosen": winner,
                    "best_by_score": first, "in_model_ms": medians,
                    "seconds": time.perf_counter() - started})
    return out


def _time_in_model(model: Partition, target: Target, db: Database, by_score, key: str,
                   candidates, rounds: int, seed: int) -> dict[int, float]:
    """{record id: median ms of the task's kernels per run} over ``rounds`` alternating
    rounds, each candidate in its own build of the model (the other tasks on their best by
    score).  A candidate that no longer replays or builds is left out."""
    libs, ids = [], []
    workload = db.workload(key).func
    for record in candidates:
        # Replayed here, not inside build_model: a record that does not replay must be left
        # out, not timed as the default schedule build_model would put in its place.
        try:
            scheduled = replay(record.trace(), workload, target).func
        except Exception as err:  # noqa: BLE001 - a record of another release is skipped
            db.skip_unusable(record, f"{type(err).__name__}: {err}")
            continue

        def lookup(func, scheduled=scheduled):
            return scheduled if func.structural_hash() == key else by_score(func)
        try:
            lib = build_model(model, target, lookup=lookup, seed=seed, warn=False)
        except Exception:  # noqa: BLE001 - a stale record is skipped, not fatal
            continue
        libs.append(lib)
        ids.append(record.record_id)
    if len(libs) < 2:
        return {}
    steps = [i for i, step in enumerate(libs[0].steps) if step.key == key]
    samples: list[list[float]] = [[] for _ in libs]
    for lib in libs:  # warm-up: pages, packed weights, thread pool
        lib.profile(repeat=1)
    for _ in range(rounds):
        for lib, into in zip(libs, samples):
            times = lib.profile(repeat=1)
            into.append(sum(times[i][1] for i in steps))
    return {rid: statistics.median(s) for rid, s in zip(ids, samples)}

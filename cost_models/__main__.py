"""Command line for cost models trained from tuning records: pretrain, evaluate.

    python -m cost_models pretrain --db tuning.db --out model.json [--target T]
        [--workload KEY ...] [--exclude-workload KEY ...] [--max-per-workload N] [--seed N]
    python -m cost_models evaluate --db tuning.db [--folds K] [--top-k K] [same filters]

``pretrain`` trains a model on every replayable record of one target family and saves it
(``autotune.tune(func, search=SearchConfig(cost_model="model.json"))`` and ``tune-model --cost-model-file`` start
from it); ``evaluate`` holds whole workloads out and reports how the model ranks their programs
next to a random model.  Both print JSON on standard output (NaN metrics as null).  A workload
is named by its key or a unique prefix of it.  Exit status 0 on success, 2 on any error (a
database that cannot be read, an unknown target or workload, nothing to train on, an output that
cannot be written), said in one line on standard error.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from .base import CostModelError, kinds
from .pretrain import DEFAULT_TOP_K, evaluate, pretrain, training_set

__all__ = ["main"]

EXIT_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors said in one line (and exit status 2)."""

    def error(self, message: str):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_ERROR)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m cost_models",
                     description="Pre-train a cost model from a tuning-record database, or "
                                 "judge how well one transfers to unseen workloads.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p = sub.add_parser("pretrain", help="train a model on a database's records and save it")
    _common(p)
    p.add_argument("--out", required=True, help="model file to write (JSON)")
    p = sub.add_parser("evaluate", help="grouped cross-validation over workloads, as JSON")
    _common(p)
    p.add_argument("--folds", type=int, default=5,
                   help="workload groups held out in turn (default: 5, at most one per "
                        "workload)")
    p.add_argument("--top-k", type=int, default=DEFAULT_TOP_K,
                   help="candidates per workload NDCG judges (default: %(default)s)")
    return parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, help="tuning-record database (must exist)")
    p.add_argument("--target", default=None,
                   help="target whose family's records are used (default: the database's only "
                        "family)")
    p.add_argument("--workload", action="append", default=None, metavar="KEY",
                   help="use only this workload (key or unique key prefix; repeatable)")
    p.add_argument("--exclude-workload", action="append", default=None, metavar="KEY",
                   help="leave this workload out (key or unique key prefix; repeatable)")
    p.add_argument("--max-per-workload", type=int, default=None, metavar="N",
                   help="at most N records per workload, evenly spread over the run")
    p.add_argument("--kind", default="xgb", choices=kinds(), help="cost model kind "
                   "(default: xgb)")
    p.add_argument("--seed", type=int, default=0)


def _check_output_file(path: str) -> None:
    """The model file can be written: not a folder, in a folder that exists."""
    if os.path.isdir(path):
        raise CostModelError(f"--out {path!r} is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CostModelError(f"--out {path!r}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise CostModelError(f"--out {path!r} cannot be written")


def _json_ready(value):
    """NaN and infinities as null: the output stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    return value


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    filters = {"target": args.target, "workloads": args.workload,
               "exclude": args.exclude_workload, "max_per_workload": args.max_per_workload}
    try:
        if args.command == "pretrain":
            # 1. The output is checked before the records are read (replaying them is slow).
            _check_output_file(args.out)
            data = training_set(args.db, **filters)
            model = pretrain(data, out=args.out, kind=args.kind, seed=args.seed)
            doc = {"out": args.out, "kind": model.kind, "seed": args.seed,
                   "trained": model.is_trained, **data.summary()}
        else:
            doc = evaluate(args.db, kind=args.kind, folds=args.folds, seed=args.seed,
                           top_k=args.top_k, **filters)
    except (ValueError, OSError) as err:  # CostModelError, and a file that cannot be written
        print(f"python -m cost_models {args.command}: {err}", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(_json_ready(doc), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

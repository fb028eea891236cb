"""Which operators of an ONNX model the importer supports, before a night of tuning:

    python -m autotune.frontends.check model.onnx

prints the model's operator types, how many nodes use each and whether the importer handles
them; the exit status is 0 when every one is supported, 1 when some are not, 2 when the file
cannot be read.  (A module of its own: ``python -m autotune.frontends.onnx`` would run a
second copy of a module the package has already imported.)
"""
from __future__ import annotations

import argparse
import sys

from ..graph.errors import FrontendError
from .onnx import operator_report

__all__ = ["main"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m autotune.frontends.check",
        description="Check which operators of an ONNX model the importer supports.")
    parser.add_argument("model", metavar="MODEL", help="an .onnx file")
    args = parser.parse_args(argv)
    try:
        report = operator_report(args.model)
    except FrontendError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    width = max([len(op) for op, _, _ in report] + [len("operator")])
    print(f"{'operator':<{width}}  {'nodes':>5}  supported")
    for op, count, ok in report:
        print(f"{op:<{width}}  {count:>5}  {'yes' if ok else 'NO'}")
    missing = [op for op, _, ok in report if not ok]
    nodes = sum(count for _, count, _ in report)
    if missing:
        print(f"{len(missing)} of {len(report)} operator types unsupported: "
              f"{', '.join(missing)}")
        return 1
    print(f"all {len(report)} operator types ({nodes} nodes) are supported")
    return 0


if __name__ == "__main__":
    sys.exit(main())

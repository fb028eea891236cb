"""ONNX's model suites (``onnx/backend/test/data``: light, pytorch-converted, pytorch-operator)
through the importer, build_model and the executor.

    python -m benchmarks.onnx_suites [--suite NAME ...] [--match SUBSTRING] [--out FILE]

Not a timing benchmark: every case is imported, built with default schedules and run once in
this process, and classified as pass / wrong / crash / refused (see
``autotune.frontends.onnx_suites``).  It prints the JSON report: per suite passed of total,
the count per status, each case's status and each non-passing one with its error and the
out-of-scope or known-failure entry that explains it; for the light models also whether the
shipped model (constant weights) reproduces its stored output.  Exit status 1 when a case is
wrong, crashes or is refused with no explanation.
"""
from __future__ import annotations

import argparse
import json
import sys

from autotune.frontends import onnx_suites


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.onnx_suites")
    parser.add_argument("--suite", action="append", choices=onnx_suites.SUITES,
                        help="only this suite (repeatable; all three by default)")
    parser.add_argument("--match", default="", help="only cases whose name contains this")
    parser.add_argument("--out", help="also write the JSON report to this file")
    parser.add_argument("--progress", action="store_true", help="one line per case on stderr")
    args = parser.parse_args(argv)
    report, bad = {}, 0
    for suite in args.suite or onnx_suites.SUITES:
        results, explanations, shipped = [], {}, {}
        for name in onnx_suites.case_names(suite):
            if args.match not in name:
                continue
            result = onnx_suites.run(suite, name)
            results.append(result)
            if result.status == "refused":
                explanations[name] = onnx_suites.explain_refusal(suite, name)
                bad += explanations[name] is None
            bad += result.status in ("wrong", "crash")
            if suite == "light" and result.status == "pass":
                problem = onnx_suites.shipped_output_problem(name)
                shipped[name] = problem or "reproduced"
                bad += problem is not None
            if args.progress:
                print(f"{result.status:8} {suite}/{name} {result.message or ''}"[:200],
                      file=sys.stderr, flush=True)
        report[suite] = onnx_suites.suite_report(results, explanations)
        if suite == "light":
            report[suite]["shipped_output"] = shipped
    text = json.dumps(report, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

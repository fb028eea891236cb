"""ONNX's operator conformance cases through the importer, build_model and the executor.

    python -m benchmarks.onnx_conformance [--out FILE] [--match SUBSTRING]

Not a timing benchmark: it runs every in-scope case of
``onnx.backend.test.case.node.collect_testcases()`` once, in this one process (each case is a
small LLVM build), classifies it as pass / wrong / crash / refused (see
``autotune.frontends.conformance``) and prints the JSON report: totals, per-operator counts and
each failing case with its error type, first line and the out-of-scope or known-failure entry
that explains it.
"""
from __future__ import annotations

import argparse
import json
import sys

from autotune.frontends import conformance


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.onnx_conformance")
    parser.add_argument("--out", help="also write the JSON report to this file")
    parser.add_argument("--match", default="", help="only cases whose name contains this")
    parser.add_argument("--progress", action="store_true", help="one line per case on stderr")
    args = parser.parse_args(argv)
    results, excluded, explanations = [], {}, {}
    for case in conformance.collect_cases():
        if args.match not in case.name:
            continue
        why = conformance.case_scope(case)
        if why is not None:
            excluded[case.name] = why
            continue
        result = conformance.run_case(case)
        results.append(result)
        if result.status == "refused":
            explanations[case.name] = conformance.explain_refusal(case)
        if args.progress:
            print(f"{result.status:8} {case.name} {result.message or ''}"[:200],
                  file=sys.stderr, flush=True)
    report = conformance.summarize(results, excluded, explanations)
    text = json.dumps(report, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    bad = report["totals"]["wrong"] + report["totals"]["crash"] + report["refused_unexplained"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

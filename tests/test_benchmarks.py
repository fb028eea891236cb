"""The benchmark commands the README names run and print the JSON they promise."""
from __future__ import annotations

import io
import json
from contextlib import redirect_stdout


def test_build_time_prints_json_with_phases():
    from benchmarks import build_time

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert build_time.main(["--repeat", "1", "--ops", "relu,matmul"]) == 0
    doc = json.loads(buf.getvalue())
    assert {r["op"] for r in doc["ops"]} == {"relu", "matmul"}
    for row in doc["ops"] + [doc["matmul_1024"]]:
        assert row["create_ms"] > 0 and row["lower_ms"] > 0 and row["llvm_ms"] > 0
    assert doc["matmul_1024"]["limit_ms"] == 150.0

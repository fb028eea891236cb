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


def test_hand_written_matmul_schedule_is_correct():
    import numpy as np

    import autotune
    from benchmarks.matmul_schedule import schedule_matmul
    from tensor_ir import ops
    from tensor_ir.interp import evaluate

    n = 64
    sch = schedule_matmul(ops.matmul(n, n, n))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), "float32"), rng.standard_normal((n, n), "float32")
    out = np.empty((n, n), "float32")
    autotune.build(sch.func)(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(evaluate(sch.func, a, b)[0], a @ b, rtol=1e-4, atol=1e-4)

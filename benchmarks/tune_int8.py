"""int8 matmul tensorized with VNNI vs onnxruntime and our fp32 matmul:
``python -m benchmarks.tune_int8``.

Tunes a uint8 x int8 -> int32 matmul (1024^3 by default) with ``autotune.tune`` on this
machine (the design space tensorizes it with the target's intrinsic when the CPU has AVX-512
VNNI), tunes the float32 matmul of the same shape with the same budget, then times side by
side, in interleaved rounds of one process (each round runs every contender once, so a change
in machine load hits them alike):

    int8_tuned      our best int8 program
    fp32_tuned      our best float32 program
    ort_matmul_integer   onnxruntime's MatMulInteger (uint8 x int8 -> int32), 2 threads
    numpy_fp32      numpy's float32 matmul (OpenBLAS) for scale

and prints one JSON object with the medians, GOPS, the ratios the issue asks for
(``int8_vs_ort`` = ort time / ours, ``int8_vs_fp32`` = fp32 time / int8 time), whether the
best int8 program is tensorized, and whether every int8 output equals numpy's int32 matmul.
Run it alone: it uses both cores.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile

import numpy as np

from benchmarks.common import environment, interleaved_medians, reexec_without_openblas_env
from search import SearchConfig


def int8_matmul(n: int):
    from tensor_ir import te

    a = te.placeholder((n, n), "uint8", name="A")
    b = te.placeholder((n, n), "int8", name="B")
    r = te.reduce_axis(n, name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, r].astype("int32") * b[r, j].astype("int32"),
                                               axis=r), name="C")
    return te.create_prim_func([a, b, c], name=f"matmul_u8i8_{n}")


def ort_matmul_integer(n: int, threads: int):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["C"])], "mmi",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, (n, n)),
         helper.make_tensor_value_info("B", TensorProto.INT8, (n, n))],
        [helper.make_tensor_value_info("C", TensorProto.INT32, (n, n))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]), ort.__version__


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--db", default=None, help="keep the records here (default: a "
                                                   "temporary database)")
    args = parser.parse_args(argv)
    reexec_without_openblas_env("benchmarks.tune_int8")

    import autotune
    from tensor_ir.ops import matmul
    from tensor_ir.target import Target

    n = args.size
    host = Target.current_host()
    out = {"benchmark": "tune_int8", "size": n, "trials": args.trials,
           "environment": environment(), "intrinsics": list(host.intrinsics)}
    with tempfile.TemporaryDirectory() as folder:
        db = args.db or f"{folder}/int8.db"
        i8 = int8_matmul(n)
        f32 = matmul(n, n, n)
        print(f"[tune_int8] tuning int8 {n}^3, {args.trials} trials", file=sys.stderr)
        r8 = autotune.tune(i8, "llvm", trials=args.trials, database=db, search=SearchConfig(seed=0))
        print(f"[tune_int8] tuning fp32 {n}^3, {args.trials} trials", file=sys.stderr)
        r32 = autotune.tune(f32, "llvm", trials=args.trials, database=db,
                            search=SearchConfig(seed=0))
    names = [inst.kind for inst in r8.best_trace]
    out["int8_best_is_tensorized"] = "tensorize" in names
    k8 = autotune.build(r8.best_schedule.func, "llvm")
    k32 = autotune.build(r32.best_schedule.func, "llvm")

    rng = np.random.default_rng(0)
    a8 = rng.integers(0, 256, (n, n), dtype=np.uint8)
    b8 = rng.integers(-128, 128, (n, n), dtype=np.int8)
    expected = a8.astype(np.int64) @ b8.astype(np.int64)
    c8 = np.empty((n, n), np.int32)
    a32 = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b32 = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    c32 = np.empty((n, n), np.float32)
    session, ort_version = ort_matmul_integer(n, host.num_cores)
    out["onnxruntime"] = ort_version

    k8(a8, b8, c8)
    ort_out = session.run(None, {"A": a8, "B": b8})[0]
    out["int8_equal_numpy"] = bool(np.array_equal(c8, expected))
    out["ort_equal_numpy"] = bool(np.array_equal(ort_out, expected))

    times = interleaved_medians({
        "int8_tuned": lambda: k8(a8, b8, c8),
        "fp32_tuned": lambda: k32(a32, b32, c32),
        "ort_matmul_integer": lambda: session.run(None, {"A": a8, "B": b8}),
        "numpy_fp32": lambda: np.matmul(a32, b32, out=c32),
    }, rounds=args.rounds)
    ops = 2.0 * n ** 3
    out["median_ms"] = {k: 1000 * v["median_s"] for k, v in times.items()}
    out["gops"] = {k: ops / v["median_s"] / 1e9 for k, v in times.items()}
    t = {k: v["median_s"] for k, v in times.items()}
    out["int8_vs_ort"] = t["ort_matmul_integer"] / t["int8_tuned"]
    out["int8_vs_fp32"] = t["fp32_tuned"] / t["int8_tuned"]
    out["tune_best_ms"] = {"int8": 1000 * r8.best_time, "fp32": 1000 * r32.best_time}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The BERT layer's matmuls against this host's FMA peak: our register tiles beside MLAS.

    python -m benchmarks.gemm_ceiling                       # 128x3072x768 and 96x3072x768
    python -m benchmarks.gemm_ceiling --shapes 128x768x768 --threads 2 --rounds 30
    python -m benchmarks.gemm_ceiling --threads 2 --cols 16,24 --rows 4,6,8   # AVX2 tiles
    python -m benchmarks.gemm_ceiling --rows 4 --cols 24 --k-blocks 64,256 --unroll 1,4,8

The BERT layer spends about 90% of its time in four matmuls of 128 rows (the tokens), and
onnxruntime runs them with MLAS's hand-written AVX-512 kernel.  This command says how far
each side is from what the cores can do, in one run:

* **peak**: an LLVM loop of independent 16-lane FMAs on every thread (no loads), the most
  any kernel can reach;
* **MLAS**: onnxruntime running one MatMul node with a constant weight (packed once, as in
  the model);
* **ours**: hand-written schedules of the family the tuner's best matmuls belong to -- the
  weight packed into 32-column panels outside the timed call, a register tile of R rows x 32
  columns (2R accumulators) over a k block of KB, four panels per chunk of columns, the
  chunks and row blocks in parallel -- for R in 8 and 12 (12 only where it divides the rows)
  and KB in 48 and 256.

Each program's output is checked against numpy before it is timed.  Rounds alternate the
programs (benchmarks.common.interleaved_medians); the medians and the 10th percentiles are
reported, since on a shared host the slow tail is other tenants, not the kernel.  Prints one
JSON document.

Recorded on a 2-vCPU Emerald Rapids Xeon (benchmarks/results/gemm_ceiling_2026-11-28_*):
the peak was 165 GFLOPS on one thread and 337 on two.  On two threads MLAS ran the four
shapes at 0.59-0.68 of it and the 8-row tiles at 0.50-0.68 (0.95-1.19x MLAS's time, the
3072x768 weight of FFN2 the furthest behind); on 96 rows the 12-row tiles ran 4-7% faster than
the 8-row ones, level with MLAS.  Neither side comes near the peak on two threads: a kernel
15% faster than MLAS, which the BERT layer would need to run at 0.9x onnxruntime, would be
at 0.69-0.80 of it.

On a 2-vCPU EPYC (Zen 3, AVX2: 16 registers of 8 lanes;
gemm_ceiling_2026-11-29_bert_shapes_epyc_zen3_avx2.json) the peak was 92 GFLOPS on one thread
and 177 on two; MLAS ran the four shapes at 0.68-0.76 of it on two threads.  Tiles 4 rows x
24 columns (12 accumulators, 3 panel vectors and a broadcast: the 16 registers) ran
1.03-1.11x MLAS's time; 4x16 1.24-1.37x; 8x16 and 8x24, which need more registers than there
are, spilled and ran 2.3-2.6x.

On the same host (gemm_ceiling_2026-11-30_unroll_epyc_zen3_avx2.json, a slow spell: the
peak read 80 and 151 GFLOPS) the 4x24 tile's k loop unrolled by 4 or 8 (``--unroll``) ran
3-8% faster than the plain loop on the BERT FFN shapes with k blocks of 256, 0.98-1.01x
MLAS's time on two threads (the plain loop 1.03-1.07x), and 0.83x MLAS's time on
1024x96x64, whose panels stay in L1.
The tuner's sketches carry no such decision: their inner reduction tile (R1) unrolls only
the factor it splits off.  A code generator that unrolled every reduction loop around a
register tile by up to 8 (tried, not kept) ran BERT's tuned matmuls 2-20% faster (0.96 of
their weighted time) but ResNet-18's 1.2x slower: its Winograd matmuls' 7x16 tiles (14
accumulators) spilled and ran 1.3-1.4x.  It has to be the search's choice, per program.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time

from benchmarks.common import environment, interleaved_medians

SHAPES = ((128, 3072, 768), (96, 3072, 768))  # (rows, columns, reduction): BERT's FFN1
ROWS = (8, 12)
K_BLOCKS = (48, 256)
PREFETCH = (0,)     # software prefetch distances (bytes) of the panel; 0: none
UNROLL = (1,)       # steps of the k block per loop iteration (unrolled)
COLS = 32           # two AVX-512 registers of float32 (--cols 16,24 for AVX2's 8 lanes)
PANELS_PER_CHUNK = 4
# Independent FMA chains of 16 lanes per thread: at least latency x ports vector registers
# worth, so that no FMA waits, and few enough to stay in registers with the two constants --
# 16 fill half of AVX-512's 32 registers; on AVX2, where each is two of the 16 ymm registers,
# 6 (12 registers; 16 there spilled and read 0.4x the true peak).
CHAINS = 16
CHAINS_AVX2 = 6

_FMA_TYPE = "<16 x float>"


def _splat(value: str) -> str:
    return "<" + ", ".join([f"float {value}"] * 16) + ">"


def _peak_ir(chains: int = CHAINS) -> str:
    """``fma_peak(data, threads)``: every thread of an OpenMP team runs ``data[0]``
    iterations of ``chains`` independent FMAs on registers and stores their sum in its own
    64-byte slot (so nothing is dead code).  a * 0.5 + 0.25 converges to 0.5: no overflow, no
    denormals."""
    t = _FMA_TYPE
    lines = [
        "declare void @GOMP_parallel(ptr, ptr, i32, i32)",
        "declare i32 @omp_get_thread_num()",
        f"declare {t} @llvm.fma.v16f32({t}, {t}, {t})",
        "define internal void @fma_team(ptr %data) {",
        "entry:",
        "  %n = load i64, ptr %data",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%inext, %loop]",
    ]
    for c in range(chains):
        lines.append(f"  %a{c} = phi {t} [{_splat('1.0')}, %entry], [%b{c}, %loop]")
    for c in range(chains):
        lines.append(f"  %b{c} = call {t} @llvm.fma.v16f32({t} %a{c}, {t} {_splat('0.5')}, "
                     f"{t} {_splat('0.25')})")
    lines += ["  %inext = add i64 %i, 1",
              "  %more = icmp ult i64 %inext, %n",
              "  br i1 %more, label %loop, label %exit",
              "exit:"]
    total = "%b0"
    for c in range(1, chains):
        lines.append(f"  %s{c} = fadd {t} {total}, %b{c}")
        total = f"%s{c}"
    lines += ["  %tid = call i32 @omp_get_thread_num()",
              "  %slot = add i32 %tid, 1",
              "  %off = mul i32 %slot, 16",
              "  %p = getelementptr inbounds float, ptr %data, i32 %off",
              f"  store {t} {total}, ptr %p, align 4",
              "  ret void",
              "}",
              "define void @fma_peak(ptr %data, i32 %threads) {",
              "  call void @GOMP_parallel(ptr @fma_team, ptr %data, i32 %threads, i32 0)",
              "  ret void",
              "}"]
    return "\n".join(lines) + "\n"


def fma_peak_gflops(threads: int, seconds: float = 0.1, tries: int = 5) -> float:
    """GFLOPS of ``threads`` threads running independent FMAs: the best of ``tries`` runs of
    about ``seconds`` each."""
    import numpy as np

    from tensor_ir.codegen import LLVMTarget, compile_module
    from tensor_ir.target import Target

    chains = CHAINS if (Target("llvm").vector_bits or 0) >= 512 else CHAINS_AVX2
    jit = compile_module(_peak_ir(chains), LLVMTarget()).jit()
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(
        jit.function_address("fma_peak"))
    data = np.zeros(16 * (threads + 2), np.float32)
    counter = data.view(np.int64)

    def once(n: int) -> float:
        counter[0] = n
        start = time.perf_counter()
        run(data.ctypes.data, threads)
        return time.perf_counter() - start

    n = 1000
    while once(n) < seconds / 4:
        n *= 4
    best = min(once(n) for _ in range(tries))
    if not np.isfinite(data[16:16 * (threads + 1)]).all():
        raise RuntimeError("the FMA loop produced a non-finite sum")
    return threads * n * chains * 16 * 2 / best / 1e9


def schedule_gemm(func, rows: int, k_block: int, threads: int, prefetch: int = 0,
                  cols: int = COLS, unroll: int = 1):
    """The register-tiled, panel-packed schedule (see the module text) of a te matmul, its
    panels ``cols`` wide; ``prefetch`` > 0: the panel is prefetched that many bytes ahead
    along the k block; ``unroll`` > 1: the k block's loop holds that many steps of the tile
    (unrolled) per iteration."""
    from benchmarks.matmul_schedule import annotate_register_block
    from schedules import Schedule
    from tensor_ir.codegen.llvm import PREFETCH_KEY

    sch = Schedule(func)
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i_outer, i_inner = sch.split(i, [None, rows])
    j_outer, j_panel, j_inner = sch.split(j, [None, PANELS_PER_CHUNK, cols])
    k_outer, k_inner = sch.split(k, [None, k_block])
    # Column chunks outermost: a chunk's panels stay in L2 while every row block reads them.
    sch.reorder(j_outer, i_outer, k_outer, j_panel, k_inner, i_inner, j_inner)
    if unroll > 1:
        k_steps = sch.split(k_inner, [None, unroll])[1]
        sch.unroll(k_steps)
    write_back = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(write_back, i_outer)
    pack = sch.pack_layout(block, 1, lambda kk, n: (n // cols, kk, n % cols))
    init = sch.decompose_reduction(block, k_outer)
    fused = sch.fuse(j_outer, i_outer)
    if threads > 1:
        sch.parallel(fused)
    annotate_register_block(sch, i_inner, j_inner, write_back, init, pack)
    if prefetch:
        sch.annotate(k_inner, PREFETCH_KEY, prefetch)
    return sch


def _ours(m: int, n: int, k: int, rows: int, k_block: int, threads: int, a, b,
          prefetch: int = 0, cols: int = COLS, unroll: int = 1):
    """A callable running our kernel on ``a`` and the pre-packed ``b``, checked first."""
    import numpy as np

    import autotune
    from autotune.measure.runner import aligned_empty
    from autotune.runtime.prepack import split_packing
    from tensor_ir import ops

    target = f"llvm -num-cores {threads}"
    main, packs = split_packing(schedule_gemm(ops.matmul(m, n, k), rows, k_block,
                                              threads, prefetch, cols, unroll).func, {1})
    args = [a, b]
    for p in packs:
        packed = aligned_empty(tuple(p.pack.params[1].const_shape), np.float32, 64)
        autotune.build(p.pack, target)(b, packed)
        args[p.index] = packed
    kernel = autotune.build(main, target)
    out = aligned_empty((m, n), np.float32, 64)
    kernel(*args, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-3,
                               err_msg=f"{rows}x{cols} tile, k block {k_block}, "
                                       f"{unroll} steps unrolled")
    return lambda: kernel(*args, out)


def _mlas(m: int, n: int, k: int, threads: int, a, b):
    """onnxruntime running one MatMul node with ``b`` as a constant, checked first."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from benchmarks.e2e import onnxruntime_session

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [numpy_helper.from_array(b, "w")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    sess = onnxruntime_session(proto, threads)
    feed = {"x": a}
    np.testing.assert_allclose(sess.run(None, feed)[0], a @ b, rtol=1e-4, atol=1e-3)
    return lambda: sess.run(None, feed)


def measure(shape: tuple[int, int, int], threads: int, rounds: int, peak: float,
            min_seconds: float = 0.3, rows_choices=ROWS, k_blocks=K_BLOCKS,
            prefetches=PREFETCH, widths=(COLS,), unrolls=UNROLL) -> list[dict]:
    """One row per program for ``shape`` on ``threads`` threads."""
    import numpy as np

    from autotune.measure.runner import aligned_empty

    m, n, k = shape
    rng = np.random.default_rng(0)
    a = aligned_empty((m, k), np.float32, 64)
    a[...] = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    programs = {"mlas": _mlas(m, n, k, threads, a, b)}
    for cols in widths:
        for rows in rows_choices:
            for k_block in k_blocks:
                if m % rows or k % k_block or n % (cols * PANELS_PER_CHUNK):
                    continue
                for prefetch in prefetches:
                    for unroll in unrolls:
                        if k_block % unroll:
                            continue
                        name = (f"ours_{rows}x{cols}_k{k_block}"
                                + (f"_pf{prefetch}" if prefetch else "")
                                + (f"_u{unroll}" if unroll > 1 else ""))
                        programs[name] = _ours(m, n, k, rows, k_block, threads, a, b,
                                               prefetch, cols, unroll)
    times = interleaved_medians(programs, rounds=rounds, min_seconds=min_seconds)
    flops = 2.0 * m * n * k
    mlas = times["mlas"]["median_s"]
    out = []
    for name, t in times.items():
        median, p10 = t["median_s"], float(np.percentile(t["samples_s"], 10))
        gflops = flops / median / 1e9
        out.append({"shape": list(shape), "threads": threads, "program": name,
                    "median_ms": round(median * 1e3, 4), "p10_ms": round(p10 * 1e3, 4),
                    "gflops": round(gflops, 1), "share_of_peak": round(gflops / peak, 3),
                    "time_vs_mlas": round(median / mlas, 3)})
    return out


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"a shape is ROWSxCOLUMNSxREDUCTION, not {text!r}")
    return tuple(int(p) for p in parts)


def _int_list(least: int):
    """An argparse type: a comma-separated list of integers, each at least ``least``."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",")]
        except ValueError:
            values = []
        if not values or min(values) < least:
            raise argparse.ArgumentTypeError(
                f"a comma-separated list of integers from {least} up, not {text!r}")
        return values
    return parse


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=lambda s: [_shape(x) for x in s.split(",")],
                        default=list(SHAPES), help="e.g. 128x3072x768,96x3072x768")
    parser.add_argument("--threads", type=_int_list(1),
                        default=[1, 2], help="thread counts, e.g. 1,2")
    parser.add_argument("--rows", type=_int_list(1), default=list(ROWS),
                        help="register-tile rows to try, e.g. 8,12")
    parser.add_argument("--cols", type=_int_list(1), default=[COLS],
                        help="panel widths (register-tile columns) to try, e.g. 16,24 on "
                             "AVX2")
    parser.add_argument("--k-blocks", type=_int_list(1), default=list(K_BLOCKS),
                        help="reduction blocks to try, e.g. 48,256")
    parser.add_argument("--prefetch", type=_int_list(0), default=list(PREFETCH),
                        help="panel prefetch distances in bytes to try, 0 for none, e.g. "
                             "0,1024")
    parser.add_argument("--unroll", type=_int_list(1), default=list(UNROLL),
                        help="steps of the k block unrolled per iteration to try, e.g. 1,4,8")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--min-seconds", type=float, default=0.3,
                        help="least seconds per timed sample")
    args = parser.parse_args(argv)

    doc = {"benchmark": "gemm_ceiling", "rounds": args.rounds, "environment": environment(),
           "peak_gflops": {}, "results": []}
    for threads in args.threads:
        peak = fma_peak_gflops(threads)
        doc["peak_gflops"][str(threads)] = round(peak, 1)
        for shape in args.shapes:
            doc["results"] += measure(shape, threads, args.rounds, peak, args.min_seconds,
                                      args.rows, args.k_blocks, args.prefetch, args.cols,
                                      args.unroll)
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

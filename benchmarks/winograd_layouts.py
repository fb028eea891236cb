"""The four halves of a Winograd convolution's transforms, NCHW against the blocked layout.

    python -m benchmarks.winograd_layouts [--layers 64x56x4,128x28x4] [--trials 96]
                                          [--rounds 9] [--min-repeat-ms 70]

For each layer (channels x image size x tile m of F(m, 3), ResNet-18's shapes by default) the
input transform's halves (rows, then columns of each tile) and the output transform's halves
are built in both layouts (``tensor_ir.ops.winograd``): NCHW, where the column half of the
input and the row half of the output turn the layout between tiles and channels, and
NCHW[16]c, where every half keeps the channels innermost.  Each of the eight kernels is tuned
alone for ``--trials`` trials (fresh, in-memory records; each candidate timed in repeats of
at least ``--min-repeat-ms``, the tuner's default unless given), then the eight best programs are
timed side by side in interleaved rounds (one machine state for all of them) and the JSON on
stdout gives each one's median in microseconds, each layout's total per convolution and
their ratio.  The batched matmul between the halves is the same in both layouts and is left
out.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from benchmarks.common import environment, interleaved_medians

TARGET = "llvm -num-cores 2"
BLOCK = 16
DEFAULT_LAYERS = ((64, 56, 4), (128, 28, 4), (256, 14, 2))


def halves(channels: int, image: int, m: int) -> dict[str, dict]:
    """name -> {"func": PrimFunc, "layout": "NCHW" | "blocked"} of the eight halves of a
    stride-1 3x3 convolution of ``channels`` -> ``channels`` over ``image`` x ``image``."""
    from tensor_ir import ops, te

    n, c, a, f32 = 1, channels, m + 2, "float32"
    _, _, tiles = ops.winograd_tiles(n, image, image, m)
    width = -(-image // m) * m + 2
    th = -(-image // m)
    bt = te.placeholder((a, a), f32, name="bt")
    at = te.placeholder((m, a), f32, name="at")
    mm = te.placeholder((a * a, tiles, c), f32, name="mm")

    def func(inputs, out, name):
        return te.create_prim_func(inputs + [out], name=name)

    data = te.placeholder((n, c, image, image), f32, name="data")
    rows = te.placeholder((a, n, c, th, width), f32, name="rows")
    s = te.placeholder((m, a, c, tiles), f32, name="s")
    data_b = te.placeholder((n, c // BLOCK, image, image, BLOCK), f32, name="data")
    rows_b = te.placeholder((a, n, c // BLOCK, th, width, BLOCK), f32, name="rows")
    s_b = te.placeholder((m, a, tiles, c), f32, name="s")
    made = {
        "input_rows": func([data, bt], ops.te_winograd_input_rows(data, bt, m), "input_rows"),
        "input_cols": func([rows, bt], ops.te_winograd_input_cols(rows, bt, m), "input_cols"),
        "output_rows": func([mm, at], ops.te_winograd_output_rows(mm, at, m), "output_rows"),
        "output_cols": func([s, at], ops.te_winograd_output_cols(s, at, m, n, image, image),
                            "output_cols"),
        "input_rows_nchwc": func([data_b, bt], ops.te_winograd_input_rows_nchwc(data_b, bt, m),
                                 "input_rows_nchwc"),
        "input_cols_nchwc": func([rows_b, bt], ops.te_winograd_input_cols_nchwc(rows_b, bt, m),
                                 "input_cols_nchwc"),
        "output_rows_nchwc": func([mm, at], ops.te_winograd_output_rows_nchwc(mm, at, m),
                                  "output_rows_nchwc"),
        "output_cols_nchwc": func([s_b, at], ops.te_winograd_output_cols_nchwc(
            s_b, at, m, n, image, image, BLOCK), "output_cols_nchwc"),
    }
    return {name: {"func": f, "layout": "blocked" if name.endswith("_nchwc") else "NCHW"}
            for name, f in made.items()}


def _runner(func):
    """A callable that runs the built ``func`` once on random operands."""
    import autotune

    lib = autotune.build(func, TARGET)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(tuple(b.const_shape)).astype(np.float32)
            for b in func.params]
    return lambda: lib(*args)


def run_layer(channels: int, image: int, m: int, trials: int, rounds: int,
              config=None) -> dict:
    import autotune

    kernels = halves(channels, image, m)
    tuned = {}
    for name, k in kernels.items():
        result = autotune.tune(k["func"], TARGET, trials=trials, log=False, measure=config)
        tuned[name] = result.best_func
        print(f"{channels}x{image} F({m},3) {name}: {result.best_time * 1e6:.1f} us tuned",
              file=sys.stderr, flush=True)
    medians = interleaved_medians({name: _runner(f) for name, f in tuned.items()},
                                  rounds=rounds, min_seconds=0.1)
    us = {name: round(medians[name]["median_s"] * 1e6, 1) for name in kernels}
    total = {layout: round(sum(us[n] for n, k in kernels.items() if k["layout"] == layout), 1)
             for layout in ("NCHW", "blocked")}
    return {"channels": channels, "image": image, "tile": m, "trials": trials,
            "median_us": us, "total_us": total,
            "blocked_vs_nchw": round(total["blocked"] / total["NCHW"], 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(f"{c}x{i}x{m}" for c, i, m in
                                                     DEFAULT_LAYERS),
                        help="comma-separated CHANNELSxIMAGExTILE")
    parser.add_argument("--trials", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--min-repeat-ms", type=float, default=None,
                        help="shortest timed repeat while tuning (default: the tuner's)")
    args = parser.parse_args(argv)
    config = None
    if args.min_repeat_ms is not None:
        from autotune.measure import MeasureConfig
        config = MeasureConfig(min_repeat_ms=args.min_repeat_ms)
    layers = [tuple(int(x) for x in spec.split("x")) for spec in args.layers.split(",")]
    out = {"benchmark": "winograd_layouts", "target": TARGET, "block": BLOCK,
           "environment": environment(),
           "layers": [run_layer(c, i, m, args.trials, args.rounds, config)
                      for c, i, m in layers]}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

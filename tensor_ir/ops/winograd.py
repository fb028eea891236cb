"""Winograd minimal filtering for stride-1 3x3 convolutions, F(m x m, 3 x 3).

A 3x3 convolution computed tile by tile needs fewer multiplications: each output tile of
m x m pixels comes from an (m+2) x (m+2) input tile ``d`` (tiles overlap by two pixels) as

    V = Bt d Bt^T          (input transform, per tile and input channel)
    U = G g G^T            (weight transform, per filter: once, the weights are constants)
    M = sum_c U[k, c] * V[c]   elementwise in the (m+2)^2 positions
    Y = At M At^T          (output transform, per tile and output channel)

The channel sum is (m+2)^2 independent matrix products, which is where the work goes: per
output pixel it costs (m+2)^2 / m^2 multiply-adds per input channel instead of 9 (F(4,3):
2.25, a quarter of the direct convolution's).  Larger tiles save more multiplications but
lose precision (the transform matrices' entries grow); F(4,3) keeps float32 results within
about 1e-5 of their magnitude.

Layouts (e = u * (m+2) + v indexes the positions of a transformed tile, p the tile:
p = (n * th + ty) * tw + tx for th x tw tiles per image):

    T[u, n, c, ty, x]  ``te_winograd_input_rows`` (the input transform along tile rows,
                 padding applied here)
    V[e, p, c]   ``te_winograd_input_cols`` (and along tile columns; ``te_winograd_input``
                 composes the two)
    U[e, c, k]   ``winograd_weight``    (numpy, at graph-build time)
    M[e, p, k]   a batched matmul V @ U (any matmul operator)
    S[u, j, k, p] ``te_winograd_output_rows`` (the output transform along tile rows)
    Y[n, k, y, x] ``te_winograd_output_cols`` (and along tile columns, the last partial tile
                 cut; ``te_winograd_output`` composes the two)

The transform matrices are parameters of the te stages (``Bt``: (m+2) x (m+2), ``At``:
m x (m+2)), read like weights, rather than constants folded into the expression: a stage
whose coefficients depend on its loop indices could only fold them if those loops were fully
unrolled, which a searched schedule does not promise.  As parameters, each stage is a small
dense contraction that the tiling rules schedule as they schedule any reduction.

The matmul's rows are the tiles and its columns the output channels (M[e, p, k], not
M[e, k, p]): channel counts are multiples of the vector width, tile counts seldom are
(7 x 7 = 49 tiles of a 28 x 28 image fill 49 of 64 lanes).  Tuned alone for 128 trials on
Zen 5, ResNet-18's 36 x 128 x 128 x 49 and 16 x 256 x 256 x 49 matmuls took 0.128 and
0.201 ms in this layout, 0.140 and 0.226 ms with the tiles along the vectors.  The column
half of the input transform and the row half of the output transform turn the tiles between
the layouts.

In the blocked channel layout (NCHW[b]c, see ``tensor_ir.ops.layout``) no half has to turn
them: the channels are the innermost axis of every stage, so each reads and writes whole
vectors of one channel block (the ``_nchwc`` variants):

    T[u, n, cb, ty, x, c]  ``te_winograd_input_rows_nchwc``  (data [N, C/b, H, W, b])
    V[e, p, cb * b + c]    ``te_winograd_input_cols_nchwc``  (the same V as above)
    S[u, j, p, k]          ``te_winograd_output_rows_nchwc`` (the channels innermost)
    Y[n, kb, y, x, c]      ``te_winograd_output_cols_nchwc`` (k = kb * b + c)

Tuned in a model (ResNet-18, 2000 trials, this project's 2-core Xeon host), the NCHW halves
that turn the layouts were the slowest stages: 0.2-0.25 ms a call on 56 x 56 x 64 data
whose 1.8 MB the other halves pass in 0.04-0.08 ms, because a vector of their
innermost output axis gathers its elements one by one from the input's strides.
"""
from __future__ import annotations

import numpy as np

from .. import te
from .utils import check

__all__ = [
    "WINOGRAD_TILES", "winograd_matrices", "winograd_tiles", "winograd_weight",
    "te_winograd_input_rows", "ref_winograd_input_rows", "te_winograd_input_cols",
    "ref_winograd_input_cols", "te_winograd_input", "ref_winograd_input",
    "te_winograd_output_rows", "ref_winograd_output_rows", "te_winograd_output_cols",
    "ref_winograd_output_cols", "te_winograd_output", "ref_winograd_output",
    "te_winograd_input_rows_nchwc", "ref_winograd_input_rows_nchwc",
    "te_winograd_input_cols_nchwc", "ref_winograd_input_cols_nchwc",
    "te_winograd_output_rows_nchwc", "ref_winograd_output_rows_nchwc",
    "te_winograd_output_cols_nchwc", "ref_winograd_output_cols_nchwc",
]

# F(m, 3) for these output tile sizes m: the interpolation points 0, +-1 (m = 2) and
# 0, +-1, +-2 (m = 4) plus the point at infinity, as Lavin and Gray chose them.
_MATRICES = {
    2: (
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]],
    ),
    4: (
        [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
         [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
    ),
}
WINOGRAD_TILES = tuple(sorted(_MATRICES))


def winograd_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Bt, G, At) of F(m, 3) in float64: shapes (m+2, m+2), (m+2, 3), (m, m+2)."""
    check(m in _MATRICES, "winograd", f"tile size must be one of {WINOGRAD_TILES}, got {m!r}")
    return tuple(np.array(x, dtype=np.float64) for x in _MATRICES[m])


def winograd_tiles(n: int, oh: int, ow: int, m: int) -> tuple[int, int, int]:
    """(tiles down, tiles across, tiles in all) covering an n x oh x ow output."""
    th, tw = -(-oh // m), -(-ow // m)
    return th, tw, n * th * tw


def winograd_weight(weight: np.ndarray, m: int) -> np.ndarray:
    """U[e, c, k] = (G g[k, c] G^T)[u, v] of OIHW 3x3 weights, computed in float64."""
    check(weight.ndim == 4 and weight.shape[2:] == (3, 3), "winograd",
          f"weights must be (K, C, 3, 3), got {weight.shape}")
    _, g, _ = winograd_matrices(m)
    a = m + 2
    u = np.einsum("ui,kcij,vj->uvck", g, weight.astype(np.float64), g)
    return u.reshape(a * a, weight.shape[1], weight.shape[0]).astype(weight.dtype)


def _output_size(h: int, w: int, pads) -> tuple[int, int]:
    pt, pl, pb, pr = pads
    return h + pt + pb - 2, w + pl + pr - 2


def _input_tiles(data_shape, m: int, pads) -> tuple[int, int, int, int, int]:
    """(output height, output width, tiles down, tiles across, tiles in all)."""
    n, _, h, w = data_shape
    oh, ow = _output_size(h, w, pads)
    check(oh > 0 and ow > 0, "winograd_input", f"output size {(oh, ow)} is not positive")
    return (oh, ow) + winograd_tiles(n, oh, ow, m)


def te_winograd_input_rows(data: te.Tensor, bt: te.Tensor, m: int, pads=(1, 1, 1, 1),
                           name: str = "winograd_input_rows") -> te.Tensor:
    """The input transform's first half, along the rows of every tile:
    data [N, C, H, W], Bt [m+2, m+2] -> T [m+2, N, C, th, tw * m + 2] with
    T[u, n, c, ty, x] = sum_i Bt[u, i] * padded[n, c, ty * m + i, x].

    Done once per row of tiles over the whole padded width, it serves every tile of the row
    (tiles overlap by two columns), and it reads the data along its rows."""
    n, c, h, w = data.shape
    a = m + 2
    check(tuple(bt.shape) == (a, a), "winograd_input",
          f"Bt must be {(a, a)} for F({m}, 3), got {bt.shape}")
    _, _, th, tw, _ = _input_tiles(data.shape, m, pads)
    pt, pl = pads[0], pads[1]
    i = te.reduce_axis(a, name="i")
    zero = te.const(0.0, data.dtype)

    def fcompute(u, img, ch, ty, col):
        y, x = ty * m + i - pt, col - pl
        inside = te.all(y >= 0, y < h, x >= 0, x < w)
        return te.sum(bt[u, i] * te.if_then_else(inside, data[img, ch, y, x], zero), axis=i)

    return te.compute((a, n, c, th, tw * m + 2), fcompute, name=name)


def te_winograd_input_cols(rows: te.Tensor, bt: te.Tensor, m: int,
                           name: str = "winograd_input") -> te.Tensor:
    """The input transform's second half, along the columns of every tile:
    T [m+2, N, C, th, tw * m + 2] -> V [(m+2)^2, P, C] with
    V[u * (m+2) + v, p, c] = sum_j Bt[v, j] * T[u, n, c, ty, tx * m + j]."""
    a, n, c, th, width = rows.shape
    return _input_cols(rows, bt, m, name, (a, n, th, width, c),
                       lambda u, img, ch, ty, x: rows[u, img, ch, ty, x])


def _input_cols(rows: te.Tensor, bt: te.Tensor, m: int, name: str, dims, read) -> te.Tensor:
    """V [(m+2)^2, P, C] of a row transform ``rows`` whose (m+2, N, th, width, C) are
    ``dims`` and whose element (u, n, c, ty, x) is ``read(u, n, c, ty, x)``."""
    a, n, th, width, c = dims
    check(a == m + 2 and (width - 2) % m == 0, "winograd_input",
          f"T {rows.shape} is not a row transform of F({m}, 3)")
    tw = (width - 2) // m
    j = te.reduce_axis(a, name="j")

    def fcompute(e, p, ch):
        img, ty, tx = p // (th * tw), p // tw % th, p % tw
        return te.sum(bt[e % a, j] * read(e // a, img, ch, ty, tx * m + j), axis=j)

    return te.compute((a * a, n * th * tw, c), fcompute, name=name)


def te_winograd_input(data: te.Tensor, bt: te.Tensor, m: int, pads=(1, 1, 1, 1),
                      name: str = "winograd_input") -> te.Tensor:
    """data [N, C, H, W], Bt [m+2, m+2] -> V [(m+2)^2, P, C]: every input tile of the
    zero-padded data, transformed (V[e, p, c] = sum_ij Bt[u, i] Bt[v, j] d_p[c, i, j]), as
    the row and column halves in turn (2 (m+2) multiply-adds per element of V instead of
    (m+2)^2).  A model runs the halves as two kernels (graph operators
    ``winograd_input_rows`` and ``winograd_input_cols``): each alone is a plain contraction
    the tiling rules schedule well; composed, the search seldom found as good a program."""
    rows = te_winograd_input_rows(data, bt, m, pads, name=f"{name}_rows")
    return te_winograd_input_cols(rows, bt, m, name=name)


def _check_at(at: te.Tensor, op: str, m: int) -> None:
    check(tuple(at.shape) == (m, m + 2), op,
          f"At must be {(m, m + 2)} for F({m}, 3), got {at.shape}")


def _output_rows(mm: te.Tensor, at: te.Tensor, m: int, name: str, channels_last: bool
                 ) -> te.Tensor:
    """S[u, j, k, p] (or S[u, j, p, k] with ``channels_last``) =
    sum_i At[u, i] * M[i * (m+2) + j, p, k]."""
    op = "winograd_output_rows"
    a = m + 2
    _check_at(at, op, m)
    check(len(mm.shape) == 3 and mm.shape[0] == a * a, op,
          f"M must be ({a * a}, P, K) for F({m}, 3), got {mm.shape}")
    _, p, k = mm.shape
    i = te.reduce_axis(a, name="i")

    def fcompute(u, col, outer, inner):
        tile, ch = (outer, inner) if channels_last else (inner, outer)
        return te.sum(at[u, i] * mm[i * a + col, tile, ch], axis=i)

    return te.compute((m, a, p, k) if channels_last else (m, a, k, p), fcompute, name=name)


def te_winograd_output_rows(mm: te.Tensor, at: te.Tensor, m: int,
                            name: str = "winograd_output_rows") -> te.Tensor:
    """The output transform's first half, along the rows of every tile:
    M [(m+2)^2, P, K], At [m, m+2] -> S [m, m+2, K, P] with
    S[u, j, k, p] = sum_i At[u, i] * M[i * (m+2) + j, p, k]."""
    return _output_rows(mm, at, m, name, channels_last=False)


def te_winograd_output_cols(rows: te.Tensor, at: te.Tensor, m: int, n: int, oh: int, ow: int,
                            name: str = "winograd_output") -> te.Tensor:
    """The output transform's second half, along the columns of every tile:
    S [m, m+2, K, P] -> Y [N, K, OH, OW] with
    Y[n, k, y, x] = sum_j At[x % m, j] * S[y % m, j, k, p(n, y, x)] (the last partial tile
    cut).  It produces the convolution's value, so the convolution's epilogue fuses here."""
    op = "winograd_output_cols"
    a = m + 2
    _check_at(at, op, m)
    th, tw, tiles = winograd_tiles(n, oh, ow, m)
    check(len(rows.shape) == 4 and tuple(rows.shape[:2]) == (m, a) and rows.shape[3] == tiles,
          op, f"S must be {(m, a, 'K', tiles)} for {n} x {oh} x {ow} outputs, got {rows.shape}")
    j = te.reduce_axis(a, name="j")

    def fcompute(img, ch, y, x):
        tile = (img * th + y // m) * tw + x // m
        return te.sum(at[x % m, j] * rows[y % m, j, ch, tile], axis=j)

    return te.compute((n, rows.shape[2], oh, ow), fcompute, name=name)


def te_winograd_output(mm: te.Tensor, at: te.Tensor, m: int, n: int, oh: int, ow: int,
                       name: str = "winograd_output") -> te.Tensor:
    """M [(m+2)^2, P, K], At [m, m+2] -> Y [N, K, OH, OW]
    (Y[n, k, y, x] = sum_ij At[y % m, i] At[x % m, j] M[i * (m+2) + j, p(n, y, x), k]), as
    the row and column halves in turn ((m+2) (1 + (m+2) / m) multiply-adds per output
    instead of (m+2)^2; a model runs them as two kernels, as it does the input transform's)."""
    rows = te_winograd_output_rows(mm, at, m, name=f"{name}_rows")
    tiles = winograd_tiles(n, oh, ow, m)[2]
    check(mm.shape[1] == tiles, "winograd_output",
          f"M must have {tiles} tiles for {n} x {oh} x {ow} outputs, got {mm.shape}")
    return te_winograd_output_cols(rows, at, m, n, oh, ow, name=name)


def ref_winograd_input_rows(data: np.ndarray, bt: np.ndarray, m: int, pads=(1, 1, 1, 1)
                            ) -> np.ndarray:
    n, c, h, w = data.shape
    _, _, th, tw, _ = _input_tiles(data.shape, m, pads)
    pt, pl = pads[0], pads[1]
    # Zero-pad to whole tiles: th * m + 2 rows cover every tile's input rows.
    padded = np.zeros((n, c, th * m + 2, tw * m + 2), dtype=np.float64)
    rows, cols = min(h, th * m + 2 - pt), min(w, tw * m + 2 - pl)
    padded[:, :, pt:pt + rows, pl:pl + cols] = data[:, :, :rows, :cols]
    win = np.lib.stride_tricks.sliding_window_view(padded, m + 2, axis=2)[:, :, ::m][:, :, :th]
    t = np.einsum("ui,nctxi->unctx", np.asarray(bt, dtype=np.float64), win)
    return t.astype(data.dtype)


def ref_winograd_input_cols(rows: np.ndarray, bt: np.ndarray, m: int) -> np.ndarray:
    a, n, c, th, width = rows.shape
    tw = (width - 2) // m
    win = np.lib.stride_tricks.sliding_window_view(rows.astype(np.float64), a, axis=4)
    win = win[..., ::m, :][..., :tw, :]                     # u, n, c, th, tw, j
    v = np.einsum("vj,unctsj->uvntsc", np.asarray(bt, dtype=np.float64), win)
    return np.ascontiguousarray(v.reshape(a * a, n * th * tw, c), dtype=rows.dtype)


def ref_winograd_input(data: np.ndarray, bt: np.ndarray, m: int, pads=(1, 1, 1, 1)
                       ) -> np.ndarray:
    rows = ref_winograd_input_rows(data.astype(np.float64), bt, m, pads)
    return ref_winograd_input_cols(rows, bt, m).astype(data.dtype)


def ref_winograd_output_rows(mm: np.ndarray, at: np.ndarray, m: int) -> np.ndarray:
    a = m + 2
    _, p, k = mm.shape
    tiles = mm.astype(np.float64).reshape(a, a, p, k)
    s = np.einsum("ui,ijpk->ujkp", np.asarray(at, dtype=np.float64), tiles)
    return np.ascontiguousarray(s, dtype=mm.dtype)


def ref_winograd_output_cols(rows: np.ndarray, at: np.ndarray, m: int, n: int, oh: int,
                             ow: int) -> np.ndarray:
    th, tw, _ = winograd_tiles(n, oh, ow, m)
    _, a, k, _ = rows.shape
    s = rows.astype(np.float64).reshape(m, a, k, n, th, tw)
    y = np.einsum("ujknts,vj->nktusv", s, np.asarray(at, dtype=np.float64))
    y = y.reshape(n, k, th * m, tw * m)[:, :, :oh, :ow]
    return np.ascontiguousarray(y).astype(rows.dtype)


def ref_winograd_output(mm: np.ndarray, at: np.ndarray, m: int, n: int, oh: int, ow: int
                        ) -> np.ndarray:
    rows = ref_winograd_output_rows(mm.astype(np.float64), at, m)
    return ref_winograd_output_cols(rows, at, m, n, oh, ow).astype(mm.dtype)


# ---------------------------------------------------------------------------------------------
# blocked channel layout: the channels innermost in every half
# ---------------------------------------------------------------------------------------------

def te_winograd_input_rows_nchwc(data: te.Tensor, bt: te.Tensor, m: int, pads=(1, 1, 1, 1),
                                 name: str = "winograd_input_rows") -> te.Tensor:
    """``te_winograd_input_rows`` of blocked data: data [N, C/b, H, W, b], Bt [m+2, m+2]
    -> T [m+2, N, C/b, th, tw * m + 2, b] with
    T[u, n, cb, ty, x, c] = sum_i Bt[u, i] * padded[n, cb, ty * m + i, x, c]."""
    check(data.ndim == 5, "winograd_input",
          f"data must be NCHW[b]c (rank 5), got {data.shape}")
    n, cb, h, w, b = data.shape
    a = m + 2
    check(tuple(bt.shape) == (a, a), "winograd_input",
          f"Bt must be {(a, a)} for F({m}, 3), got {bt.shape}")
    _, _, th, tw, _ = _input_tiles((n, cb * b, h, w), m, pads)
    pt, pl = pads[0], pads[1]
    i = te.reduce_axis(a, name="i")
    zero = te.const(0.0, data.dtype)

    def fcompute(u, img, blk, ty, col, ch):
        y, x = ty * m + i - pt, col - pl
        inside = te.all(y >= 0, y < h, x >= 0, x < w)
        return te.sum(bt[u, i] * te.if_then_else(inside, data[img, blk, y, x, ch], zero),
                      axis=i)

    return te.compute((a, n, cb, th, tw * m + 2, b), fcompute, name=name)


def te_winograd_input_cols_nchwc(rows: te.Tensor, bt: te.Tensor, m: int,
                                 name: str = "winograd_input") -> te.Tensor:
    """``te_winograd_input_cols`` of a blocked row transform:
    T [m+2, N, C/b, th, tw * m + 2, b] -> V [(m+2)^2, P, C] with
    V[u * (m+2) + v, p, cb * b + c] = sum_j Bt[v, j] * T[u, n, cb, ty, tx * m + j, c]."""
    check(rows.ndim == 6, "winograd_input",
          f"T must be ({m + 2}, N, C/b, th, tw * {m} + 2, b), got {rows.shape}")
    a, n, cb, th, width, b = rows.shape
    return _input_cols(rows, bt, m, name, (a, n, th, width, cb * b),
                       lambda u, img, ch, ty, x: rows[u, img, ch // b, ty, x, ch % b])


def te_winograd_output_rows_nchwc(mm: te.Tensor, at: te.Tensor, m: int,
                                  name: str = "winograd_output_rows") -> te.Tensor:
    """The output transform's first half with the channels kept innermost:
    M [(m+2)^2, P, K], At [m, m+2] -> S [m, m+2, P, K] with
    S[u, j, p, k] = sum_i At[u, i] * M[i * (m+2) + j, p, k]."""
    return _output_rows(mm, at, m, name, channels_last=True)


def te_winograd_output_cols_nchwc(rows: te.Tensor, at: te.Tensor, m: int, n: int, oh: int,
                                  ow: int, block: int, name: str = "winograd_output"
                                  ) -> te.Tensor:
    """The output transform's second half into the blocked layout:
    S [m, m+2, P, K] -> Y [N, K/b, OH, OW, b] with
    Y[n, kb, y, x, c] = sum_j At[x % m, j] * S[y % m, j, p(n, y, x), kb * b + c]."""
    op = "winograd_output_cols"
    a = m + 2
    _check_at(at, op, m)
    th, tw, tiles = winograd_tiles(n, oh, ow, m)
    check(len(rows.shape) == 4 and tuple(rows.shape[:3]) == (m, a, tiles), op,
          f"S must be {(m, a, tiles, 'K')} for {n} x {oh} x {ow} outputs, got {rows.shape}")
    k = rows.shape[3]
    check(block >= 1 and k % block == 0, op,
          f"{k} channels are not a multiple of the block {block}")
    j = te.reduce_axis(a, name="j")

    def fcompute(img, kb, y, x, ch):
        tile = (img * th + y // m) * tw + x // m
        return te.sum(at[x % m, j] * rows[y % m, j, tile, kb * block + ch], axis=j)

    return te.compute((n, k // block, oh, ow, block), fcompute, name=name)


def _to_blocked(x: np.ndarray, axis: int, block: int) -> np.ndarray:
    """Axis ``axis`` of ``x`` split into (its blocks, ``block``), the block moved last."""
    shape = x.shape[:axis] + (x.shape[axis] // block, block) + x.shape[axis + 1:]
    return np.moveaxis(x.reshape(shape), axis + 1, -1)


def _from_blocked(x: np.ndarray, axis: int) -> np.ndarray:
    """The inverse of ``_to_blocked``: the last axis merged back behind axis ``axis``."""
    x = np.moveaxis(x, -1, axis + 1)
    return x.reshape(x.shape[:axis] + (x.shape[axis] * x.shape[axis + 1],) + x.shape[axis + 2:])


def ref_winograd_input_rows_nchwc(data: np.ndarray, bt: np.ndarray, m: int,
                                  pads=(1, 1, 1, 1)) -> np.ndarray:
    rows = ref_winograd_input_rows(_from_blocked(data, 1), bt, m, pads)
    return np.ascontiguousarray(_to_blocked(rows, 2, data.shape[4]))


def ref_winograd_input_cols_nchwc(rows: np.ndarray, bt: np.ndarray, m: int) -> np.ndarray:
    return ref_winograd_input_cols(np.ascontiguousarray(_from_blocked(rows, 2)), bt, m)


def ref_winograd_output_rows_nchwc(mm: np.ndarray, at: np.ndarray, m: int) -> np.ndarray:
    return np.ascontiguousarray(ref_winograd_output_rows(mm, at, m).transpose(0, 1, 3, 2))


def ref_winograd_output_cols_nchwc(rows: np.ndarray, at: np.ndarray, m: int, n: int, oh: int,
                                   ow: int, block: int) -> np.ndarray:
    y = ref_winograd_output_cols(np.ascontiguousarray(rows.transpose(0, 1, 3, 2)), at, m, n,
                                 oh, ow)
    return np.ascontiguousarray(_to_blocked(y, 1, block))

"""Graph passes: constant folding, batch-norm folding, Winograd convolutions, the blocked
channel layout, dead-code elimination, operator fusion and memory planning for the executor.

    model = optimize(model)             # folding, winograd_conv2d, blocked_layout, dead code
    groups = fuse_ops(model)            # FusedGroup per kernel (or view), topological order
    plan = plan_memory(model, groups)   # storage per value, reused when lifetimes do not meet

Fusion follows TVM's rules on operator patterns (see operators.py): a compute-heavy operator
(conv2d, matmul) or a reduction (softmax, layer_norm, pooling) takes its chain of elementwise and
broadcast consumers as long as each intermediate has that consumer alone and the shape does not
grow; chains of injective operators (elementwise, broadcast, transpose, pad, slice, concat) fuse
together, and such a chain fuses into the reduction that consumes it.  Views (reshape,
identity) are never fused: on a contiguous buffer they cost nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tensor_ir.ops import (
    pack_conv2d_weight_nchwc, pack_depthwise_weight_nchwc, ref_layout_to_blocked,
    winograd_matrices, winograd_tiles, winograd_weight,
)

from .errors import GraphError
from .ir import Model, Node
from .types import contiguous
from .operators import (
    BROADCAST, COMPUTE, ELEMWISE, INJECTIVE, REDUCTION, VIEW, get_op,
)

__all__ = [
    "fold_constants", "fold_batch_norm", "eliminate_dead_code", "winograd_conv2d",
    "blocked_layout", "LAYOUT_BLOCK", "optimize",
    "FusedGroup",
    "fuse_ops", "MemoryPlan", "plan_memory",
]

# Folding a node whose result is larger than this (elements) would bloat the model with a
# constant that is cheaper to compute at run time (a broadcast of a small constant).
MAX_FOLDED_ELEMENTS = 1 << 22


# Shared by the passes that add constants (batch-norm folding, Winograd).
def _fresh_name(base: str, *taken) -> str:
    """``base``, or ``base_1``, ``base_2``, ... : the first not in any of ``taken``."""
    name, k = base, 0
    while any(name in names for names in taken):
        k += 1
        name = f"{base}_{k}"
    return name


# ---------------------------------------------------------------------------------------------
# constant folding / dead code
# ---------------------------------------------------------------------------------------------

def fold_constants(model: Model) -> Model:
    """Evaluate (with numpy) every node whose inputs are all constants."""
    constants = dict(model.constants)
    nodes = []
    changed = False
    for node in model.nodes:
        if node.inputs and all(v in constants for v in node.inputs) \
                and model.types[node.output].size <= MAX_FOLDED_ELEMENTS \
                and node.output not in model.outputs:
            value = get_op(node.op).numpy([constants[v] for v in node.inputs], node.attrs)
            constants[node.output] = contiguous(
                np.asarray(value, dtype=model.types[node.output].dtype))
            changed = True
            continue
        nodes.append(node)
    if not changed:
        return model
    return eliminate_dead_code(model.replace(nodes=nodes, constants=constants))


def eliminate_dead_code(model: Model) -> Model:
    """Drop nodes whose outputs no model output needs, and constants no node reads."""
    needed = set(model.outputs)
    kept = []
    for node in reversed(model.nodes):
        if node.output in needed:
            kept.append(node)
            needed.update(node.inputs)
    kept.reverse()
    constants = {k: v for k, v in model.constants.items() if k in needed}
    if len(kept) == len(model.nodes) and len(constants) == len(model.constants):
        return model
    return model.replace(nodes=kept, constants=constants)


# ---------------------------------------------------------------------------------------------
# batch-norm folding
# ---------------------------------------------------------------------------------------------

def _channel_vector(model: Model, value: str, channels: int) -> np.ndarray | None:
    """The per-channel values of a constant broadcast along axis 1 of an NCHW tensor
    (shape (C, 1, 1) or (1, C, 1, 1)), else None."""
    array = model.constants.get(value)
    if array is None:
        return None
    shape = array.shape
    squeezed = [s for s in shape if s != 1]
    if array.size == 1:
        return np.full(channels, array.reshape(()), dtype=array.dtype)
    if squeezed != [channels] or len(shape) > 4:
        return None
    # The channel axis must land on axis 1 of the rank-4 result.
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    if padded[1] != channels:
        return None
    return array.reshape(channels)


def fold_batch_norm(model: Model) -> Model:
    """Fold inference batch norms into the convolution before them; a batch norm that follows
    no foldable convolution becomes a multiply and an add by per-channel constants.

    Folding: conv(x, W) [+ b] -> bn  ==  conv(x, W * s) + (b * s + beta - mean * s), with
    s = gamma / sqrt(var + eps) per output channel.  The convolution's output must feed the
    batch norm alone (directly or through the bias add)."""
    constants = dict(model.constants)
    nodes = list(model.nodes)
    producers = {n.output: i for i, n in enumerate(nodes)}
    consumers = model.consumers
    outputs = set(model.outputs)
    changed = False

    def sole_use(value: str) -> bool:
        return len(consumers.get(value, [])) == 1 and value not in outputs

    def fresh(base: str) -> str:
        return _fresh_name(base, constants, model.types)

    for index, bn in enumerate(list(nodes)):
        if bn.op != "batch_norm" or not all(v in constants for v in bn.inputs[1:]):
            continue
        x = bn.inputs[0]
        gamma, beta, mean, var = (constants[v].astype(np.float64) for v in bn.inputs[1:])
        scale = gamma / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
        shift = beta - mean * scale
        dtype = model.types[x].dtype
        ndim = len(model.types[x].shape)
        channels = model.types[x].shape[1]
        conv_index, add_index, bias = None, None, np.zeros(channels)
        src = nodes[producers[x]] if x in producers else None
        if src is not None and src.op == "add" and sole_use(x):
            vec = None
            for a, b in (src.inputs, src.inputs[::-1]):
                vec = _channel_vector(model, b, channels)
                if vec is not None and a in producers and nodes[producers[a]].op == "conv2d":
                    add_index, conv_index, bias = producers[x], producers[a], vec
                    break
        elif src is not None and src.op == "conv2d" and sole_use(x):
            conv_index = producers[x]
        conv = nodes[conv_index] if conv_index is not None else None
        if conv is not None and conv.inputs[1] in constants and sole_use(conv.output):
            weight = constants[conv.inputs[1]].astype(np.float64)
            w_name = fresh(f"{conv.inputs[1]}_bn")
            constants[w_name] = (weight * scale[:, None, None, None]).astype(dtype)
            nodes[conv_index] = conv.replace(inputs=(conv.inputs[0], w_name))
            b_name = fresh(f"{bn.name}_bias")
            constants[b_name] = (bias * scale + shift).astype(dtype).reshape(channels, 1, 1)
            if add_index is not None:
                # The bias add now produces the batch norm's output; the bn node goes.
                nodes[add_index] = nodes[add_index].replace(
                    inputs=(conv.output, b_name), output=bn.output)
                nodes[index] = None
            else:
                nodes[index] = bn.replace(op="add", inputs=(x, b_name), attrs={})
        else:
            shape = (channels,) + (1,) * (ndim - 2)
            s_name, t_name = fresh(f"{bn.name}_scale"), fresh(f"{bn.name}_shift")
            constants[s_name] = scale.astype(dtype).reshape(shape)
            constants[t_name] = shift.astype(dtype).reshape(shape)
            scaled = fresh(f"{bn.output}_scaled")
            mul = Node("multiply", (x, s_name), scaled, {}, f"{bn.name}_mul")
            nodes[index] = [mul, bn.replace(op="add", inputs=(scaled, t_name), attrs={})]
        changed = True
    if not changed:
        return model
    flat: list[Node] = []
    for entry in nodes:
        if entry is None:
            continue
        flat.extend(entry if isinstance(entry, list) else [entry])
    return eliminate_dead_code(model.replace(nodes=flat, constants=constants))


# ---------------------------------------------------------------------------------------------
# Winograd convolutions
# ---------------------------------------------------------------------------------------------

# F(m x m, 3x3) replaces the 9 multiply-adds per output pixel and input channel of the
# direct convolution by (m+2)^2 / m^2: 2.25 for m = 4, 4 for m = 2.  The transforms, each
# in two halves, cost 2 (m+2) multiply-adds per element of V and (m+2) (1 + (m+2) / m) per
# element of Y (15 for m = 4; the matrices are parameters, so no zero is skipped): they pay
# off only against enough channels.  The transformed weights are (m+2)^2 / 9 times the
# direct ones (4x for m = 4); where they no longer stay in cache the matmul waits on memory.
# ResNet-18 on Zen 5 (2 threads, 2000 trials for the model, kernels timed in the built
# model, the matmul's rows the tiles), per convolution, direct -> Winograd (its five kernels):
#   64 channels at 56x56, m = 4:  0.51 -> 0.35 ms
#   128 at 28x28, m = 4:          0.50 -> 0.32 ms
#   256 at 14x14, m = 2:          0.50 -> 0.37 ms (4 MiB of weights)
#   256 at 14x14, m = 4:          0.50 -> 0.42 ms (9.4 MB of weights streamed at ~30 GB/s;
#                                 measured with the earlier layout, tiles along the vectors)
# With the tiles along the vectors, the 64-channel convolutions gained nothing in the model
# (0.52 -> 0.52 ms; 0.42 with the output transform split), and the matmuls of 49 tiles
# (28x28 and 14x14 images) filled 49 of 64 vector lanes.  Hence: at least 64 channels, the
# largest tile whose transformed weights take at most 4 MiB, and enough tiles for the matmul.
WINOGRAD_TILE_CHOICES = (4, 2)
WINOGRAD_MIN_CHANNELS = 64
WINOGRAD_MIN_TILES = 16
WINOGRAD_MAX_WEIGHT_BYTES = 4 << 20


def _winograd_tile(model: Model, node: Node, tiles: tuple[int, ...], min_channels: int,
                   min_tiles: int, max_weight_bytes: int) -> int | None:
    """The tile size F(m, 3) to rewrite ``node`` with, or None to keep it direct."""
    if node.op != "conv2d" or node.inputs[1] not in model.constants:
        return None
    data, weight = (model.types[v] for v in node.inputs)
    if data.dtype != "float32" or weight.shape[2:] != (3, 3):
        return None
    if node.attrs.get("groups", 1) != 1 or tuple(node.attrs["strides"]) != (1, 1) \
            or tuple(node.attrs["dilations"]) != (1, 1):
        return None
    k, c = weight.shape[:2]
    if min(k, c) < min_channels:
        return None
    n, _, oh, ow = model.types[node.output].shape
    for m in tiles:
        if (m + 2) ** 2 * k * c * 4 <= max_weight_bytes and \
                winograd_tiles(n, oh, ow, m)[2] >= min_tiles:
            return m
    return None


def winograd_conv2d(model: Model, tiles: tuple[int, ...] = WINOGRAD_TILE_CHOICES,
                    min_channels: int = WINOGRAD_MIN_CHANNELS,
                    min_tiles: int = WINOGRAD_MIN_TILES,
                    max_weight_bytes: int = WINOGRAD_MAX_WEIGHT_BYTES) -> Model:
    """Rewrite each stride-1 3x3 convolution with constant float32 weights and at least
    ``min_channels`` input and output channels as Winograd F(m, 3), with the first tile size
    m of ``tiles`` whose transformed weights take at most ``max_weight_bytes`` and which
    gives at least ``min_tiles`` output tiles (none: the convolution stays direct).

    The rewrite is the input transform (``winograd_input_rows``, then
    ``winograd_input_cols``), a batched ``matmul`` of its result with the transformed
    weights (a new constant, computed here in float64), and the output transform
    (``winograd_output_rows``, then ``winograd_output_cols``, which produces the
    convolution's output value, so that its bias, residual add and activation fuse into
    it)."""
    constants = dict(model.constants)
    nodes: list[Node] = []
    matrices: dict[tuple[str, int], str] = {}

    def fresh(base: str) -> str:
        return _fresh_name(base, constants, model.types)

    def matrix(kind: str, m: int, array: np.ndarray) -> str:
        if (kind, m) not in matrices:
            matrices[kind, m] = fresh(f"winograd_{kind}{m}")
            constants[matrices[kind, m]] = contiguous(array.astype(np.float32))
        return matrices[kind, m]

    for node in model.nodes:
        m = _winograd_tile(model, node, tuple(tiles), min_channels, min_tiles,
                           max_weight_bytes)
        if m is None:
            nodes.append(node)
            continue
        bt, _, at = winograd_matrices(m)
        x, w = node.inputs
        u = fresh(f"{w}_winograd{m}")
        constants[u] = contiguous(winograd_weight(constants[w], m))
        t, v = fresh(f"{node.output}_wino_t"), fresh(f"{node.output}_wino_v")
        mm, s = fresh(f"{node.output}_wino_m"), fresh(f"{node.output}_wino_s")
        n, _, oh, ow = model.types[node.output].shape
        nodes += [
            Node("winograd_input_rows", (x, matrix("bt", m, bt)), t,
                 {"tile": m, "pads": tuple(node.attrs["pads"])}, f"{node.name}_wino_rows"),
            Node("winograd_input_cols", (t, matrix("bt", m, bt)), v, {"tile": m},
                 f"{node.name}_wino_cols"),
            Node("matmul", (v, u), mm, {}, f"{node.name}_wino_mm"),
            Node("winograd_output_rows", (mm, matrix("at", m, at)), s, {"tile": m},
                 f"{node.name}_wino_out_rows"),
            Node("winograd_output_cols", (s, matrix("at", m, at)), node.output,
                 {"tile": m, "batch": n, "height": oh, "width": ow},
                 f"{node.name}_wino_out"),
        ]
    if not matrices:
        return model
    return eliminate_dead_code(model.replace(nodes=nodes, constants=constants))


# ---------------------------------------------------------------------------------------------
# blocked channel layout
# ---------------------------------------------------------------------------------------------

# 16 float32 channels per block: one 64-byte cache line, one AVX-512 vector (two AVX2 ones).
# Tuned alone at 128 trials on this project's Zen 5 host (2 threads), a blocked convolution
# against the NCHW task's best after 2000 model trials: 1x1 160 -> 960 channels at 7x7
# 0.031 ms against 0.052; the stride-2 3x3 depthwise of 96 channels at 112x112 0.037 ms
# against 0.081 (onnxruntime, whose CPU kernels use the same layout, 0.042 and 0.056 in the
# model).  Where the channels are not a multiple of 16, fewer than 32 are one block (a 1x1
# convolution 96 -> 24 channels at 56x56, tuned alone, 128 trials: 0.038 ms in one block of
# 24, 0.057 ms in blocks of 8; 144 -> 24: 0.064 against 0.084).
LAYOUT_BLOCK = 16


def _channel_block(channels: int, block: int) -> int | None:
    """The block of a tensor of ``channels`` channels: ``block`` when it divides them; all of
    them when they are fewer than two blocks (an image's 3 channels; 24 channels as one
    block of 16 + 8 vector lanes, where blocks of 8 would fill half of each vector); else the
    largest of ``block``/2 and ``block``/4 that divides them; None when none does."""
    if channels % block == 0:
        return block
    if channels < 2 * block:
        return channels
    for b in (block // 2, block // 4):
        if b >= 1 and channels % b == 0:
            return b
    return None


def _layout_blocks(model: Model, node: Node, block: int) -> tuple[int, int] | None:
    """(input block, output block) of a convolution the blocked layout takes, else None:
    constant float32 weights, both channel counts with a block (``_channel_block``), and
    dense or depthwise (one weight per channel)."""
    if node.op != "conv2d" or node.inputs[1] not in model.constants:
        return None
    data, weight = (model.types[v] for v in node.inputs)
    if data.dtype != "float32":
        return None
    c, (k, cg) = data.shape[1], weight.shape[:2]
    groups = node.attrs.get("groups", 1)
    cb, kb = _channel_block(c, block), _channel_block(k, block)
    if cb is None or kb is None or (kb == k and k < block):
        return None
    if groups == 1:
        return cb, kb
    return (cb, kb) if groups == c == k and cg == 1 else None


def _blocked_winograd(model: Model, node: Node, block: int, renamed: dict[str, str]
                      ) -> tuple[str, tuple, dict, int | None] | None:
    """(op, inputs, attrs, output block) of the blocked twin of a Winograd half (see
    ``winograd_conv2d``), else None: the output block is None for the halves inside the
    convolution, the block of its output channels for the last half.  The input transform's
    first half says in attrs["in_block"] the block its data is to be laid out in.  A
    convolution whose input channels have no block keeps its input halves in NCHW, one whose
    output channels have none its output halves (the matmul between them is the same)."""
    def channel_block(value: str, axis: int) -> int | None:
        # As for a convolution (``_layout_blocks``): fewer channels than a block stay NCHW.
        channels = model.types[value].shape[axis]
        b = _channel_block(channels, block)
        return None if b is None or (b == channels < block) else b

    op, inputs = node.op, node.inputs
    if op == "winograd_input_rows":
        cb = channel_block(inputs[0], 1)
        return None if cb is None else (f"{op}_nchwc", inputs, {**node.attrs, "in_block": cb},
                                        None)
    if op in ("winograd_input_cols", "winograd_output_cols") and inputs[0] in renamed:
        attrs, kb = dict(node.attrs), None
        if op == "winograd_output_cols":
            kb = attrs["block"] = channel_block(inputs[0], 2)   # S [m, m+2, K, P]
        return f"{op}_nchwc", (renamed[inputs[0]],) + inputs[1:], attrs, kb
    if op == "winograd_output_rows" and channel_block(inputs[0], 2) is not None:
        return f"{op}_nchwc", inputs, dict(node.attrs), None
    return None


def blocked_layout(model: Model, block: int = LAYOUT_BLOCK) -> Model:
    """Put the convolutions that ``_layout_blocks`` takes in the blocked channel layout
    [N, C / b, H, W, b] (``conv2d_nchwc``, ``depthwise_conv2d_nchwc``, their weights laid out
    here once), and keep their activations in it across the elementwise operators between
    them (bias, activation, residual add; a per-channel constant is laid out in blocks), a
    max pooling of a blocked value (``max_pool2d_nchwc``) and the halves of a Winograd
    convolution (their ``_nchwc`` twins, see ``_blocked_winograd``).
    ``layout_to_blocked`` enters the layout and ``layout_from_blocked`` leaves it where an
    operator reads NCHW (another pooling, a reshape, a model output): each value is converted
    at most once each way, and the NCHW value keeps its name."""
    constants = dict(model.constants)
    nodes: list[Node] = []
    blocked: dict[str, str] = {}   # NCHW value -> its blocked twin
    blocked_blocks: dict[str, int] = {}   # NCHW value -> its twin's block
    plain = set(model.inputs) | set(constants)   # values that exist in NCHW

    laid_out: dict[tuple[str, int], str] = {}   # (constant, block) -> its blocked copy
    renamed: dict[str, str] = {}   # a Winograd half's NCHW output -> its blocked twin's

    def fresh(base: str) -> str:
        return _fresh_name(base, constants, model.types, blocked.values(), renamed.values())

    def make_plain(value: str) -> None:
        if value not in plain:
            nodes.append(Node("layout_from_blocked", (blocked[value],), value, {},
                              f"{value}_from_blocked"))
            plain.add(value)

    def make_blocked(value: str, b: int) -> str:
        if value in blocked and blocked_blocks[value] == b:
            return blocked[value]
        make_plain(value)
        out = fresh(f"{value}_blocked{b}")
        nodes.append(Node("layout_to_blocked", (value,), out, {"block": b}, out))
        if value not in blocked:
            blocked[value], blocked_blocks[value] = out, b
        return out

    def blocked_operand(value: str, shape: tuple, b: int) -> str | None:
        """``value`` as an operand of an elementwise operator on a blocked ``shape``
        (NCHW), or None where the operator must stay in NCHW."""
        if value in blocked and blocked_blocks[value] == b and \
                model.types[value].shape == shape:
            return blocked[value]
        array = constants.get(value)
        if array is None:
            return None
        if array.size == 1:
            return value
        c = shape[1]
        if array.shape not in ((c, 1, 1), (1, c, 1, 1)):
            return None
        if (value, b) not in laid_out:
            name = laid_out[value, b] = fresh(f"{value}_blocked{b}")
            constants[name] = contiguous(ref_layout_to_blocked(array.reshape(1, c, 1, 1), b)
                                         .reshape(c // b, 1, 1, b))
        return laid_out[value, b]

    for node in model.nodes:
        twin = _blocked_winograd(model, node, block, renamed)
        if twin is not None:
            op, inputs, attrs, kb = twin
            if node.op == "winograd_input_rows":
                inputs = (make_blocked(inputs[0], attrs.pop("in_block")),) + inputs[1:]
            if node.op == "winograd_input_cols":
                # The transformed tiles V keep their layout (and name): the matmul reads them.
                nodes.append(Node(op, inputs, node.output, attrs, node.name))
                plain.add(node.output)
                continue
            out = fresh(f"{node.output}_blocked{kb or ''}")
            nodes.append(Node(op, inputs, out, attrs, node.name))
            if kb is None:
                renamed[node.output] = out
            else:
                blocked[node.output], blocked_blocks[node.output] = out, kb
            continue
        blocks = _layout_blocks(model, node, block)
        if blocks is not None:
            cb, kb = blocks
            x, w = node.inputs
            weight = constants[w]
            depthwise = node.attrs.get("groups", 1) > 1
            packed = fresh(f"{w}_blocked")
            constants[packed] = contiguous(pack_depthwise_weight_nchwc(weight, kb) if depthwise
                                           else pack_conv2d_weight_nchwc(weight, cb, kb))
            out = fresh(f"{node.output}_blocked{kb}")
            attrs = {key: node.attrs[key] for key in ("strides", "pads", "dilations")}
            # An NCHW input of one block (an image) is read in place, not laid out first.
            data = x if (not depthwise and x not in blocked and
                         cb == model.types[x].shape[1]) else make_blocked(x, cb)
            nodes.append(Node("depthwise_conv2d_nchwc" if depthwise else "conv2d_nchwc",
                              (data, packed), out, attrs, node.name))
            blocked[node.output], blocked_blocks[node.output] = out, kb
            continue
        shape = model.types[node.output].shape
        sources = [v for v in node.inputs if v in blocked and v not in plain]
        if node.op == "max_pool2d" and sources:
            b = blocked_blocks[sources[0]]
            out = fresh(f"{node.output}_blocked{b}")
            nodes.append(node.replace(op="max_pool2d_nchwc", inputs=(blocked[sources[0]],),
                                      output=out))
            blocked[node.output], blocked_blocks[node.output] = out, b
            continue
        if node.kind in (ELEMWISE, BROADCAST) and sources and len(shape) == 4:
            b = blocked_blocks[sources[0]]
            operands = [blocked_operand(v, shape, b) for v in node.inputs]
            if all(o is not None for o in operands):
                out = fresh(f"{node.output}_blocked{b}")
                nodes.append(node.replace(inputs=tuple(operands), output=out))
                blocked[node.output], blocked_blocks[node.output] = out, b
                continue
        for value in node.inputs:
            make_plain(value)
        nodes.append(node)
        plain.add(node.output)
    if not blocked:
        return model
    for value in model.outputs:
        make_plain(value)
    return eliminate_dead_code(model.replace(nodes=nodes, constants=constants))


def optimize(model: Model, winograd: bool = True, layout: str = "auto") -> Model:
    """The standard pipeline before fusion (``winograd``: rewrite the convolutions where
    Winograd pays, see ``winograd_conv2d``; ``layout``: "NCHW" keeps every convolution in
    NCHW, "blocked" puts those it can take in the blocked layout (see ``blocked_layout``),
    with the Winograd transforms and the max pooling between them, so that activations are
    not laid out again between convolutions; "auto", the default, is "blocked": on
    ResNet-18, whose Winograd transforms once kept the whole model in NCHW, the blocked
    halves took a fraction of the NCHW ones' time, see ``tensor_ir.ops.winograd``)."""
    if layout not in ("auto", "blocked", "NCHW"):
        raise GraphError(f"optimize: layout must be 'auto', 'blocked' or 'NCHW', got "
                         f"{layout!r}")
    model = fold_constants(model)
    model = fold_batch_norm(model)
    model = fold_constants(model)
    if winograd:
        model = winograd_conv2d(model)
    if layout in ("blocked", "auto"):
        model = blocked_layout(model)
    return eliminate_dead_code(model)


# ---------------------------------------------------------------------------------------------
# fusion
# ---------------------------------------------------------------------------------------------

_INJECTIVE_KINDS = (ELEMWISE, BROADCAST, INJECTIVE)


@dataclass
class FusedGroup:
    """Operators that become one kernel (or one view when ``kind`` is "view").

    ``inputs``: the values the group reads from outside (graph inputs, constants, other
    groups' outputs) in first-use order; ``output``: the single value it produces; ``kind``:
    the pattern of its master operator (compute, reduction, injective or view)."""

    nodes: list[Node]
    kind: str
    inputs: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return self.nodes[-1].output

    @property
    def name(self) -> str:
        """A name made of the operators, the same for structurally equal groups."""
        return "fused_" + "_".join(n.op for n in self.nodes)

    def __repr__(self) -> str:
        return f"FusedGroup({self.name}: {', '.join(n.name for n in self.nodes)})"


def _can_join(group: FusedGroup, node: Node, model: Model) -> str | None:
    """The group's kind after ``node`` joins it, or None when it may not."""
    kind = node.kind
    if group.kind in (COMPUTE, REDUCTION):
        if kind in (ELEMWISE, BROADCAST) and \
                model.types[node.output].shape == model.types[group.output].shape:
            return group.kind
        return None
    if group.kind == INJECTIVE:
        # A view inside an injective chain (slice -> reshape -> transpose) is one more
        # index remapping that inlining removes; on its own it would cut the chain.
        if kind in _INJECTIVE_KINDS or kind == VIEW:
            return INJECTIVE
        if kind == REDUCTION:
            return REDUCTION
    return None


def fuse_ops(model: Model) -> list[FusedGroup]:
    """Partition the nodes into fused groups, in topological order."""
    groups: list[FusedGroup] = []
    group_of: dict[str, FusedGroup] = {}
    outputs = set(model.outputs)
    consumers = model.consumers
    for node in model.nodes:
        kind = node.kind
        chosen = None
        for value in dict.fromkeys(node.inputs):
            group = group_of.get(value)
            if group is None or group.kind == VIEW or group.output != value:
                continue
            if value in outputs or len(consumers.get(value, [])) != 1:
                continue  # the value must be materialised for its other readers
            if node.inputs.count(value) != 1:
                continue
            new_kind = _can_join(group, node, model)
            if new_kind is not None:
                chosen = (group, new_kind)
                break
        if chosen is None:
            group = FusedGroup([node], INJECTIVE if kind in _INJECTIVE_KINDS else kind)
            groups.append(group)
        else:
            group, group.kind = chosen
            group.nodes.append(node)
        group_of[node.output] = group
    # A group that took a consumer may now read values of groups created after it (the
    # residual add of a block reads the shortcut branch).  Ordering by the last node gives a
    # topological order: every value a group reads is produced by a group's last node, which
    # precedes the reader.  No cycle is possible: every value inside a group has its one
    # consumer inside the group.
    position = {n.output: k for k, n in enumerate(model.nodes)}
    groups.sort(key=lambda g: position[g.output])
    for group in groups:
        inside = {n.output for n in group.nodes}
        reads: list[str] = []
        for n in group.nodes:
            for value in n.inputs:
                if value not in inside and value not in reads:
                    reads.append(value)
        group.inputs = reads
    return groups


# ---------------------------------------------------------------------------------------------
# memory planning
# ---------------------------------------------------------------------------------------------

ALIGNMENT = 64


@dataclass
class MemoryPlan:
    """Where each value lives at run time.

    ``storage[value]`` is a storage id for graph inputs and group outputs (views share their
    source's id; constants have none: the executor keeps them as they are); ``sizes[id]`` is
    the storage's size in bytes.  Storages whose lifetimes do not overlap are shared; a
    group's output never shares with its inputs (kernel arguments must not alias), and
    model outputs get storage of their own."""

    storage: dict[str, int]
    sizes: list[int]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)


def _round(nbytes: int) -> int:
    return max(ALIGNMENT, -(-nbytes // ALIGNMENT) * ALIGNMENT)


def plan_memory(model: Model, groups: list[FusedGroup]) -> MemoryPlan:
    storage: dict[str, int] = {}
    sizes: list[int] = []
    # Steps: 0 is the input copy, group k is step k + 1.
    root: dict[str, str] = {}  # view value -> the non-view value it aliases

    def base(value: str) -> str:
        return root.get(value, value)

    for group in groups:
        if group.kind == VIEW:
            root[group.output] = base(group.inputs[0])
    last_use: dict[str, int] = {}
    for step, group in enumerate(groups, start=1):
        for value in group.inputs:
            last_use[base(value)] = step
    pinned = {base(v) for v in model.outputs}
    free: list[int] = []
    releases: dict[int, list[int]] = {}

    def allocate(value: str, step: int) -> None:
        need = _round(model.types[value].nbytes)
        if value in pinned:
            sid = len(sizes)
            sizes.append(need)
        else:
            fits = [s for s in free if sizes[s] >= need]
            if fits:
                sid = min(fits, key=lambda s: sizes[s])
            elif free:
                sid = max(free, key=lambda s: sizes[s])
                sizes[sid] = need  # grow the largest free storage rather than add one
            else:
                sid = len(sizes)
                sizes.append(need)
            if sid in free:
                free.remove(sid)
        storage[value] = sid
        end = last_use.get(value)
        if value not in pinned:
            # A value nobody reads (cannot happen after dead-code elimination) frees at once.
            releases.setdefault(end if end is not None else step, []).append(sid)

    for name in model.inputs:
        allocate(name, 0)
    for sid in releases.pop(0, []):
        free.append(sid)
    for step, group in enumerate(groups, start=1):
        if group.kind == VIEW:
            source = base(group.inputs[0])
            if source in storage:
                storage[group.output] = storage[source]
        else:
            allocate(group.output, step)
        for sid in releases.pop(step, []):
            free.append(sid)
    missing = [v for v in model.outputs if base(v) not in storage and base(v)
               not in model.constants]
    if missing:
        raise GraphError(f"memory plan: model outputs {missing} have no storage")
    return MemoryPlan(storage, sizes)


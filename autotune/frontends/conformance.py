"""ONNX operator conformance: ONNX's own node test cases run through the importer and executor.

    from autotune.frontends import conformance
    result = conformance.run_case(case)       # one onnx.backend.test TestCase
    result.status                             # "pass", "wrong", "crash" or "refused"

The cases are ``onnx.backend.test.case.node.collect_testcases()``: one small model per case,
with its inputs and reference outputs.  A case is *in scope* when every graph input and output
is a tensor of an element type the project could represent (see :func:`case_scope`); the rest
(sequences, optionals, strings, complex, float8 and sub-byte types) are counted apart.

Each in-scope case ends in one of four states:

``pass``     built, ran and matched every reference output (see :func:`outputs_match`);
``wrong``    built and ran, but an output differs from the reference;
``crash``    an exception that is none of the project's typed errors (a bug);
``refused``  one of the project's typed errors (an unsupported operator or variant).

A refused case must be explained: its operator is on :data:`OUT_OF_SCOPE` (with the reason it
is not meant to be supported), or the case is on :data:`KNOWN_FAILURES` (in scope, not done
yet).  ``tests/graph/test_onnx_conformance.py`` holds both lists to be true, and
``benchmarks/onnx_conformance.py`` prints the whole picture as JSON.  ONNX's whole-model
suites go through the same :func:`run_case` (``autotune.frontends.onnx_suites``).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from schedules.errors import ScheduleError
from tensor_ir.errors import TensorIRError

__all__ = ["CaseResult", "OUT_OF_SCOPE", "OUT_OF_SCOPE_CASES", "KNOWN_FAILURES",
           "TYPED_ERRORS", "collect_cases", "case_scope", "case_operator", "run_case",
           "outputs_match", "explain_refusal", "summarize", "sample_names", "STATIC_INPUTS",
           "static_inputs", "graph_operators", "out_of_scope_operator"]

# The errors the project raises on purpose: a refusal with one of these is "refused", any
# other exception escaping the import, build or run is a "crash".
TYPED_ERRORS: tuple[type[BaseException], ...] = (TensorIRError, ScheduleError)

# ONNX operators the project does not mean to support, each with the reason.  A case whose
# graph uses one of them may be refused without being a known failure.
OUT_OF_SCOPE: dict[str, str] = {
    # Control flow and sequences: the graph IR is a static dataflow graph of tensors.
    "If": "control flow (subgraphs)",
    "Loop": "control flow (subgraphs)",
    "Scan": "control flow (subgraphs)",
    "SequenceAt": "sequence values", "SequenceConstruct": "sequence values",
    "SequenceEmpty": "sequence values", "SequenceErase": "sequence values",
    "SequenceInsert": "sequence values", "SequenceLength": "sequence values",
    "SequenceMap": "sequence values", "SplitToSequence": "sequence values",
    "ConcatFromSequence": "sequence values",
    "Optional": "optional values", "OptionalGetElement": "optional values",
    "OptionalHasElement": "optional values",
    # Random numbers: no reference to compare against, and no RNG in the kernels.
    "Bernoulli": "random numbers", "RandomNormal": "random numbers",
    "RandomNormalLike": "random numbers", "RandomUniform": "random numbers",
    "RandomUniformLike": "random numbers", "Multinomial": "random numbers",
    # Training: inference-only importer.
    "Adagrad": "training operator", "Adam": "training operator",
    "Momentum": "training operator", "Gradient": "training operator",
    "ai.onnx.preview.training.Adagrad": "training operator",
    "ai.onnx.preview.training.Adam": "training operator",
    "ai.onnx.preview.training.Momentum": "training operator",
    # Strings and text.
    "StringNormalizer": "string tensors", "StringConcat": "string tensors",
    "StringSplit": "string tensors", "RegexFullMatch": "string tensors",
    "TfIdfVectorizer": "text feature extraction",
    # Quantized arithmetic and low-precision formats: no integer-quantized kernels.
    "QuantizeLinear": "quantization", "DequantizeLinear": "quantization",
    "DynamicQuantizeLinear": "quantization", "QLinearConv": "quantization",
    "QLinearMatMul": "quantization", "ConvInteger": "quantization",
    "MatMulInteger": "quantization",
    # Signal processing, images and classical ML.
    "DFT": "signal processing (complex values)", "STFT": "signal processing",
    "MelWeightMatrix": "signal processing", "BlackmanWindow": "signal processing",
    "HammingWindow": "signal processing", "HannWindow": "signal processing",
    "ImageDecoder": "image decoding", "ai.onnx.ml.LabelEncoder": "classical ML (ai.onnx.ml)",
    "ai.onnx.ml.TreeEnsemble": "classical ML (ai.onnx.ml)",
    "ai.onnx.ml.Binarizer": "classical ML (ai.onnx.ml)",
    "ai.onnx.ml.ArrayFeatureExtractor": "classical ML (ai.onnx.ml)",
    # Data-dependent output shapes: kernels have static extents.
    "NonZero": "data-dependent output shape", "Unique": "data-dependent output shape",
    "Compress": "data-dependent output shape",
    "NonMaxSuppression": "data-dependent output shape",
    "StringStrip": "string tensors",
    # Function operators whose ONNX bodies need what is out of scope above.
    "LinearAttention": "its ONNX function body is a Scan (control flow)",
    "AffineGrid": "its ONNX function body uses If (control flow)",
    "ai.onnx.preview.FlexAttention": "an operator of the ai.onnx.preview domain",
}

# Cases refused on purpose though their operator is in scope, each with the reason.
OUT_OF_SCOPE_CASES: dict[str, str] = {
    **{name: "training-mode dropout draws random masks" for name in (
        "test_training_dropout", "test_training_dropout_default",
        "test_training_dropout_default_mask", "test_training_dropout_mask")},
    **{name: "training-mode batch normalization (running statistics)" for name in (
        "test_batchnorm_epsilon_training_mode", "test_batchnorm_example_training_mode")},
}

# In-scope cases that are refused today, each with the reason; the test fails when one of them
# passes (remove it here) and when a case fails that is on neither list.  Keep it shrinking.
_KNOWN_BY_REASON: dict[str, tuple[str, ...]] = {
    '(Einsum): attribute equation=-> term  does not match an operand of rank 0': (
        'test_einsum_scalar',
    ),
    'Einsum: equation ...ii ->...i: a letter repeated in one operand (diagonals)': (
        'test_einsum_batch_diagonal',
    ),
    'MaxPool: its optional outputs [z] are used; only the first output is supported': (
        'test_maxpool_with_argmax_2d_precomputed_pads',
        'test_maxpool_with_argmax_2d_precomputed_strides',
    ),
    'Pad: pads must be a constant (computed from initializers and static shapes)': (
        'test_center_crop_pad_crop_and_pad_expanded',
        'test_center_crop_pad_crop_axes_chw_expanded',
        'test_center_crop_pad_crop_axes_hwc_expanded', 'test_center_crop_pad_crop_expanded',
        'test_center_crop_pad_crop_negative_axes_hwc_expanded',
        'test_center_crop_pad_pad_expanded',
    ),
    'Range: limit must be a constant (computed from initializers and static shapes)': (
        'test_blackmanwindow_expanded', 'test_blackmanwindow_symmetric_expanded',
        'test_hammingwindow_expanded', 'test_hammingwindow_symmetric_expanded',
        'test_hannwindow_expanded', 'test_hannwindow_symmetric_expanded',
    ),
    'Resize: antialias=1': (
        'test_resize_downsample_scales_linear_antialias',
        'test_resize_downsample_sizes_linear_antialias',
    ),
    'Resize: coordinate_transformation_mode=tf_crop_and_resize': (
        'test_resize_tf_crop_and_resize', 'test_resize_tf_crop_and_resize_axes_2_3',
        'test_resize_tf_crop_and_resize_axes_3_2',
        'test_resize_tf_crop_and_resize_extrapolation_value',
    ),
    'Resize: mode=cubic (nearest and linear only)': (
        'test_resize_downsample_scales_cubic',
        'test_resize_downsample_scales_cubic_A_n0p5_exclude_outside',
        'test_resize_downsample_scales_cubic_align_corners',
        'test_resize_downsample_scales_cubic_antialias', 'test_resize_downsample_sizes_cubic',
        'test_resize_downsample_sizes_cubic_antialias', 'test_resize_upsample_scales_cubic',
        'test_resize_upsample_scales_cubic_A_n0p5_exclude_outside',
        'test_resize_upsample_scales_cubic_align_corners',
        'test_resize_upsample_scales_cubic_asymmetric', 'test_resize_upsample_sizes_cubic',
    ),
    'Slice: step -1 (only positive steps)': (
        'test_slice_neg_steps',
    ),
    'bfloat16 element type (numpy has no bfloat16)': (
        'test_attention_3d_causal_bf16', 'test_attention_3d_causal_bf16_expanded',
        'test_attention_4d_attn_mask_causal_bf16',
        'test_attention_4d_attn_mask_causal_bf16_expanded', 'test_attention_4d_causal_bf16',
        'test_attention_4d_causal_bf16_expanded', 'test_attention_4d_causal_padded_kv_bf16',
        'test_attention_4d_causal_padded_kv_bf16_expanded', 'test_attention_4d_padded_kv_bf16',
        'test_attention_4d_padded_kv_bf16_expanded', 'test_cast_BFLOAT16_to_FLOAT',
        'test_cast_FLOAT_to_BFLOAT16', 'test_castlike_BFLOAT16_to_FLOAT',
        'test_castlike_BFLOAT16_to_FLOAT_expanded', 'test_castlike_FLOAT_to_BFLOAT16',
        'test_castlike_FLOAT_to_BFLOAT16_expanded', 'test_celu_bfloat16',
        'test_celu_bfloat16_expanded', 'test_einsum_batch_matmul_bfloat16',
        'test_einsum_sum_bfloat16', 'test_einsum_transpose_bfloat16',
        'test_onehot_with_bfloat16_values', 'test_range_bfloat16_type_positive_delta',
        'test_reversesequence_bfloat16',
    ),
    'no converter yet: Acos': (
        'test_acos', 'test_acos_example',
    ),
    'no converter yet: Asin': (
        'test_asin', 'test_asin_example',
    ),
    'no converter yet: Atan': (
        'test_atan', 'test_atan_example',
    ),
    'no converter yet: BitCast': (
        'test_bitcast_2d_float32_to_int32', 'test_bitcast_bool_to_uint8',
        'test_bitcast_float32_to_int32', 'test_bitcast_float64_to_int64',
        'test_bitcast_int32_to_float32', 'test_bitcast_int64_to_float64',
        'test_bitcast_int8_to_uint8', 'test_bitcast_scalar_float32_to_int32',
        'test_bitcast_uint16_to_int16', 'test_bitcast_uint32_to_int32',
    ),
    'no converter yet: Col2Im': (
        'test_col2im', 'test_col2im_5d', 'test_col2im_dilations', 'test_col2im_pads',
        'test_col2im_strides',
    ),
    'no converter yet: DeformConv': (
        'test_basic_deform_conv_with_padding', 'test_basic_deform_conv_without_padding',
        'test_deform_conv_with_mask_bias', 'test_deform_conv_with_multiple_offset_groups',
    ),
    'no converter yet: Det': (
        'test_det_2d', 'test_det_nd',
    ),
    'no converter yet: GRU': (
        'test_gru_batchwise', 'test_gru_bidirectional', 'test_gru_defaults', 'test_gru_reverse',
        'test_gru_seq_length', 'test_gru_with_initial_bias',
    ),
    'no converter yet: GridSample': (
        'test_gridsample', 'test_gridsample_aligncorners_true', 'test_gridsample_bicubic',
        'test_gridsample_bicubic_align_corners_0_additional_1',
        'test_gridsample_bicubic_align_corners_1_additional_1', 'test_gridsample_bilinear',
        'test_gridsample_bilinear_align_corners_0_additional_1',
        'test_gridsample_bilinear_align_corners_1_additional_1', 'test_gridsample_border_padding',
        'test_gridsample_nearest', 'test_gridsample_nearest_align_corners_0_additional_1',
        'test_gridsample_nearest_align_corners_1_additional_1',
        'test_gridsample_reflection_padding',
        'test_gridsample_volumetric_bilinear_align_corners_0',
        'test_gridsample_volumetric_bilinear_align_corners_1',
        'test_gridsample_volumetric_nearest_align_corners_0',
        'test_gridsample_volumetric_nearest_align_corners_1', 'test_gridsample_zeros_padding',
    ),
    'no converter yet: LSTM': (
        'test_lstm_batchwise', 'test_lstm_bidirectional', 'test_lstm_defaults',
        'test_lstm_reverse', 'test_lstm_with_initial_bias', 'test_lstm_with_peepholes',
    ),
    'no converter yet: MaxUnpool': (
        'test_maxunpool_export_with_output_shape', 'test_maxunpool_export_without_output_shape',
    ),
    'no converter yet: RNN': (
        'test_rnn_seq_length', 'test_simple_rnn_batchwise', 'test_simple_rnn_bidirectional',
        'test_simple_rnn_defaults', 'test_simple_rnn_reverse', 'test_simple_rnn_with_initial_bias',
    ),
    'no converter yet: ReverseSequence': (
        'test_reversesequence_batch', 'test_reversesequence_time',
    ),
    'no converter yet: RoiAlign': (
        'test_roialign_aligned_false', 'test_roialign_aligned_true', 'test_roialign_mode_max',
    ),
    'no converter yet: TensorScatter': (
        'test_tensorscatter', 'test_tensorscatter_3d', 'test_tensorscatter_circular',
    ),
    'no converter yet: Upsample': (
        'test_upsample_nearest',
    ),
}

KNOWN_FAILURES: dict[str, str] = {
    name: reason for reason, names in _KNOWN_BY_REASON.items() for name in names}


@dataclass(frozen=True)
class CaseResult:
    name: str
    operator: str
    status: str  # pass, wrong, crash, refused
    error_type: str | None = None
    message: str | None = None  # the first line of the error or of the mismatch

    def to_json(self) -> dict:
        out = {"name": self.name, "operator": self.operator, "status": self.status}
        if self.error_type is not None:
            out["error_type"] = self.error_type
        if self.message is not None:
            out["message"] = self.message
        return out


def collect_cases() -> list:
    """Every ONNX node test case, sorted by name (onnx's reference code warns on overflowing
    casts while generating them: silenced)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    return sorted(cases, key=lambda c: c.name)


def _excluded_types():
    import onnx

    proto = onnx.TensorProto
    excluded = {proto.STRING: "string", proto.COMPLEX64: "complex", proto.COMPLEX128: "complex"}
    for name in proto.DataType.keys():
        if name.startswith(("FLOAT8", "FLOAT4", "INT4", "UINT4", "INT2", "UINT2")):
            excluded[getattr(proto, name)] = name.lower()
    return excluded


def case_scope(case) -> str | None:
    """None when ``case`` is in scope; otherwise why not (a sequence, optional or map value, or
    an element type outside the project's: string, complex, float8, 4- and 2-bit)."""
    excluded = _excluded_types()
    graph = case.model.graph
    for value in list(graph.input) + list(graph.output):
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            return f"{value.name!r} is a {kind.replace('_type', '')} value"
        elem = value.type.tensor_type.elem_type
        if elem in excluded:
            return f"{value.name!r} has element type {excluded[elem]}"
    return None


_SCHEMA_KEYS: list[tuple[str, str]] | None = None


def case_operator(case) -> str:
    """The ONNX operator a case is about: the longest operator name that begins the case's
    name (``test_reduce_sum_keepdims`` -> ReduceSum), else its first node's op type."""
    global _SCHEMA_KEYS
    if _SCHEMA_KEYS is None:
        import onnx

        names = {s.name for s in onnx.defs.get_all_schemas_with_history()}
        _SCHEMA_KEYS = sorted(((n.lower(), n) for n in names), key=lambda k: -len(k[0]))
    stem = case.name[len("test_"):].replace("_", "").lower()
    for key, name in _SCHEMA_KEYS:
        if stem.startswith(key):
            return name
    nodes = case.model.graph.node
    return nodes[0].op_type if nodes else "<none>"


def graph_operators(case) -> set[str]:
    """The operators a case's graph uses (``domain.op_type`` outside ONNX's domain)."""
    out = set()
    for node in case.model.graph.node:
        out.add(node.op_type if node.domain in ("", "ai.onnx") else
                f"{node.domain}.{node.op_type}")
    return out


def out_of_scope_operator(case) -> str | None:
    """The out-of-scope reason of the first operator (by name) of the case's graph that is on
    OUT_OF_SCOPE, as "Op: reason"; None when it uses none."""
    for op in sorted(graph_operators(case)):
        if op in OUT_OF_SCOPE:
            return f"{op}: {OUT_OF_SCOPE[op]}"
    return None


def explain_refusal(case) -> str | None:
    """Why a refused case may be refused: the out-of-scope reason of an operator its graph uses,
    or its known-failure reason; None when neither list covers it."""
    why = out_of_scope_operator(case)
    if why is not None:
        return why
    if case.name in OUT_OF_SCOPE_CASES:
        return OUT_OF_SCOPE_CASES[case.name]
    return KNOWN_FAILURES.get(case.name)


def _atol(dtype: np.dtype) -> float:
    # rtol 1e-3 covers the bulk; atol covers results near zero and, for float16 (whose spacing
    # near 1 is 1e-3, so that rtol is one unit in the last place), a few units of rounding.
    return {"float16": 5e-3, "float32": 1e-5, "float64": 1e-7}.get(str(dtype), 0.0)


def outputs_match(got: np.ndarray, expected: np.ndarray, rtol: float = 1e-3,
                  atol: float = 0.0) -> str | None:
    """None when ``got`` matches the reference: the same dtype and shape, integers and bools
    exactly, floats within ``rtol`` (1e-3, or a case's own when larger) and the larger of
    ``atol`` and a small per-dtype atol (NaN where it is NaN); otherwise a one-line
    description of the first difference."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.dtype != expected.dtype:
        return f"dtype {got.dtype}, expected {expected.dtype}"
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if expected.dtype.kind != "f":
        bad = got != expected
    else:
        g, e = got.astype(np.float64), expected.astype(np.float64)
        with np.errstate(invalid="ignore"):
            close = np.isclose(g, e, rtol=max(rtol, 1e-3),
                               atol=max(atol, _atol(expected.dtype)), equal_nan=True)
        bad = ~close
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(bad.sum())} of {bad.size} elements differ; at {first}: {got[first]!r}, "
            f"expected {expected[first]!r}")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else ""


# Inputs the importer needs as constants (shapes, axes, pads, sizes, bounds): ONNX op type ->
# input positions.  A case that feeds one of them from a graph input is run with that input
# fixed to its data set's value (``from_onnx(constant_inputs=)``), as a deployment fixes it.
STATIC_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Unsqueeze": (1,), "Squeeze": (1,),
    "Slice": (1, 2, 3, 4), "Split": (1,), "Pad": (1, 2, 3), "Resize": (1, 2, 3),
    "Upsample": (1,), "Trilu": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Clip": (1, 2), "TopK": (1,), "OneHot": (1, 2), "CenterCropPad": (1,), "CumSum": (1,),
    "CumProd": (1,), "Dropout": (1, 2),
    **{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                           "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                           "ReduceSumSquare")},
}


def static_inputs(case) -> list[str]:
    """The graph inputs of ``case`` that feed only the constant positions of STATIC_INPUTS."""
    graph = case.model.graph
    uses: dict[str, list[bool]] = {}
    for node in graph.node:
        static = STATIC_INPUTS.get(node.op_type, ())
        for position, name in enumerate(node.input):
            if name:
                uses.setdefault(name, []).append(position in static)
    outputs = {v.name for v in graph.output}
    return [v.name for v in graph.input
            if uses.get(v.name) and all(uses[v.name]) and v.name not in outputs]


def _as_array(value) -> np.ndarray:
    """A data set's value as an array: onnx gives some as TensorProtos (casts from double)."""
    if hasattr(value, "raw_data") or hasattr(value, "dims"):
        from onnx import numpy_helper

        return numpy_helper.to_array(value)
    return np.asarray(value)


def run_case(case, target: str = "llvm",
             compare: Callable[[np.ndarray, np.ndarray], str | None] | None = None
             ) -> CaseResult:
    """Import, build and run one case on every data set it has; see the module text.

    ``case`` is anything with onnx's TestCase fields ``name``, ``model``, ``data_sets``,
    ``rtol`` and ``atol`` (the model suites of ``onnx_suites`` make such cases).  ``compare``
    (got, reference) -> None or the difference replaces :func:`outputs_match` at the case's
    tolerances."""
    import autotune
    from autotune.frontends.onnx import from_onnx

    operator = case_operator(case)
    graph = case.model.graph
    initializers = {t.name for t in graph.initializer}
    input_names = [v.name for v in graph.input if v.name not in initializers]
    fixed = set(static_inputs(case))
    executor = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for inputs, expected in case.data_sets:
                feeds = {name: _as_array(array) for name, array in zip(input_names, inputs)}
                if executor is None or fixed:
                    model = from_onnx(case.model, constant_inputs={
                        name: feeds[name] for name in fixed if name in feeds})
                    executor = autotune.build_model(model, target, warn=False)
                # Inputs the import made constants (fixed ones, empty ones) are not taken.
                taken = model.input_types()
                got = executor.run({k: v for k, v in feeds.items() if k in taken})
                for value, reference in zip(graph.output, map(_as_array, expected)):
                    if value.name not in got:
                        return CaseResult(case.name, operator, "wrong", None,
                                          f"output {value.name!r} is missing")
                    problem = outputs_match(got[value.name], reference, float(case.rtol),
                                            float(case.atol)) if compare is None else \
                        compare(got[value.name], reference)
                    if problem is not None:
                        return CaseResult(case.name, operator, "wrong", None,
                                          f"output {value.name!r}: {problem}")
    except TYPED_ERRORS as err:
        return CaseResult(case.name, operator, "refused", type(err).__name__, _first_line(err))
    except Exception as err:  # anything else is a bug to report, not a refusal
        return CaseResult(case.name, operator, "crash", type(err).__name__, _first_line(err))
    return CaseResult(case.name, operator, "pass")


def summarize(results: Iterable[CaseResult], excluded: dict[str, str],
              explanations: dict[str, str | None]) -> dict:
    """The JSON report: totals, per-operator counts, and each non-passing case with the
    reason it may be refused (``explanations``: case name -> explain_refusal's answer)."""
    results = list(results)
    totals = {s: 0 for s in ("pass", "wrong", "crash", "refused")}
    per_op: dict[str, dict[str, int]] = {}
    failing = []
    for r in results:
        totals[r.status] += 1
        per_op.setdefault(r.operator, {s: 0 for s in totals})[r.status] += 1
        if r.status != "pass":
            failing.append({**r.to_json(), "explained_by": explanations.get(r.name)})
    count = len(results)
    out_of_scope = sum(1 for f in failing if f["status"] == "refused" and
                       f["explained_by"] and f["name"] not in KNOWN_FAILURES)
    return {"cases_total": count + len(excluded), "in_scope": count,
            "excluded_by_type": len(excluded), "totals": totals,
            "pass_rate": round(totals["pass"] / count, 4) if count else 0.0,
            "refused_out_of_scope": out_of_scope,
            "refused_unexplained": sum(1 for f in failing if f["status"] == "refused" and
                                       not f["explained_by"]),
            "operators": dict(sorted(per_op.items())),
            "failing": failing, "excluded_cases": dict(sorted(excluded.items()))}


def sample_names(cases, per_operator: int = 2) -> set[str]:
    """A deterministic representative subset: the first ``per_operator`` cases (by name) of
    each operator."""
    seen: dict[str, int] = {}
    out = set()
    for case in cases:
        op = case_operator(case)
        if seen.get(op, 0) < per_operator:
            seen[op] = seen.get(op, 0) + 1
            out.add(case.name)
    return out


"""ONNX's model suites: the test models under ``onnx/backend/test/data`` run through the importer,
build_model and the executor, classified as the operator conformance cases are.

    from autotune.frontends import onnx_suites
    onnx_suites.case_names("pytorch-operator")           # ["test_operator_add_broadcast", ...]
    result = onnx_suites.run("pytorch-operator", "test_operator_add_broadcast")
    result.status                                       # "pass", "wrong", "crash", "refused"

Three suites:

``pytorch-converted``, ``pytorch-operator``
    PyTorch modules and operators as its exporter wrote them (mostly IR 3, opset 6), one folder
    each with ``model.onnx`` and ``test_data_set_0/{input,output}_*.pb``; our output must match
    the stored one at rtol 1e-3 (see :func:`conformance.outputs_match`).
``light``
    nine model-zoo graphs (AlexNet, DenseNet-121, Inception v1 and v2, ResNet-50, ShuffleNet,
    SqueezeNet, VGG-19, ZFNet-512) at 224 x 224, IR 3 files that list every initializer as a
    graph input too.  Their weights are ``ConstantOfShape`` nodes that fill every tensor with
    0.02, so every output channel computes the same value and the stored
    ``light_*_output_0.pb`` (a uniform softmax, or one value repeated) would not see a wrong
    channel or a misplaced window.  The case therefore replaces those weights with random ones
    of the same shapes (:func:`random_weights`, at the scales an initialiser gives them),
    draws a random input, and takes onnxruntime's outputs as the reference, the logits before
    the last softmax among them (:func:`with_logits`); an output matches
    when its largest difference is at most 1e-4 of the reference's largest magnitude (what
    the corpus tests ask of a full model).  The stored output is still checked: the shipped
    model, built by us, must reproduce it (:func:`shipped_output_problem`) from any input
    (:func:`shipped_input`: the stored value does not depend on it).

A refused case is explained by an out-of-scope operator of ``conformance.OUT_OF_SCOPE`` or by
:data:`KNOWN_FAILURES` here; ``tests/graph/test_onnx_suites.py`` holds that, and
``benchmarks/onnx_suites.py`` prints every suite as JSON.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import conformance
from .conformance import CaseResult

__all__ = ["SUITES", "SuiteCase", "KNOWN_FAILURES", "LIGHT_BOUND", "data_dir", "case_names",
           "load_case", "run", "explain_refusal", "random_weights", "with_logits",
           "relative_difference", "shipped_output_problem", "shipped_input", "suite_report"]

SUITES = ("light", "pytorch-converted", "pytorch-operator")

# A light model's output matches onnxruntime's when its largest difference is at most this
# share of the reference's largest magnitude: float32 kernels that sum in another order, over
# 20 to 120 layers.
LIGHT_BOUND = 1e-4

# Cases refused today, each with the reason; the test fails when one of them passes (remove
# it here) and when a case is refused that is on no list.  Keep it shrinking.
KNOWN_FAILURES: dict[str, str] = {}


@dataclass(frozen=True)
class SuiteCase:
    """One model of a suite, with the fields of onnx's backend TestCase that
    ``conformance.run_case`` reads."""
    name: str
    suite: str
    model: Any  # an onnx.ModelProto
    data_sets: tuple  # ((inputs in graph order, reference outputs in graph order), ...)
    rtol: float = 1e-3
    atol: float = 1e-7


def data_dir(suite: str) -> str:
    """The folder of ``suite`` in the installed onnx package."""
    import onnx

    if suite not in SUITES:
        raise ValueError(f"unknown ONNX suite {suite!r}; suites: {', '.join(SUITES)}")
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", suite)


def case_names(suite: str) -> list[str]:
    """The cases of ``suite``, sorted: folder names, or the light models' file stems."""
    folder = data_dir(suite)
    if suite == "light":
        return sorted(os.path.basename(p)[:-len(".onnx")]
                      for p in glob.glob(os.path.join(folder, "*.onnx")))
    return sorted(name for name in os.listdir(folder)
                  if os.path.isfile(os.path.join(folder, name, "model.onnx")))


def _tensors(folder: str, prefix: str) -> list[np.ndarray]:
    import onnx
    from onnx import numpy_helper

    paths = glob.glob(os.path.join(folder, f"{prefix}_*.pb"))
    paths.sort(key=lambda p: int(os.path.basename(p)[len(prefix) + 1:-len(".pb")]))
    return [numpy_helper.to_array(onnx.load_tensor(p)) for p in paths]


def _graph_inputs(proto) -> list:
    """The graph inputs that are not initializers (old IR files list both)."""
    initializers = {t.name for t in proto.graph.initializer}
    return [v for v in proto.graph.input if v.name not in initializers]


def _input_shape(value) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value.type.tensor_type.shape.dim)


# ---------------------------------------------------------------------------------------------
# light: random weights in place of the constant ones
# ---------------------------------------------------------------------------------------------

def _weight(rng: np.random.Generator, shape: tuple, user, transposed: bool) -> np.ndarray:
    """A random weight for the input ``user`` = (op type, input position) of the node that
    reads it, at an initialiser's scale: He's for a convolution or fully connected weight
    (variance 2 / fan-in, for the ReLU after it), batch-norm scales and variances near 1,
    shifts and means near 0.  Residual sums still grow (ResNet-50's logits reach 1e5), which
    the relative bound allows for."""
    op, position = user
    if op in ("Conv", "Gemm") and position == 1:
        if op == "Conv":
            fan_in = int(np.prod(shape[1:]))
        else:
            fan_in = shape[1] if transposed else shape[0]
        return rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
    if (op == "BatchNormalization" and position in (1, 4)) or op == "Mul":
        return rng.uniform(0.5, 1.5, shape)
    return rng.uniform(-0.1, 0.1, shape)


def random_weights(proto, seed: int = 0):
    """A copy of a light model with each ``ConstantOfShape`` weight (its shape an initializer)
    replaced by an initializer of random values of that shape (see :func:`_weight`); a weight
    read through an ``Unsqueeze`` (DenseNet's and Inception v2's per-channel scales) is
    scaled for the reader of the Unsqueeze.  A weight a ``Reshape`` reads (Inception v1's
    classifier) takes its role from the reader of the Reshape."""
    import onnx
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    graph = out.graph
    initializers = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    readers: dict[str, list] = {}
    for node in graph.node:
        for position, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, position))

    def role(name: str):
        node, position = readers[name][0]
        if node.op_type in ("Unsqueeze", "Reshape") and position == 0 and \
                node.output[0] in readers:
            return role(node.output[0])
        transposed = any(a.name == "transB" and a.i for a in node.attribute)
        return (node.op_type, position), transposed

    kept, added = [], []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in initializers and \
                node.output[0] in readers:
            shape = tuple(int(d) for d in initializers[node.input[0]])
            user, transposed = role(node.output[0])
            value = _weight(rng, shape, user, transposed).astype(np.float32)
            added.append(numpy_helper.from_array(value, node.output[0]))
            continue
        kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    # The shapes the removed nodes read are read by nothing now: dropped, with the graph
    # inputs that list them (IR 3), so that onnxruntime has no unused initializer to warn of.
    read = {name for node in kept for name in node.input}
    unused = {t.name for t in graph.initializer} - read
    kept_initializers = [t for t in graph.initializer if t.name not in unused]
    del graph.initializer[:]
    graph.initializer.extend(kept_initializers + added)
    kept_inputs = [v for v in graph.input if v.name not in unused]
    del graph.input[:]
    graph.input.extend(kept_inputs)
    return out


def with_logits(proto):
    """A copy of ``proto`` whose outputs also include the input of each Softmax that gives a
    graph output: random weights can saturate a classifier's softmax to 0 and 1 (ResNet-50's
    does), where only the largest logit would be compared."""
    import onnx
    from onnx import helper

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    graph = out.graph
    outputs = {v.name for v in graph.output}
    for node in graph.node:
        if node.op_type == "Softmax" and node.output[0] in outputs and \
                node.input[0] not in outputs:
            graph.output.append(helper.make_tensor_value_info(
                node.input[0], onnx.TensorProto.FLOAT, None))
            outputs.add(node.input[0])
    return out


def _onnxruntime(proto, feeds: dict) -> dict:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def relative_difference(got: np.ndarray, expected: np.ndarray) -> float:
    """The largest absolute difference over the reference's largest magnitude (over 1 for a
    reference of zeros, so that it is then the absolute difference)."""
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    scale = float(np.abs(expected).max()) if expected.size else 0.0
    return float(np.abs(got - expected).max()) / (scale if scale > 0 else 1.0)


def _light_compare(got: np.ndarray, expected: np.ndarray) -> str | None:
    got, expected = np.asarray(got), np.asarray(expected)
    if got.dtype != expected.dtype:
        return f"dtype {got.dtype}, expected {expected.dtype}"
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if not np.isfinite(got).all():
        return f"{int((~np.isfinite(got)).sum())} elements are not finite"
    difference = relative_difference(got, expected)
    if difference > LIGHT_BOUND:
        return (f"largest difference {difference:.3g} of the reference's largest magnitude "
                f"(bound {LIGHT_BOUND:g})")
    return None


def _light_path(name: str) -> str:
    return os.path.join(data_dir("light"), f"{name}.onnx")


def shipped_input(name: str, seed: int = 0) -> np.ndarray:
    """An input for the shipped light model ``name`` (uniform in [0, 1)).  The files hold no
    input, and need none: with every weight 0.02 each output channel computes the same value,
    which the last softmax (or DenseNet's last batch normalisation) makes one the input does
    not change; the tests check that onnxruntime gives the stored output for two inputs."""
    import onnx

    value = _graph_inputs(onnx.load(_light_path(name)))[0]
    return np.random.default_rng(seed).uniform(0.0, 1.0, _input_shape(value)).astype(
        np.float32)


def shipped_output_problem(name: str, target: str = "llvm") -> str | None:
    """None when the shipped light model ``name``, built by us and run on
    :func:`shipped_input`, reproduces its stored ``_output_0.pb`` within LIGHT_BOUND;
    otherwise what differs."""
    import onnx

    import autotune
    from autotune.frontends.onnx import from_onnx

    proto = onnx.load(_light_path(name))
    stored = _tensors(data_dir("light"), f"{name}_output")[0]
    executor = autotune.build_model(from_onnx(proto), target, warn=False)
    got = executor.run({_graph_inputs(proto)[0].name: shipped_input(name)})
    return _light_compare(got[proto.graph.output[0].name], stored)


# ---------------------------------------------------------------------------------------------
# cases, runs and the report
# ---------------------------------------------------------------------------------------------

def load_case(suite: str, name: str, seed: int = 0) -> SuiteCase:
    """The case ``name`` of ``suite`` with its data set: the stored one, or for a light model
    (random weights, see the module text) a random input of ``seed`` and onnxruntime's
    outputs."""
    import onnx

    if suite == "light":
        proto = with_logits(random_weights(onnx.load(_light_path(name)), seed))
        rng = np.random.default_rng(seed + 1)
        feeds = {v.name: rng.uniform(0.0, 1.0, _input_shape(v)).astype(np.float32)
                 for v in _graph_inputs(proto)}
        expected = _onnxruntime(proto, feeds)
        outputs = tuple(expected[v.name] for v in proto.graph.output)
        return SuiteCase(name, suite, proto, ((tuple(feeds.values()), outputs),))
    folder = os.path.join(data_dir(suite), name)
    proto = onnx.load(os.path.join(folder, "model.onnx"))
    data_sets = []
    for data in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
        data_sets.append((tuple(_tensors(data, "input")), tuple(_tensors(data, "output"))))
    return SuiteCase(name, suite, proto, tuple(data_sets))


def run(suite: str, name: str, target: str = "llvm", seed: int = 0) -> CaseResult:
    """Import, build and run one case (see the module text)."""
    case = load_case(suite, name, seed)
    compare = _light_compare if suite == "light" else None
    return conformance.run_case(case, target, compare=compare)


def explain_refusal(suite: str, name: str) -> str | None:
    """Why case ``name`` of ``suite`` may be refused: an out-of-scope operator of its graph,
    or its entry in KNOWN_FAILURES; None when neither covers it."""
    import onnx

    path = _light_path(name) if suite == "light" else \
        os.path.join(data_dir(suite), name, "model.onnx")
    graph_only = SuiteCase(name, suite, onnx.load(path), ())
    return conformance.out_of_scope_operator(graph_only) or KNOWN_FAILURES.get(name)


def suite_report(results: list[CaseResult], explanations: dict[str, str | None]) -> dict:
    """One suite's JSON: passed of total, the count per status, and each non-passing case
    with its status, error and the list entry that explains it."""
    totals = {s: 0 for s in ("pass", "wrong", "crash", "refused")}
    failing = []
    for r in results:
        totals[r.status] += 1
        if r.status != "pass":
            failing.append({**r.to_json(), "explained_by": explanations.get(r.name)})
    count = len(results)
    return {"passed": totals["pass"], "total": count,
            "pass_rate": round(totals["pass"] / count, 4) if count else 0.0,
            "totals": totals, "failing": failing,
            "cases": {r.name: r.status for r in results}}

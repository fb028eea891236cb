"""Graph IR, passes (folding, fusion, dead code, memory plan) and task extraction."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.graph import (
    GraphBuilder, GraphError, Model, count_flops, eliminate_dead_code, extract_tasks,
    fold_batch_norm, fold_constants, fuse_ops, group_func, optimize, plan_memory,
)
from autotune.frontends import get_model

from .helpers import conv_bn_relu_model, random_inputs


def test_builder_infers_types_and_prints():
    model = conv_bn_relu_model()
    assert model.types["output"].shape == (1, 8, 12, 12)
    text = str(model)
    assert text.startswith("model conv_bn_relu(%input: float32[1, 8, 12, 12])")
    assert "= conv2d(%input, @w)" in text and "pads=(1, 1, 1, 1)" in text
    assert ": float32[1, 8, 12, 12]" in text
    assert model.infer_types() == model.types


def test_shape_error_names_the_node():
    b = GraphBuilder("bad")
    x = b.input("x", (2, 3))
    y = b.input("y", (4, 3))
    with pytest.raises(GraphError, match=r"node add_me: add: shapes \(2, 3\) and \(4, 3\)"):
        b.op("add", [x, y], name="add_me")
    with pytest.raises(GraphError, match="unknown graph operator 'frobnicate'"):
        b.op("frobnicate", [x])


def test_model_rejects_undefined_values():
    b = GraphBuilder("m")
    x = b.input("x", (2,))
    b.output(b.op("relu", [x]))
    good = b.build()
    node = good.nodes[0].replace(inputs=("nowhere",))
    with pytest.raises(GraphError, match="reads 'nowhere'"):
        Model("m", good.inputs, good.outputs, [node], {}, good.types)


def test_fold_constants_evaluates_constant_subgraphs():
    b = GraphBuilder("fold")
    x = b.input("x", (2, 3))
    c = b.constant(np.arange(6, dtype=np.float32).reshape(3, 2), "c")
    t = b.op("transpose", [c], perm=(1, 0))
    s = b.op("multiply", [t, b.constant(np.array(2.0, np.float32), "two")])
    b.output(b.op("add", [x, s]), "out")
    model = b.build()
    folded = fold_constants(model)
    assert [n.op for n in folded.nodes] == ["add"]
    assert set(folded.constants) == {folded.nodes[0].inputs[1]}
    inputs = {"x": np.ones((2, 3), np.float32)}
    np.testing.assert_allclose(folded.evaluate(inputs)["out"], model.evaluate(inputs)["out"])


def test_fold_batch_norm_into_conv_keeps_results():
    model = conv_bn_relu_model()
    folded = fold_batch_norm(model)
    ops = [n.op for n in folded.nodes]
    assert "batch_norm" not in ops
    assert ops.count("conv2d") == 2 and ops.count("add") == 2
    inputs = random_inputs(model)
    np.testing.assert_allclose(folded.evaluate(inputs)["output"],
                               model.evaluate(inputs)["output"], rtol=1e-5, atol=1e-5)


def test_fold_batch_norm_after_conv_bias_and_standalone():
    rng = np.random.default_rng(1)
    b = GraphBuilder("bn2")
    x = b.input("x", (1, 4, 5, 5))
    params = [b.constant(rng.uniform(0.5, 1.5, 4).astype(np.float32)) for _ in range(4)]
    w = b.constant(rng.normal(size=(4, 4, 1, 1)).astype(np.float32))
    y = b.op("conv2d", [x, w], strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1))
    y = b.op("add", [y, b.constant(rng.normal(size=(4, 1, 1)).astype(np.float32))])
    y = b.op("batch_norm", [y] + params)
    z = b.op("batch_norm", [x] + params)  # not after a conv: becomes multiply + add
    b.output(b.op("add", [y, z]), "out")
    model = b.build()
    folded = fold_batch_norm(model)
    assert [n.op for n in folded.nodes] == ["conv2d", "add", "multiply", "add", "add"]
    inputs = random_inputs(model)
    np.testing.assert_allclose(folded.evaluate(inputs)["out"], model.evaluate(inputs)["out"],
                               rtol=1e-5, atol=1e-5)


def test_dead_code_elimination():
    b = GraphBuilder("dce")
    x = b.input("x", (3,))
    b.op("exp", [x], name="unused")
    b.constant(np.zeros(3, np.float32), "unused_const")
    b.output(b.op("relu", [x]), "out")
    model = eliminate_dead_code(b.build())
    assert [n.op for n in model.nodes] == ["relu"]
    assert model.constants == {}


def test_fusion_groups_conv_with_its_elementwise_consumers():
    model = optimize(conv_bn_relu_model())
    groups = fuse_ops(model)
    assert [g.name for g in groups] == ["fused_conv2d_add_relu", "fused_conv2d_add_relu"]
    # The residual add reads the model input from outside its group.
    assert "input" in groups[1].inputs


def test_fusion_stops_at_values_with_several_readers():
    b = GraphBuilder("fanout")
    x = b.input("x", (4, 8))
    w = b.constant(np.ones((8, 8), np.float32))
    y = b.op("matmul", [x, w])
    r = b.op("relu", [y])
    s = b.op("sigmoid", [y])
    b.output(b.op("add", [r, s]), "out")
    groups = fuse_ops(b.build())
    assert [g.name for g in groups] == ["fused_matmul", "fused_sigmoid", "fused_relu_add"]


def test_fusion_of_injective_chains_and_reductions():
    b = GraphBuilder("chain")
    x = b.input("x", (2, 6, 4))
    y = b.op("slice", [x], begin=(0, 0, 0), end=(2, 6, 2), step=(1, 1, 1))
    y = b.op("reshape", [y], shape=(2, 3, 4))
    y = b.op("transpose", [y], perm=(0, 2, 1))
    y = b.op("add", [y, y])  # two reads of one value: may not join that group
    y = b.op("softmax", [y], axis=-1)
    y = b.op("multiply", [y, b.constant(np.array(2.0, np.float32))])
    b.output(y, "out")
    model = b.build()
    groups = fuse_ops(model)
    assert [g.name for g in groups] == ["fused_slice_reshape_transpose",
                                        "fused_add_softmax_multiply"]


def test_groups_are_in_topological_order_with_residual_branches():
    model = optimize(get_model("resnet18", image_size=32, width=8, num_classes=10))
    groups = fuse_ops(model)
    produced = set(model.inputs) | set(model.constants)
    for group in groups:
        missing = [v for v in group.inputs if v not in produced]
        assert not missing, f"{group} reads {missing} before they are produced"
        produced.add(group.output)


def test_memory_plan_reuses_storage_without_aliasing_a_kernel():
    model = optimize(get_model("resnet18", image_size=32, width=8, num_classes=10))
    groups = fuse_ops(model)
    plan = plan_memory(model, groups)
    values = [g.output for g in groups if g.kind != "view"] + model.inputs
    assert len(plan.sizes) < len(values)  # storage is shared
    assert plan.total_bytes < sum(model.types[v].nbytes for v in values)
    for group in groups:
        if group.kind == "view":
            assert plan.storage[group.output] == plan.storage.get(group.inputs[0])
            continue
        out = plan.storage[group.output]
        assert plan.sizes[out] >= model.types[group.output].nbytes
        for value in group.inputs:
            assert plan.storage.get(value) != out, f"{group} writes over its input {value}"
    # The output has a storage of its own.
    out = plan.storage["output"]
    assert list(plan.storage.values()).count(out) == 1


def test_task_extraction_dedupes_structurally_equal_functions():
    model = get_model("resnet18", image_size=32, width=8, num_classes=10)
    tasks = extract_tasks(model)
    groups = [g for g in fuse_ops(optimize(model)) if g.kind != "view"]
    assert sum(t.weight for t in tasks) == len(groups)
    assert len(tasks) < len(groups)
    assert len({t.key for t in tasks}) == len(tasks)
    repeated = [t for t in tasks if t.weight > 1]
    assert repeated and all(t.name.startswith("fused_conv2d") for t in repeated)


def test_group_function_ignores_node_and_weight_names():
    keys = []
    for prefix in ("a", "b"):
        b = GraphBuilder(prefix)
        x = b.input(f"{prefix}_in", (1, 4, 6, 6))
        w = b.constant(np.ones((4, 4, 3, 3), np.float32), f"{prefix}_w")
        y = b.op("conv2d", [x, w], name=f"{prefix}_conv", strides=(1, 1), pads=(1, 1, 1, 1),
                 dilations=(1, 1))
        b.output(b.op("relu", [y], name=f"{prefix}_relu"))
        model = b.build()
        keys.append(group_func(model, fuse_ops(model)[0]).key)
    assert keys[0] == keys[1]


def test_count_flops_of_a_conv():
    model = optimize(conv_bn_relu_model(channels=4, image=6))
    gf = group_func(model, fuse_ops(model)[0])
    macs = 4 * 4 * 9 * 6 * 6
    # conv (multiply-add) + bias add + relu (max)
    assert gf.flops == 2 * macs + 2 * 4 * 6 * 6
    assert count_flops(gf.func) == gf.flops

"""Weight pre-packing: a schedule's packing of a model weight runs once, at build."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.graph.build import build_model
from autotune.runtime.prepack import split_packing
from schedules import Schedule
from schedules.space import DesignSpace
from tensor_ir import interp, ops

from .helpers import TARGET, conv_bn_relu_model, random_inputs


def _packed_sample(func, seed: int = 0):
    """A design-space sample of ``func`` that packs an operand (the packed sketches)."""
    space = DesignSpace(func, TARGET)
    for k in range(len(space.sketches)):
        for s in range(8):
            cand = space.sample(seed=seed + s, sketch=k)
            if any(i.kind == "pack_layout" for i in cand.final_trace):
                return cand
    raise AssertionError(f"no sketch of {func.name} packs an operand")


def _random_args(func, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, b.const_shape).astype(b.dtype) for b in func.params[:-1]]


def test_split_packing_is_exact_for_a_packed_matmul():
    func = ops.matmul(24, 40, 64)
    cand = _packed_sample(func)
    main, packs = split_packing(cand.func, {1})
    assert len(packs) == 1 and packs[0].index == 1
    assert main.params[0] is cand.func.params[0] and main.params[2] is cand.func.params[2]
    packed_buf = main.params[1]
    assert packed_buf.name.endswith("_packed") and packs[0].pack.params[1] is packed_buf
    a, b = _random_args(func)
    (expected,) = interp.evaluate(func, a, b)
    (packed,) = interp.evaluate(packs[0].pack, b)
    (got,) = interp.evaluate(main, a, packed)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # Through LLVM as well.
    out_packed = np.empty(packed_buf.const_shape, np.float32)
    autotune.build(packs[0].pack, TARGET)(b, out_packed)
    out = np.full(func.params[-1].const_shape, np.nan, np.float32)
    autotune.build(main, TARGET)(a, out_packed, out)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_split_packing_leaves_what_it_cannot_split():
    func = ops.matmul(24, 40, 64)
    cand = _packed_sample(func)
    # Not a constant: nothing to do.
    assert split_packing(cand.func, {0}) == (cand.func, [])
    assert split_packing(cand.func, set()) == (cand.func, [])
    # An unscheduled function has no packing nest.
    assert split_packing(func, {0, 1}) == (func, [])
    # A packing nest computed at a loop of the main computation fills only part of the
    # packed buffer per iteration: it stays.
    sch = Schedule(func)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    jo, ji = sch.split(j, [None, 16])
    sch.reorder(jo, i, k, ji)
    pack = sch.pack_layout(c, "B", lambda kk, jj: (jj // 16, kk, jj % 16))
    sch.compute_at(pack, jo)
    assert split_packing(sch.func, {1}) == (sch.func, [])


def test_split_packing_keeps_a_weight_read_elsewhere():
    # B feeds the packed matmul and, unpacked, a second stage: the weight must stay a param.
    from tensor_ir import te

    A = te.placeholder((8, 32), "float32", name="A")
    B = te.placeholder((32, 32), "float32", name="B")
    k = te.reduce_axis(32, "k")
    C = te.compute((8, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((8, 32), lambda i, j: C[i, j] + B[i, j], name="D")
    func = te.create_prim_func([A, B, D], name="mm_plus_b")
    sch = Schedule(func)
    sch.pack_layout(sch.get_block("C"), "B", lambda kk, jj: (jj // 16, kk, jj % 16))
    assert split_packing(sch.func, {1}) == (sch.func, [])


@pytest.mark.parametrize("prepack", [True, False])
def test_model_build_packs_weights_once(prepack):
    # 16 channels of 7x7 pixels: the convolutions' tiled sketches vectorise over the output
    # channels through packed weights.
    model = conv_bn_relu_model(channels=16, image=7)

    def lookup(func):
        return _packed_sample(func).final_trace if "conv2d" in func.name else None

    lib = build_model(model, TARGET, lookup=lookup, warn=False, prepack=prepack)
    packed_args = [a for s in lib.steps for a in s.args if "@" in a]
    if prepack:
        assert len(packed_args) == 2  # one packed weight per convolution
        for name in packed_args:
            assert lib._arrays[name].ctypes.data % 64 == 0
            assert name.split("@")[0] in lib.model.constants
    else:
        assert not packed_args
    for seed in (0, 1):
        inputs = random_inputs(model, seed)
        np.testing.assert_allclose(lib.run(inputs)["output"],
                                   model.evaluate(inputs)["output"], rtol=1e-4, atol=1e-5)


def test_model_tasks_name_the_weights_a_build_packs():
    """The tuner times a task as the build runs it: the parameters a build would pack once
    (the model's constants) are named on each task, and reach its candidates' MeasureInput."""
    import cost_models
    import search
    from autotune.graph.tasks import extract_tasks, partition
    from autotune.tuning.tune import tuning_loop
    from autotune.tuning.tune_model import model_tasks
    from records import MemoryDatabase
    from search.simulation import SimulationBuilder, SimulationRunner

    model = conv_bn_relu_model(channels=16, image=7)
    optimized, _, funcs = partition(model)
    for task in extract_tasks(model):
        # Every group of the task agrees with the build's own test of what is a constant.
        for output in task.groups:
            gf = funcs[output]
            constant = {k for k, v in enumerate(gf.params) if v in optimized.constants}
            assert task.weight_params <= constant
        if "conv2d" in task.name:
            shapes = [tuple(task.func.params[k].const_shape) for k in task.weight_params]
            # The weight in NCHW (OIHW) or as the blocked layout lays it out.
            assert {(16, 16, 3, 3), (1, 1, 3, 3, 16, 16)} & set(shapes)
            assert 0 not in task.weight_params
    scheduled = model_tasks(model)
    assert any(t.weight_params for t in scheduled)
    task = next(t for t in scheduled if t.weight_params)
    seen = []

    def cost(inp):
        seen.append(inp.weight_params)
        return 1e-3

    loop = tuning_loop(task.func, autotune.Target(TARGET), MemoryDatabase(),
                       SimulationBuilder(), SimulationRunner(cost), search.SearchConfig(),
                       search.create("random", seed=0), cost_models.create("random"),
                       measure_config=None,
                       context=search.MeasureContext(weight_params=task.weight_params))
    loop.run(4)
    assert seen and all(w == task.weight_params for w in seen)


def test_weights_are_read_cold_when_with_the_activations_they_outgrow_the_cache():
    from autotune.tuning.tune_model import weights_read_cold

    model = conv_bn_relu_model(channels=16, image=7)
    weights = sum(np.asarray(a).nbytes for a in model.constants.values())
    # Each activation once: written by its producer, read by its consumers, every run.
    activations = sum(t.nbytes for name, t in model.types.items()
                      if name not in model.constants)
    assert activations > 0
    streamed = weights + activations
    assert weights_read_cold(model, autotune.Target(f"{TARGET} -l3-cache={2 * streamed - 1}"))
    assert not weights_read_cold(model, autotune.Target(f"{TARGET} -l3-cache={2 * streamed}"))
    # The weights alone would fit: the activations passing through evict them.
    assert weights_read_cold(model, autotune.Target(f"{TARGET} -l3-cache={2 * weights}"))
    # Not a CPU cache question on a GPU.
    assert not weights_read_cold(model, autotune.Target("opencl"))

"""tensor_ir.target.Target: parsing, host detection, hardware facts, the registry."""
from __future__ import annotations

import os
import pickle

import pytest

from tensor_ir.target import Target, TargetError, host_info


def test_host_is_detected():
    t = Target("llvm")
    info = host_info()
    assert t.is_host and t.is_cpu and not t.is_gpu
    assert t.cpu == info.cpu and t.cpu != "generic"
    assert t.triple == info.triple
    assert 1 <= t.num_cores <= (os.cpu_count() or 1)
    if hasattr(os, "sched_getaffinity"):
        assert t.num_cores <= len(os.sched_getaffinity(0))
    # Vector width follows the features LLVM reports for this CPU.
    if "avx512f" in t.features:
        assert t.vector_lanes("float32") == 16
    elif "avx2" in t.features:
        assert t.vector_lanes("float32") == 8
    assert t.vector_lanes("float64") == t.vector_lanes("float32") // 2
    assert t.vector_lanes("int8") == t.vector_lanes("float32") * 4


@pytest.mark.skipif(not os.path.isdir("/sys/devices/system/cpu/cpu0/cache"),
                    reason="the OS does not describe caches in sysfs")
def test_host_cache_sizes_come_from_sysfs():
    t = Target("llvm")
    sizes = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    for entry in os.listdir(base):
        if not entry.startswith("index"):
            continue
        with open(f"{base}/{entry}/level") as f:
            level = f.read().strip()
        with open(f"{base}/{entry}/type") as f:
            kind = f.read().strip()
        if kind != "Instruction":
            sizes[level] = True
    if "1" in sizes:
        assert t.l1d_cache and t.l1d_cache >= 4096
    if "2" in sizes:
        assert t.l2_cache and t.l2_cache > (t.l1d_cache or 0)
    if "3" in sizes:
        assert t.l3_cache and t.l3_cache >= (t.l2_cache or 0)
    assert t.cache_line in (32, 64, 128, 256)


def test_issue_examples_parse():
    t = Target("llvm -mcpu=znver4 -num-cores 2")
    assert (t.cpu, t.num_cores, t.vector_bits, t.vector_lanes()) == ("znver4", 2, 512, 16)
    assert t == Target("llvm -mcpu=znver4 -num-cores=2")

    arm = Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon")
    assert arm.triple == "aarch64-linux-gnu"
    assert arm.has_feature("neon") and arm.vector_lanes("float32") == 4
    assert arm.mattr == ("+neon",)
    if not host_info().triple.startswith("aarch64"):
        assert not arm.is_host
        assert arm.num_cores == 1  # nothing says otherwise for a machine we cannot see

    gpu = Target("cuda -arch=sm_90")
    assert gpu.is_gpu and not gpu.is_host
    assert gpu.compute_capability == (9, 0)
    assert gpu.max_threads_per_block == 1024
    assert gpu.max_shared_memory_per_block == 48 * 1024
    assert gpu.max_shared_memory_per_block_optin == 227 * 1024
    assert gpu.warp_size == 32
    assert gpu.host == Target("llvm")
    assert gpu.vector_lanes() == 1


def test_named_cpus_and_feature_changes():
    assert Target("llvm -mcpu=haswell").vector_lanes() == 8
    assert Target("llvm -mcpu=sandybridge").vector_bits == 256
    assert Target("llvm -mcpu=x86-64").vector_lanes() == 4
    narrowed = Target("llvm -mcpu=znver4 -mattr=-avx512f")
    assert not narrowed.has_feature("avx512f") and narrowed.vector_lanes() == 8
    assert Target("llvm -vector-width 128").vector_lanes() == 4
    board = Target("llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -num-cores 4 "
                   "-l1d-cache=32K -l2-cache 1M")
    assert (board.num_cores, board.l1d_cache, board.l2_cache, board.l3_cache) == (
        4, 32 * 1024, 1024 * 1024, None)


def test_llvm_features_put_changes_last():
    t = Target("llvm -mattr=-avx512f")
    feats = t.llvm_features.split(",")
    assert feats[-1] == "-avx512f" and "+avx512f" not in feats
    assert Target("llvm -mtriple=aarch64-linux-gnu -mattr=+neon").llvm_features == "+neon"


@pytest.mark.parametrize("spec", [
    "llvm", "llvm -mcpu=znver4 -num-cores 2", "llvm -mtriple=aarch64-linux-gnu -mattr=+neon",
    "llvm -mcpu=haswell -mattr=+fma,-avx512f -l2-cache=2M", "cuda -arch=sm_80",
    "cuda -arch=sm_90 -max-shared-memory-per-block=96K",
    "cuda -arch=sm_86 -host='llvm -num-cores 1'",
])
def test_canonical_string_round_trips(spec):
    t = Target(spec)
    again = Target(str(t))
    assert again == t and hash(again) == hash(t) and str(again) == str(t)
    assert pickle.loads(pickle.dumps(t)) == t
    assert Target(t) == t
    assert eval(repr(t), {"Target": Target}) == t


def test_canonical_string_names_resolved_facts():
    s = str(Target("llvm"))
    info = host_info()
    assert s.startswith("llvm ") and f"-mcpu={info.cpu}" in s and f"-mtriple={info.triple}" in s
    assert f"-num-cores={info.num_cores}" in s


def test_facts_dict():
    facts = Target("llvm -mcpu=znver4 -num-cores 2").facts()
    assert facts["kind"] == "llvm" and facts["num_cores"] == 2
    assert facts["vector_lanes_float32"] == 16
    gpu = Target("cuda -arch=sm_80").facts()
    assert gpu["max_shared_memory_per_block_optin"] == 163 * 1024
    assert gpu["host"] == str(Target("llvm"))


@pytest.mark.parametrize("spec, words", [
    ("vulkan", ["unknown target", "'vulkan'"]),
    ("llvm -foo=1", ["unknown option -foo", "'llvm'"]),
    ("llvm -num-cores", ["-num-cores needs a value"]),
    ("llvm -num-cores=two", ["-num-cores=two", "positive integer"]),
    ("llvm -num-cores=0", ["-num-cores=0"]),
    ("llvm -mattr=avx2", ["'avx2'", "+ or -"]),
    ("llvm -mtriple=nonsense-arch-os", ["-mtriple=nonsense-arch-os"]),
    ("llvm mcpu=znver4", ["expected an option", "'mcpu=znver4'"]),
    ("llvm -l2-cache=big", ["-l2-cache=big"]),
    ("cuda", ["cuda needs -arch"]),
    ("cuda -arch=sm_11", ["unknown -arch=sm_11"]),
    ("cuda -arch=sm_80 -mcpu=znver4", ["unknown option -mcpu", "'cuda'"]),
    ("", ["empty target"]),
])
def test_errors_name_what_was_wrong(spec, words):
    with pytest.raises(TargetError) as info:
        Target(spec)
    for word in words:
        assert word in str(info.value)


def test_target_error_is_a_value_error():
    with pytest.raises(ValueError):
        Target("vulkan")
    with pytest.raises(TargetError):
        Target(42)


def test_register_and_override():
    name = "test-board-a72"
    try:
        board = Target.register(name, "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 "
                                      "-num-cores 4")
        assert name in Target.registered()
        t = Target(name)
        assert t == board and t.cpu == "cortex-a72" and t.num_cores == 4
        assert t.vector_lanes("float32") == 4
        two = Target(f"{name} -num-cores 2")
        assert two.num_cores == 2 and two.cpu == "cortex-a72"
        # Registering the same spec again is harmless; a different one needs overwrite.
        Target.register(name, "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72 -num-cores 4")
        with pytest.raises(TargetError, match="already registered"):
            Target.register(name, "llvm -mtriple=aarch64-linux-gnu -num-cores 8")
        Target.register(name, "llvm -mtriple=aarch64-linux-gnu -num-cores 8", overwrite=True)
        assert Target(name).num_cores == 8
        # A name can stand for a GPU too, and options after it are checked for its kind.
        Target.register("test-gpu-h100", "cuda -arch=sm_90")
        assert Target("test-gpu-h100").arch == "sm_90"
        with pytest.raises(TargetError, match="unknown option -mcpu"):
            Target("test-gpu-h100 -mcpu=znver4")
    finally:
        for n in (name, "test-gpu-h100"):
            if n in Target.registered():
                Target.unregister(n)
    with pytest.raises(TargetError, match="unknown target 'test-board-a72'"):
        Target(name)


@pytest.mark.parametrize("name", ["llvm", "cuda", "-x", "has space", ""])
def test_register_rejects_bad_names(name):
    with pytest.raises(TargetError):
        Target.register(name, "llvm")


def test_register_validates_spec():
    with pytest.raises(TargetError, match="-bogus"):
        Target.register("test-bad-spec", "llvm -bogus=1")
    assert "test-bad-spec" not in Target.registered()


def test_other_cpu_of_this_architecture_runs_when_features_allow():
    info = host_info()
    if not info.triple.startswith("x86_64"):
        pytest.skip("x86-64 host needed")
    assert Target("llvm -mcpu=x86-64").is_host  # baseline code runs on any x86-64
    needs_avx512 = Target("llvm -mcpu=skylake-avx512")
    assert needs_avx512.is_host == ("avx512f" in info.features)
    with pytest.raises(TargetError, match="-mcpu=some-future-cpu"):
        Target("llvm -mcpu=some-future-cpu")  # unknown to LLVM: refused, not guessed at

#!/usr/bin/env bash
# The checks that need an NVIDIA GPU, as one script for a machine that has one but no network:
# pycuda and the Python packages the tuner needs beside the GPU machine's own (torch, numpy,
# scikit-learn...) come as wheels in .whl/ (pycuda's built for the machine's Python; its sdist
# beside them, built there when the wheel does not load).
#
#   bash benchmarks/gpu_device_check.sh check  OUT   # CUDA tests, then benchmarks.gpu_kernels
#   bash benchmarks/gpu_device_check.sh tune   OUT [SECONDS] [OPS] [TRIALS]   # tune_gpu
#
# Everything it measures is written under OUT (logs and JSON).
set -u
phase=${1:?check or tune}
out=${2:?output folder}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=python3
if ! PYTHONPATH=/tmp/site $py -c "import pycuda.driver" 2>/dev/null; then
    $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl > "$out/install.log" 2>&1
    if ! PYTHONPATH=/tmp/site $py -c "import pycuda.driver" >> "$out/install.log" 2>&1; then
        # The wheel does not load here: build pycuda from its sdist against this CUDA.
        echo "building pycuda from source" >> "$out/install.log"
        rm -rf /tmp/site/pycuda*
        $py -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site \
            .whl/pycuda-*.tar.gz >> "$out/install.log" 2>&1
    fi
fi
export PYTHONPATH=/tmp/site:$PWD
case $phase in
check)
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
        --format=csv > "$out/smi.txt" 2>&1
    timeout 240 $py -m pytest -q -p no:cacheprovider tests/autotune/test_gpu_cuda.py \
        tests/autotune/test_model_cuda.py > "$out/pytest_cuda.log" 2>&1
    tail -5 "$out/pytest_cuda.log"
    timeout 150 $py -m benchmarks.gpu_kernels --target cuda > "$out/gpu_kernels.json" \
        2> "$out/gpu_kernels.err"
    tail -3 "$out/gpu_kernels.err"
    ;;
tune)
    seconds=${3:-300}
    ops=${4:-sgemm,conv1x1,conv3x3,softmax,layer_norm}
    trials=${5:-64,256,1000}
    timeout $((seconds + 60)) $py -m benchmarks.tune_gpu --deadline-s "$seconds" \
        --ops "$ops" --trials "$trials" --out "$out/tune_gpu.json" --db /tmp/tune_gpu.db \
        > "$out/tune_gpu.stdout" 2> "$out/tune_gpu.err"
    tail -12 "$out/tune_gpu.err"
    ;;
esac

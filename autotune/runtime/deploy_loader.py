"""Loader of an exported model: runs it with numpy and ctypes alone.

    from loader import load                   # the copy beside the exported model
    model = load("resnet18_artifact")
    outputs = model.run({"input": x})         # {output name: numpy array}
    model.benchmark()                         # median milliseconds and more

``Executor.export_library(folder)`` (autotune/runtime/export.py) writes this file into the folder as
``loader.py`` beside the model's shared library, its weights and its metadata.  It must keep
working where only numpy is installed: it imports nothing but the standard library and numpy,
and never anything of the project (importing any ``autotune`` module would import llvmlite,
onnx and the rest through ``autotune/__init__.py``).

The library's entry point (its name is in the metadata, ``model_run`` by default) is

    int32_t model_run(void *workspace, const void *weights,
                      const void *const *inputs, void *const *outputs);

``workspace`` holds every input, intermediate and output at the offsets of the metadata,
``weights`` the bytes of the weights file; both 64-byte aligned.  ``inputs`` points to one
C-contiguous array per model input (in the metadata's order), copied into the workspace
before the first kernel; ``outputs`` to one buffer per output, filled after the last.  Either
may be NULL (the inputs are then taken from, the outputs left in, the workspace).  It returns
0, or one of ENTRY_ERRORS.  Where a kernel reads or writes at an index taken from the data (a
gather, an embedding lookup) and that index is outside the buffer, the kernel stops, the
entry returns INDEX_ERROR and the library's ``model_fault`` (three int64) holds the step, the
kernel's check number and the index; ``run`` raises DataIndexError naming them.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Mapping

import numpy as np

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "DataIndexError",
    "DeployError",
    "DeployedModel",
    "InputError",
    "LoadError",
    "load",
]

FORMAT = "autotune-deploy"
FORMAT_VERSION = 1
METADATA_FILE = "model.json"

# What the entry returns when a pointer it was given is unusable.
ENTRY_ERRORS = {1: "the workspace pointer is NULL or not aligned",
                2: "the weights pointer is NULL or not aligned"}
INDEX_ERROR = 3
FAULT_RECORD = "model_fault"


class DeployError(Exception):
    """Base of the loader's errors."""


class DataIndexError(DeployError, IndexError):
    """An index taken from the inputs (a gather's, an embedding's) is outside the buffer it
    indexes; ``step``, ``value`` (the model value indexed), ``axis``, ``index`` and
    ``extent`` say where.  The outputs of that run are not valid."""

    def __init__(self, message: str, step: str, value, axis: int, index: int, extent: int):
        super().__init__(message)
        self.step, self.value, self.axis = step, value, axis
        self.index, self.extent = index, extent


class LoadError(DeployError, OSError):
    """The folder is not a loadable exported model: a file is missing or damaged, the format
    version is not this loader's, or the library does not load in this process."""


class InputError(DeployError, ValueError):
    """The inputs given to ``run`` do not fit the model (name, shape or dtype)."""


class TensorSpec:
    """One input, output or weight: name, shape, dtype and where its bytes are."""

    __slots__ = ("dtype", "name", "offset", "region", "shape")

    def __init__(self, entry: dict, region: str):
        self.name = str(entry["name"])
        self.shape = tuple(int(s) for s in entry["shape"])
        self.dtype = np.dtype(entry["dtype"])
        self.region = str(entry.get("region", region))
        self.offset = int(entry["offset"])

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


def _aligned_bytes(nbytes: int, alignment: int) -> np.ndarray:
    """``nbytes`` zeroed bytes starting at a multiple of ``alignment`` (numpy itself only
    promises 16)."""
    raw = np.zeros(nbytes + alignment, dtype=np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start:start + nbytes]


def _read_metadata(folder: str) -> dict:
    path = os.path.join(folder, METADATA_FILE)
    if not os.path.isdir(folder):
        raise LoadError(f"load: {folder!r} is not a folder (an exported model is a folder "
                        f"holding {METADATA_FILE}, its library and its weights)")
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.load(f)
    except FileNotFoundError:
        raise LoadError(f"load: {folder!r} has no {METADATA_FILE}; is it an exported "
                        f"model?") from None
    except (OSError, ValueError) as err:
        raise LoadError(f"load: cannot read {path}: {err}") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise LoadError(f"load: {path} does not describe an exported model (format "
                        f"{meta.get('format') if isinstance(meta, dict) else None!r}, "
                        f"expected {FORMAT!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise LoadError(f"load: {path} has format version {meta.get('format_version')!r}; "
                        f"this loader reads version {FORMAT_VERSION} (export the model again, "
                        f"or use the loader.py written beside it)")
    if meta.get("byteorder", sys.byteorder) != sys.byteorder:
        raise LoadError(f"load: {path} holds {meta['byteorder']}-endian weights; this "
                        f"machine is {sys.byteorder}-endian")
    missing = [key for key in ("library", "entry", "alignment", "workspace_bytes",
                               "weights_file", "weights_bytes", "inputs", "outputs")
               if key not in meta]
    if missing:
        raise LoadError(f"load: {path} lacks {missing}")
    return meta


class DeployedModel:
    """An exported model loaded into this process; ``run`` takes turns under a lock (the
    workspace is shared by the calls)."""

    def __init__(self, folder: str, verify: bool = False):
        folder = os.fspath(folder)
        meta = _read_metadata(folder)
        self.folder = folder
        self.metadata = meta
        self.name = str(meta.get("model", "model"))
        self.alignment = int(meta["alignment"])
        self.inputs = [TensorSpec(e, "workspace") for e in meta["inputs"]]
        self.outputs = [TensorSpec(e, "workspace") for e in meta["outputs"]]
        self._lock = threading.Lock()

        # 1. The weights, read into aligned memory (the kernels were tuned on aligned data).
        weights_path = os.path.join(folder, meta["weights_file"])
        expected = int(meta["weights_bytes"])
        try:
            size = os.path.getsize(weights_path)
        except OSError:
            raise LoadError(f"load: the weights file {weights_path!r} is missing") from None
        if size != expected:
            raise LoadError(f"load: {weights_path} has {size} bytes, the metadata says "
                            f"{expected}; the folder is damaged or mixed with another export")
        self._weights = _aligned_bytes(max(expected, 1), self.alignment)
        with open(weights_path, "rb") as f:
            f.readinto(memoryview(self._weights)[:expected])
        if verify and meta.get("weights_sha256"):
            digest = hashlib.sha256(memoryview(self._weights)[:expected]).hexdigest()
            if digest != meta["weights_sha256"]:
                raise LoadError(f"load: {weights_path} does not match its checksum")

        # 2. The library and its entry.
        library_path = os.path.abspath(os.path.join(folder, meta["library"]))
        if not os.path.exists(library_path):
            raise LoadError(f"load: the library {library_path!r} is missing")
        try:
            self._library = ctypes.CDLL(library_path)
        except OSError as err:
            raise LoadError(f"load: cannot load {library_path}: {err}") from err
        try:
            entry = getattr(self._library, meta["entry"])
        except AttributeError:
            raise LoadError(f"load: {library_path} has no entry {meta['entry']!r}") from None
        entry.restype = ctypes.c_int32
        entry.argtypes = [ctypes.c_void_p] * 4
        self._entry = entry
        self._kernels = meta.get("kernels", [])

        # 3. The workspace: inputs, intermediates and outputs of the memory plan.
        self._workspace = _aligned_bytes(max(int(meta["workspace_bytes"]), 1), self.alignment)
        for spec in self.inputs + self.outputs:
            limit = expected if spec.region == "weights" else int(meta["workspace_bytes"])
            if spec.offset < 0 or spec.offset + spec.nbytes > limit:
                raise LoadError(f"load: {spec.name} lies outside its {spec.region} region")
        self._input_pointers = (ctypes.c_void_p * max(len(self.inputs), 1))()
        self._output_pointers = (ctypes.c_void_p * max(len(self.outputs), 1))()

    # -- information --------------------------------------------------------------------------
    @property
    def input_types(self) -> dict:
        """{input name: (shape, dtype)} in the entry's order."""
        return {s.name: (s.shape, s.dtype) for s in self.inputs}

    @property
    def output_types(self) -> dict:
        return {s.name: (s.shape, s.dtype) for s in self.outputs}

    def __repr__(self) -> str:
        return (f"DeployedModel({self.name}, inputs {self.inputs}, outputs {self.outputs}, "
                f"from {self.folder!r})")

    # -- running ------------------------------------------------------------------------------
    def _checked(self, inputs) -> list:
        """The inputs as C-contiguous arrays of the model's dtypes, in the entry's order.
        Another precision of the same kind (float64 for float32) is converted, as the built
        model's ``run`` does; anything else that does not fit is an InputError."""
        if not isinstance(inputs, Mapping):
            raise InputError(f"run takes a dict {{input name: array}}, got "
                             f"{type(inputs).__name__}")
        names = [s.name for s in self.inputs]
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise InputError(f"{self.name} has no input(s) {unknown}; its inputs are {names}")
        arrays = []
        for spec in self.inputs:
            if spec.name not in inputs:
                raise InputError(f"run: no value for input {spec.name!r} "
                                 f"({spec.dtype}{list(spec.shape)})")
            value = np.asarray(inputs[spec.name])
            if value.shape != spec.shape:
                raise InputError(f"run: input {spec.name!r} must have shape {spec.shape}, "
                                 f"got {value.shape}")
            if value.dtype.kind != spec.dtype.kind:
                raise InputError(f"run: input {spec.name!r} must be {spec.dtype}, got "
                                 f"{value.dtype}")
            arrays.append(np.ascontiguousarray(value, dtype=spec.dtype))
        return arrays

    def _call(self, inputs, outputs) -> None:
        status = self._entry(self._workspace.ctypes.data, self._weights.ctypes.data,
                             inputs, outputs)
        if status == INDEX_ERROR:
            raise self._index_error()
        if status != 0:
            reason = ENTRY_ERRORS.get(status, "an unknown error")
            raise DeployError(f"{self.name}: the entry returned {status}: {reason}")

    def _index_error(self) -> DeployError:
        try:
            step, check, index = (ctypes.c_int64 * 3).in_dll(self._library, FAULT_RECORD)
            kernel = self._kernels[step]
            spec = kernel["checks"][check - 1]
        except (ValueError, IndexError, KeyError, TypeError):
            return DeployError(f"{self.name}: a kernel failed an index check, and the "
                               f"library does not say which")
        arg = spec.get("arg")
        value = kernel["args"][arg]["value"] if arg is not None else spec["buffer"]
        return DataIndexError(
            f"{self.name}: step {kernel['step']}: index {index} on axis {spec['axis']} of "
            f"{value!r} is out of range [0, {spec['extent']}); the run stopped (its outputs "
            f"are not valid)", kernel["step"], value, spec["axis"], index, spec["extent"])

    def run(self, inputs: Mapping | None = None, **named) -> dict:
        """Run the model on ``{input name: array}`` (or keyword arguments); returns
        ``{output name: array}``, fresh arrays.  One call into the library runs every
        kernel."""
        if inputs is not None and not isinstance(inputs, Mapping):
            raise InputError(f"run takes a dict {{input name: array}}, got "
                             f"{type(inputs).__name__}")
        feed = dict(inputs or {})
        feed.update(named)
        arrays = self._checked(feed)
        results = [np.empty(s.shape, s.dtype) for s in self.outputs]
        with self._lock:
            for k, a in enumerate(arrays):
                self._input_pointers[k] = a.ctypes.data
            for k, a in enumerate(results):
                self._output_pointers[k] = a.ctypes.data
            self._call(self._input_pointers, self._output_pointers)
        return {s.name: a for s, a in zip(self.outputs, results)}

    __call__ = run

    def benchmark(self, inputs: dict | None = None, repeat: int = 10,
                  min_repeat_ms: float = 50.0, warmup: int = 2) -> dict:
        """Latency of one inference without the input and output copies, as the built
        model's ``benchmark`` measures it: {"median_ms", "mean_ms", "min_ms", "times_ms",
        "number"}.  The inputs default to seeded random values."""
        if inputs is None:
            rng = np.random.default_rng(0)
            inputs = {s.name: rng.uniform(-1, 1, s.shape).astype(s.dtype)
                      for s in self.inputs}
        with self._lock:
            # Inputs into the workspace once; then the calls take them from there.
            arrays = self._checked(inputs)
            for k, a in enumerate(arrays):
                self._input_pointers[k] = a.ctypes.data
            self._call(self._input_pointers, None)
            for _ in range(max(0, warmup)):
                self._call(None, None)
            number = 1
            while True:
                start = time.perf_counter()
                for _ in range(number):
                    self._call(None, None)
                elapsed = (time.perf_counter() - start) * 1e3
                if elapsed >= min_repeat_ms or number >= 1 << 16:
                    break
                number *= 2 if elapsed * 4 >= min_repeat_ms else 4
            times = []
            for _ in range(max(1, repeat)):
                start = time.perf_counter()
                for _ in range(number):
                    self._call(None, None)
                times.append((time.perf_counter() - start) * 1e3 / number)
        return {"median_ms": statistics.median(times), "mean_ms": statistics.fmean(times),
                "min_ms": min(times), "times_ms": times, "number": number}


def load(folder, verify: bool = False) -> DeployedModel:
    """Load the model exported into ``folder``; ``verify``: also check the weights against
    their checksum.  LoadError when the folder is not a loadable export."""
    return DeployedModel(folder, verify=verify)

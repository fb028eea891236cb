"""Data types: the names the IR uses and their numpy / LLVM / C spellings."""
from __future__ import annotations

import numpy as np

from .errors import DTypeError

# Every dtype the IR knows, in its canonical spelling.
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64")

# Loop variables and buffer indices are 64-bit: shapes of real models overflow int32 products.
INDEX_DTYPE = "int64"

_ALIASES = {"float": "float32", "int": "int32", "double": "float64", "half": "float16"}

_BITS = {"bool": 1, "int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8,
         "uint16": 16, "uint32": 32, "uint64": 64, "float16": 16, "float32": 32, "float64": 64}


def canonical(dtype) -> str:
    """Return the canonical name of ``dtype`` (a string, numpy dtype or numpy type)."""
    if isinstance(dtype, str):
        name = _ALIASES.get(dtype, dtype)
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError as err:
            raise DTypeError(f"unknown dtype {dtype!r}") from err
    if name not in DTYPES:
        raise DTypeError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def is_int(dtype: str) -> bool:
    return dtype.startswith("int") or dtype.startswith("uint")


def is_unsigned(dtype: str) -> bool:
    return dtype.startswith("uint") or dtype == "bool"


def bits(dtype: str) -> int:
    return _BITS[dtype]


def nbytes(dtype: str) -> int:
    """Storage size in bytes (bool is stored as one byte, as numpy does)."""
    return max(1, _BITS[dtype] // 8)


def to_numpy(dtype: str) -> np.dtype:
    return np.dtype(dtype)


def min_value(dtype: str):
    if is_float(dtype):
        return -np.inf
    if dtype == "bool":
        return False
    return int(np.iinfo(dtype).min)


def max_value(dtype: str):
    if is_float(dtype):
        return np.inf
    if dtype == "bool":
        return True
    return int(np.iinfo(dtype).max)

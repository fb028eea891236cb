"""TensorType: the static shape and dtype of a value in a model graph."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["TensorType", "contiguous"]


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    @staticmethod
    def of(array: np.ndarray) -> TensorType:
        return TensorType(array.shape, str(array.dtype))

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(s) for s in self.shape)}]"


def contiguous(array) -> np.ndarray:
    """``array`` as a C-contiguous ndarray, keeping its rank (np.ascontiguousarray would turn
    a 0-d array into a 1-d one)."""
    return np.require(np.asarray(array), requirements="C")

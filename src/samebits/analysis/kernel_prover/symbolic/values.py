"""Values of the symbolic executor: what a kernel argument, a launch and a tile are.

Concern: the data every other module of the package passes around (dtypes, tiles, the
arguments and grid of a kernel call) and :class:`Unsupported`, the one way a construct
outside the modelled subset is reported. Invariants: the records are plain data (frozen
where they are hashed or shared between executions); nothing here asks the solver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from samebits.analysis.kernel_prover.terms import Lin

FLOAT_RANK = {"fp16": 1, "bf16": 1, "fp32": 2, "fp64": 3}
DTYPES = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
    "int32": "i32", "int64": "i64", "int16": "i16", "int8": "i8", "int1": "i1",
}  # fmt: skip


class Unsupported(Exception):
    """A construct the prover does not model: rejected, never skipped."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


@dataclass(frozen=True)
class DType:
    name: str


@dataclass(frozen=True)
class Tile:
    """kind: int | bool | float | ptr. dims: ((size, lane atom key or None), ...)."""

    kind: str
    dims: tuple
    v: Any
    dtype: str


@dataclass(frozen=True)
class ArrayArg:
    name: str
    dtype: str


@dataclass(frozen=True)
class DescArg:
    """A TMA tensor descriptor over a row-major [rows, cols] array, read in [block] boxes;
    elements outside the array read as +0.0 (the hardware's zero fill)."""

    name: str
    dtype: str
    rows: Any  # Lin or int
    cols: Any  # Lin or int (a symbolic K)
    block: tuple[int, int]


@dataclass(frozen=True)
class FloatArg:
    name: str


@dataclass(frozen=True)
class CDiv:
    """Grid size ``ceil(num / den)`` with a symbolic numerator."""

    num: Lin
    den: int


@dataclass
class KernelCall:
    kernel: str
    grid: tuple
    args: dict
    num_warps: int = 4
    symbolic_axes: tuple = ()  # grid axes run as one symbolic program even when small

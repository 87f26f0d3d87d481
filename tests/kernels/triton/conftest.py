"""Run the Triton kernels on the CPU interpreter, with a row-stable model of ``tl.dot``.

``TRITON_INTERPRET=1`` must be set before any ``@triton.jit`` decorator runs, so it is set at
import of this conftest (before the kernel modules are imported by the tests).

The stock interpreter computes ``tl.dot`` as ``numpy.matmul(a, b) + acc``; numpy's OpenBLAS
sgemm is not row-stable (measured here: about a third of rows change bits when the same row is
multiplied inside a taller matrix). The GPU's MMA is row-stable (measured on the H200), and the
kernels' invariance rests on that. So the tests replace the interpreter's dot with a model of
an ieee fp32 MMA chain: per output element, products accumulated into ``acc`` in k order
(exact product in float64, rounded to the accumulator dtype after each step). That makes the
tests check what the kernels control (ranges, tiles, masks, guards, order of combination),
not numpy's BLAS.

The attention's exponential is inline PTX (``ex2.approx.ftz`` on a 2^-12 grid), which the
interpreter cannot run: `interpret.ex2_stand_in` gives it the GPU's bits there (the table of
`replay.ex2q`). A third patch works around an interpreter/numpy 2.x incompatibility: scalars derived from
``tl.program_id`` or loaded values are 1-element arrays, which ``int()`` rejects in numpy 2.x,
so a loop bound computed from them failed. ``__index__`` takes the single element instead.
"""

from __future__ import annotations

import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
# If an earlier test module already imported the kernels (compiled-JIT flavour), drop them so
# the tests here re-import them under the interpreter. The certified runtime (the gate, the
# units) holds no kernel and stays: a second copy would give a second UncertifiedKernelError
# class, which an earlier module's `pytest.raises(gate.UncertifiedKernelError)` would miss.
_CERTIFIED = "samebits.kernels.triton.certified"
for _name in [n for n in sys.modules if n.startswith("samebits.kernels.triton")]:
    if not _name.startswith(_CERTIFIED):
        del sys.modules[_name]

import numpy as np  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

from samebits.kernels.replay import interpret  # noqa: E402


def _k_ordered_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    """acc[i, j] <- round(acc[i, j] + a[i, k] * b[k, j]) for k = 0, 1, ... (row-local)."""
    a64 = a.data.astype(np.float64)
    b64 = b.data.astype(np.float64)
    acc = d.data.copy()
    for k in range(a64.shape[-1]):
        step = acc.astype(np.float64) + a64[..., :, k : k + 1] * b64[..., k : k + 1, :]
        acc = step.astype(d.data.dtype)
    return interpreter.TensorHandle(acc, d.dtype.scalar)


interpreter.InterpreterBuilder.create_dot = _k_ordered_dot


interpret.numpy2_index()
interpret.ex2_stand_in()  # the attention's inline ex2.approx.ftz, by its table


def pytest_configure(config) -> None:
    """Padding rows of attention tiles compute 0/0 and inf-inf that are never stored."""
    config.addinivalue_line("filterwarnings", "ignore:invalid value encountered:RuntimeWarning")

"""Import numba with vector math libraries disabled.

Invariant: with SVML off, a transcendental in a numba kernel is always one scalar libm call,
so its result for an element never depends on whether a loop around it was vectorized.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_DISABLE_INTEL_SVML", "1")

import numba  # noqa: E402

if numba.config.USING_SVML:  # pragma: no cover - only when the environment forces SVML on
    raise RuntimeError("samebits needs NUMBA_DISABLE_INTEL_SVML=1 (vector libm breaks invariance)")

__all__ = ["numba"]

"""Relational prover of the Triton kernels (batch invariance, launch equivalence, attention
chunk and page-layout invariance, split-KV decode equal to spans in sequence). The
certificate gate of the GPU plan, the certification units and the shipped certificates it
writes (``samebits certify --shipped``) are runtime code,
``samebits.kernels.triton.certified``, which this package imports (never the reverse).

Importing this package is cheap and needs no solver; Z3 (`z3-solver`, in the `test` extra) is
imported by the submodules, i.e. only when a proof is run. See docs/kernel_prover.md.
"""

from __future__ import annotations

__all__ = ["certify", "prove_spec"]


def certify(*args, **kwargs):
    """See :func:`samebits.analysis.kernel_prover.certify.certify`."""
    from samebits.analysis.kernel_prover.certify import certify as _certify

    return _certify(*args, **kwargs)


def prove_spec(*args, **kwargs):
    """See :func:`samebits.analysis.kernel_prover.certify.prove_spec`."""
    from samebits.analysis.kernel_prover.certify import prove_spec as _prove_spec

    return _prove_spec(*args, **kwargs)

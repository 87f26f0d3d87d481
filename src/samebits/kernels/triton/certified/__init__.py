"""The certified runtime: what a GPU deployment checks its kernels' certificates against.

``units`` names a model's certification units (the kernel specializations its GPU plan
launches) and recomputes each one's specialization from the engine's launch code; ``gate``
refuses a GPU plan whose units lack a valid certificate (fail closed); ``reference`` is the
op-by-op path's text a fused kernel's certificate names by SHA-256; ``certificates/`` is the
shipped set. The certificates are made by the prover (``samebits.analysis.kernel_prover``,
``samebits certify``), which imports this package; this package imports no solver and nothing
of ``samebits.analysis`` (tests/analysis/test_certificate_gate.py checks its imports).
"""

"""Front end and symbolic executor of the Triton subset the kernels use (one concern a module).

Front end: the Python ``ast`` of the kernel's source file. ``@triton.jit`` functions are
found by their decorator; a call to another ``@triton.jit`` function of the same file (or of a
sibling kernel file joined to it, :meth:`KernelSource.join`: an imported helper) is inlined
(its body is executed in a fresh scope with the caller's values). Anything outside the
supported subset raises :class:`Unsupported` with ``file:line`` and the reason.

Execution evaluates ONE generic element: program ids are symbolic (Z3 integers bounded by the
grid), every ``tl.arange`` is a symbolic lane index, and a tile value is an expression of its
lane indices (nothing is materialized). Loops with constant bounds are unrolled; a branch or
loop bound that depends on a runtime value forks the execution (one path per feasible case,
each with its path condition). ``tl.dot`` follows an explicit hardware model (see
``DOT_ATOM``); ``tl.sum`` is a function of its layout.

Modules, each importing only those above it (no cycles; none imports this ``__init__``):

- ``values``: dtypes, tiles, kernel arguments and calls, :class:`Unsupported`;
- ``source``: :class:`KernelSource`, the parsed kernel file(s);
- ``oracle``: :class:`Oracle` and :func:`decide_under`, the solver questions;
- ``memory``: :class:`Store` / :class:`Load` records, store witnesses, what a read sees;
- ``words``: data-dependent integers and predicates (bit casts, conversions, shifts, float
  comparisons, selects on them): uninterpreted terms;
- ``tl_semantics``: the ``tl.*`` builtins (``TL``), ``DOT_ATOM``, the reductions;
- ``interpreter``: :class:`Program`, one path of one program over the ``ast``;
- ``execution``: :class:`Execution`, the driver over a launch's kernel calls and paths.
"""

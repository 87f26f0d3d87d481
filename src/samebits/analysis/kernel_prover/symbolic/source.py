"""The kernel source: the ``@triton.jit`` functions of a kernel file, parsed with ``ast``.

Concern: the front end. ``@triton.jit`` functions are found by their decorator; a call to
another ``@triton.jit`` function of the same file (or of a sibling kernel file joined to it,
:meth:`KernelSource.join`: an imported helper) is inlined by the interpreter. Invariants:
the source text and its SHA-256 are the kernel file's own (joining adds functions, never
changes them); a name defined twice, or imported from a file not joined, is rejected.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field

from samebits.analysis.kernel_prover.symbolic.values import Unsupported


@dataclass
class KernelSource:
    """A parsed kernel file: its ``@triton.jit`` functions and module-level constants."""

    source: str
    filename: str
    functions: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)  # kernel name -> file, for added functions
    # names imported from sibling kernel modules (``from samebits.kernels.triton.<module>
    # import name``): name -> that module's file
    imports: dict = field(default_factory=dict)

    @staticmethod
    def parse(source: str, filename: str = "<kernel>") -> KernelSource:
        ks = KernelSource(source, filename)
        tree = ast.parse(source, filename)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
                ks.functions[node.name] = node
            elif isinstance(node, ast.ImportFrom) and _kernel_module(node):
                for alias in node.names:
                    if alias.asname not in (None, alias.name):
                        raise Unsupported(f"{filename}:{node.lineno}", "import ... as ...")
                    ks.imports[alias.name] = _kernel_module(node)
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
            ):
                ks.constants[node.targets[0].id] = node.value.value
            elif (c := _constexpr_literal(node)) is not None:
                ks.constants[c[0]] = c[1]
        return ks

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def with_functions(self, other: KernelSource) -> KernelSource:
        """This file's functions plus ``other``'s (a goal's reference kernels); the source and
        its SHA-256 stay this file's."""
        ks = KernelSource(self.source, self.filename, dict(self.functions), dict(self.constants),
                          dict(self.files), dict(self.imports))  # fmt: skip
        for name, fn in other.functions.items():
            if name in ks.functions:
                raise Unsupported(other.filename, f"{name} is also defined in {self.filename}")
            ks.functions[name] = fn
            ks.files[name] = other.filename
        return ks

    def join(self, others: list[KernelSource]) -> KernelSource:
        """This file's functions plus those of the sibling kernel files ``others`` (a fused
        kernel's imported helpers, the op-by-op path it is proved against); the source and
        its SHA-256 stay this file's. Invariant: every name a joined file imports from a
        sibling module is a ``@triton.jit`` function of that very file among the joined ones
        (so each helper is the one Python would import), and no name is defined twice."""
        ks = self
        for other in others:
            ks = ks.with_functions(other)
            for name, value in other.constants.items():
                if ks.constants.setdefault(name, value) != value:
                    raise Unsupported(other.filename, f"constant {name} differs between files")
        for src in (self, *others):
            for name, module in src.imports.items():
                if ks.files.get(name, self.filename) != module or name not in ks.functions:
                    raise Unsupported(src.filename, f"imports {name} from {module}: not a "
                                      "@triton.jit function of the files proved against")  # fmt: skip
        return ks


KERNEL_PACKAGE = "samebits.kernels.triton"


def _kernel_module(node: ast.ImportFrom) -> str | None:
    """The file of a sibling kernel module an import names (absolute or relative), else None
    (``triton``, ``__future__``: not kernel code)."""
    mod = node.module or ""
    if node.level == 0 and mod.startswith(KERNEL_PACKAGE + "."):
        mod = mod[len(KERNEL_PACKAGE) + 1 :]
    elif node.level != 1:
        return None
    return f"{mod}.py" if mod and "." not in mod else None


def _is_jit(d: ast.expr) -> bool:
    if isinstance(d, ast.Call):
        d = d.func
    return (isinstance(d, ast.Attribute) and d.attr == "jit") or (
        isinstance(d, ast.Name) and d.id == "jit"
    )


def _constexpr_literal(node: ast.stmt) -> tuple[str, int | float] | None:
    """``NAME = tl.constexpr(<number literal>)`` at module level: (NAME, the number)."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
        return None
    target, call = node.targets[0], node.value
    if not (isinstance(target, ast.Name) and isinstance(call, ast.Call)):
        return None
    f, args = call.func, call.args
    if not (isinstance(f, ast.Attribute) and f.attr == "constexpr"
            and isinstance(f.value, ast.Name) and f.value.id == "tl"):  # fmt: skip
        return None
    if len(args) != 1 or call.keywords:
        return None
    try:
        v = ast.literal_eval(args[0])
    except ValueError:
        return None
    return (target.id, v) if isinstance(v, int | float) and not isinstance(v, bool) else None

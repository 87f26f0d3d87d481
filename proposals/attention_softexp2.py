"""PROPOSAL (not shipped; `_attention_kernel.py` is unchanged): the paged attention kernels
with every ``tl.exp2`` (PTX ``ex2.approx.ftz.f32``, no public definition) replaced by
`softexp2` of `kernels/triton/_softexp2.py`, a fixed sequence of IEEE fp32 operations with a
written definition (its CPU replay: `samebits.kernels.replay.softexp.softexp2`; these kernels'
replay: `samebits/kernels/replay/attention.py`).

Importing this module builds that kernel module from the shipped source itself (the one
textual change below, nothing else), writes it next to Triton's cache and loads it, so the
proposal can never drift from `_attention_kernel.py`; its names (`paged_attention_kernel`,
`split_span_kernel`, `merge_spans_kernel`, ...) are re-exported here.

To adopt: make the same change in `_attention_kernel.py`, add `_softexp2.py` to
`units.ALSO_FILES["attention"]`, re-prove the attention units (about an hour), and first run
on the H200 `python benchmarks/replay_attention_check.py --out replay_attention_check.json`,
which compares this kernel's bits with the replay and times it against the current kernel.
"""

from __future__ import annotations

import hashlib
import importlib.util
import tempfile
from pathlib import Path

import samebits.kernels.triton as triton_kernels

SHIPPED = Path(triton_kernels.__file__).parent / "_attention_kernel.py"
IMPORT = "import triton.language as tl\n"
SOFT_IMPORT = IMPORT + "\nfrom samebits.kernels.triton._softexp2 import softexp2\n"


def proposed_source(shipped: str) -> str:
    """The shipped kernel source with ``tl.exp2(`` -> ``softexp2(`` (and its import)."""
    if shipped.count(IMPORT) != 1 or "tl.exp2(" not in shipped:
        raise RuntimeError("_attention_kernel.py no longer has the shape this proposal edits")
    return shipped.replace(IMPORT, SOFT_IMPORT).replace("tl.exp2(", "softexp2(")


def _load():
    text = proposed_source(SHIPPED.read_text())
    tag = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"samebits_attention_softexp2_{tag}.py"
    if not path.exists():
        path.write_text(text)
    spec = importlib.util.spec_from_file_location("attention_softexp2_generated", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_generated = _load()
globals().update({k: v for k, v in vars(_generated).items() if not k.startswith("__")})

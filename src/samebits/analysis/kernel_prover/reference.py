"""Reference paths of fused kernels: the torch ops of the op-by-op path, as Triton text.

A fused kernel is proved equal to the op-by-op path it replaces (a launch-equivalence goal
whose right launch is that path). The path's Triton kernels come from the kernel file itself
(``rope_kernel``); its torch ops are stated here as small Triton functions that the prover
executes like the kernels (the text is parsed, never imported or compiled). They are bit
copies: a load and a store of the same element type, no arithmetic.

``qkv-rope-store`` (`ops.TorchPlacement.qkv_rope_store`): ``split_qkv`` (contiguous copies of
the q and k column ranges of qkv, ``split_copy_kernel``), ``rope`` of q and of k in place
(``rope_kernel``), and ``store_kv``: ``index_copy_(0, slot_mapping, .)`` of k and of the v
view of qkv into the caches (``index_copy_kernel``).
"""

from __future__ import annotations

import hashlib

FILENAME = "kernel_prover/reference.py"

SOURCE = '''
@triton.jit
def split_copy_kernel(src_ptr, dst_ptr, SRC_STRIDE: tl.constexpr, OFFSET: tl.constexpr,
                      WIDTH: tl.constexpr, BLOCK: tl.constexpr):
    """src[:, OFFSET:OFFSET + WIDTH].contiguous(): row t of dst is that slice of row t."""
    t = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK)
    mask = j < WIDTH
    x = tl.load(src_ptr + t * SRC_STRIDE + OFFSET + j, mask=mask)
    tl.store(dst_ptr + t * WIDTH + j, x, mask=mask)


@triton.jit
def index_copy_kernel(src_ptr, slot_ptr, dst_ptr, SRC_STRIDE: tl.constexpr,
                      OFFSET: tl.constexpr, WIDTH: tl.constexpr, BLOCK: tl.constexpr):
    """dst.index_copy_(0, slots, src[:, OFFSET:OFFSET + WIDTH]): row slots[t] of dst is that
    slice of row t of src."""
    t = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK)
    mask = j < WIDTH
    slot = tl.load(slot_ptr + t).to(tl.int64)
    x = tl.load(src_ptr + t * SRC_STRIDE + OFFSET + j, mask=mask)
    tl.store(dst_ptr + slot * WIDTH + j, x, mask=mask)
'''

NAMES = ("qkv-rope-store",)


def source(name: str):
    """The reference kernels of path ``name`` as a parsed :class:`KernelSource`."""
    from samebits.analysis.kernel_prover.symbolic.source import KernelSource

    if name not in NAMES:
        raise ValueError(f"no reference path {name!r}")
    return KernelSource.parse(SOURCE, FILENAME)


def sha256() -> str:
    return hashlib.sha256(SOURCE.encode()).hexdigest()

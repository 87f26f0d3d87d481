"""Attention goals 2 and 3 (chunk and page-layout invariance) of the paged kernel: the tiny
shape proved between a prefill-tile launch (BLOCK_M 64, block size 16) and a decode-tile
launch (BLOCK_M 16, block size 32) with free metadata; planted bugs refuted; the host
metadata precondition (one program per query token, of its own request) tested."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("z3")

from samebits.analysis.kernel_prover.attention import attention_specs, prove_attention  # noqa: E402
from samebits.analysis.kernel_prover.symbolic.source import KernelSource  # noqa: E402
from samebits.kernels.triton.attention_meta import _programs  # noqa: E402

KDIR = Path(__file__).resolve().parents[2] / "src" / "samebits" / "kernels" / "triton"
ATTN = (KDIR / "_attention_kernel.py").read_text()
SPECS = {s.name: s for s in attention_specs("tiny")}
CROSS = "tiny.attention.bm64-p16~bm16-p32"  # other tile height, packing, block size, tables
SAME = "tiny.attention.bm64-p16~bm64-p16"  # same launch, other chunking and block tables


def mutate(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"mutation anchor not found exactly once: {old!r}"
    return text.replace(old, new)


def run(text: str, name: str):
    return prove_attention(KernelSource.parse(text, "_attention_kernel.py"), SPECS[name])


def assert_refuted(res, *needles):
    assert res.status == "refuted", (res.status, res.unsupported)
    blob = repr(res.counterexample)
    for n in needles:
        assert n in blob, (n, res.counterexample)


def test_tiny_attention_chunk_packing_and_page_layout_are_proved():
    res = run(ATTN, CROSS)
    assert res.status == "proved", res.unsupported or res.counterexample
    # the float reductions were modelled by the stated assumptions, not by layout
    assert res.stats["layout_reductions"] == ["('max', 'any-order')", "('sum', 'one-nonzero')"]


def test_tiles_aligned_to_the_chunk_start_are_refuted():
    text = mutate(ATTN, "    last = tl.max(pos, axis=0)\n",
                  "    last = tl.max(pos, axis=0)\n"
                  "    shift = tl.maximum(tl.load(pos_ptr + tl.load(row0_ptr + pid)), 0) % BLOCK_N\n")  # fmt: skip
    text = mutate(text, "range(0, last // BLOCK_N + 1)", "range(0, (last + shift) // BLOCK_N + 1)")
    text = mutate(
        text, "bt_row, j * BLOCK_N, pos", "bt_row, tl.maximum(j * BLOCK_N - shift, 0), pos"
    )
    assert_refuted(run(text, SAME), "update by key tile j")


def test_tiles_of_one_page_are_refuted_across_block_sizes():
    text = mutate(ATTN, "range(0, last // BLOCK_N + 1)", "range(0, last // PAGE + 1)")
    text = mutate(
        text, "bt_row, j * BLOCK_N, pos, last, hk,\n", "bt_row, j * PAGE, pos, last, hk,\n"
    )
    text = mutate(
        text, "m_i, l_i, acc, HKV, D, PAGE, BLOCK_N)", "m_i, l_i, acc, HKV, D, PAGE, PAGE)"
    )
    assert_refuted(run(text, "tiny.attention.bm64-p16~bm64-p32"), "reads v at different indices")


def test_denominator_by_tl_sum_over_the_tile_is_refuted_across_tile_heights():
    text = mutate(
        ATTN,
        '    row_sum = tl.sum(tl.where(col0, tl.dot(p, ones, input_precision="ieee"), 0.0), axis=1)',
        "    row_sum = tl.sum(p.to(tl.float32), axis=1)",
    )
    assert_refuted(run(text, "tiny.attention.bm64-p16~bm16-p16"),
                   "reduce: parameters differ (((64, 64), 1, 4) vs ((16, 64), 1, 4))")  # fmt: skip


def test_missing_causal_mask_is_refuted():
    text = mutate(ATTN, '    s = tl.where(key[None, :] <= pos[:, None], s, float("-inf"))\n', "")
    assert_refuted(run(text, SAME), "v@L-beyond")


def test_metadata_gives_each_query_token_one_program_of_its_request():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lens = rng.integers(0, 40, size=rng.integers(1, 6))
        qsl = np.concatenate([[0], np.cumsum(lens)])
        tpt = int(rng.choice([1, 2, 4, 8, 16]))
        req, row0 = _programs(qsl, tpt)
        owner = np.full(qsl[-1], -1)
        for p, (r, first) in enumerate(zip(req, row0, strict=True)):
            toks = np.arange(first, min(first + tpt, qsl[r + 1]))
            assert first >= qsl[r] and toks.size > 0  # its own request; a live row
            assert (owner[toks] == -1).all()
            owner[toks] = p
        assert (owner >= 0).all()

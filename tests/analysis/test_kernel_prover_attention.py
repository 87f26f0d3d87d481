"""Attention goals of the span-merged kernels: chunk and page-layout invariance (goals 2, 3)
of the sequential-span kernel, the tiny shape proved between a prefill-tile launch (BLOCK_M 64,
block size 16) and a decode-tile launch (BLOCK_M 16, block size 32) with free metadata; launch
equivalence (goal 4) of split-KV decode (any number of programs per request) with it; planted
bugs of the key tiles refuted (the span mutants are in test_kernel_prover_mutants.py); the
host metadata precondition (one program per query token, of its own request) tested."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kernel_mutation import mutate

pytest.importorskip("z3")

from samebits.analysis.kernel_prover.attention import (  # noqa: E402
    SPLIT,
    attention_specs,
    prove_attention,
)
from samebits.analysis.kernel_prover.certify import joined  # noqa: E402
from samebits.analysis.kernel_prover.specs import unit_specs  # noqa: E402
from samebits.kernels.plan import ATTENTION_SPAN  # noqa: E402
from samebits.kernels.triton.attention import KEY_BLOCK  # noqa: E402
from samebits.kernels.triton.attention_meta import _programs  # noqa: E402
from samebits.kernels.triton.certified import units as U  # noqa: E402
from samebits.kernels.triton.certified.units import ALSO_FILES  # noqa: E402

KDIR = Path(__file__).resolve().parents[2] / "src" / "samebits" / "kernels" / "triton"
ATTN = (KDIR / "_attention_kernel.py").read_text()
SPECS = {s.name: s for s in attention_specs("tiny")}
CROSS = "tiny.attention.bm64-p16~bm16-p32"  # other tile height, packing, block size, tables
SAME = "tiny.attention.bm64-p16~bm64-p16"  # same launch, other chunking and block tables
SPLIT_KV = "tiny.attention.bm64-p16~split-bm16-p32"  # split-KV decode vs spans in sequence
REDUCTIONS = ["('max', 'any-order')", "('sum', 'one-nonzero')"]


def run(text: str, name: str):
    return prove_attention(
        joined(text, "_attention_kernel.py", ALSO_FILES["attention"]), SPECS[name]
    )


def assert_refuted(res, *needles):
    assert res.status == "refuted", (res.status, res.unsupported)
    blob = repr(res.counterexample)
    for n in needles:
        assert n in blob, (n, res.counterexample)


def test_tiny_attention_chunk_packing_and_page_layout_are_proved():
    res = run(ATTN, CROSS)
    assert res.status == "proved", res.unsupported or res.counterexample
    # the float reductions were modelled by the stated assumptions, not by layout
    assert res.stats["layout_reductions"] == REDUCTIONS
    # both loops summarized by induction: the spans, and the key tiles of a span
    assert res.stats["loops"] == ["_attend_span#0.0~_attend_span#0.0",
                                  "paged_attention_kernel#0.0~paged_attention_kernel#0.0"]  # fmt: skip


def test_tiny_split_kv_decode_equals_spans_in_sequence():
    res = run(ATTN, SPLIT_KV)
    assert res.status == "proved", res.unsupported or res.counterexample
    assert res.stats["layout_reductions"] == REDUCTIONS
    # the merge loop is the span loop's counterpart; the split kernel's key tiles the same fold
    assert res.stats["loops"] == ["_attend_span#0.0~_attend_span#0.0",
                                  "paged_attention_kernel#0.0~merge_spans_kernel#0.0"]  # fmt: skip


def test_specs_and_units_name_the_span_and_both_launches():
    names = sorted(SPECS)
    assert [n for n in names if "split" in n] == [
        "tiny.attention.bm64-p16~split-bm16-p16", "tiny.attention.bm64-p16~split-bm16-p32"]  # fmt: skip
    for sp in SPECS.values():
        assert sp.span == ATTENTION_SPAN and sp.block_n == KEY_BLOCK
        assert sp.description["span_tiles"] == ATTENTION_SPAN // KEY_BLOCK > 1
        assert sp.goal.to_dict()["span"] == ATTENTION_SPAN
    units = [u for u in U.units_for(U.dims_of({"hidden_size": 64, "intermediate_size": 128,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "vocab_size": 320})) if u["kind"] == "attention"]  # fmt: skip
    assert [u["key"] for u in units] == ["attention.h4.kv2.d16", "attention.split_kv.h4.kv2.d16"]
    seq, split = (unit_specs(u) for u in units)
    assert len(seq) == 6 and all(s.right.launch != SPLIT for s in seq)  # 3 heights x 2 pages
    assert len(split) == 2 and all(s.right.launch == SPLIT for s in split)
    spec = U.specialization(units[1])
    assert spec["kernels"] == ["split_span_kernel", "merge_spans_kernel"]
    assert spec["span"] == ATTENTION_SPAN and spec["block_m"] == 16


def test_tiles_aligned_to_the_span_start_of_the_chunk_are_refuted():
    # key tiles of a span start at the program's last position (mod BLOCK_N) instead of at
    # multiples of BLOCK_N: same launch, other chunking
    text = mutate(ATTN, "    stop = tl.minimum(span0 + SPAN, last + 1)\n",
                  "    stop = tl.minimum(span0 + SPAN, last + 1)\n"
                  "    shift = last % BLOCK_N\n")  # fmt: skip
    # every tile by the masked update (no interior loop, so the tiles stay one progression)
    text = mutate(text, "    a = tl.minimum(tl.maximum(inner0, span0), stop)\n", "    a = stop\n")
    text = mutate(text, "for key0 in range(span0, a, BLOCK_N):",
                  "for key0 in range(span0 + shift, a, BLOCK_N):")  # fmt: skip
    assert_refuted(run(text, SAME), "update by an iteration both run")


def test_tiles_of_one_page_are_refuted_across_block_sizes():
    text = ATTN
    for loop in ("range(span0, a, BLOCK_N)", "range(a, b, BLOCK_N)", "range(b, stop, BLOCK_N)"):
        text = mutate(text, loop, loop.replace("BLOCK_N", "PAGE"))
    text = mutate(text, "m_s, l_s, acc_s, HKV, D, PAGE, BLOCK_N)",
                  "m_s, l_s, acc_s, HKV, D, PAGE, PAGE)", count=3)  # fmt: skip
    # the key tiles are 16 keys wide in L, 32 in R: the P @ V products contract another K
    assert_refuted(run(text, "tiny.attention.bm64-p16~bm64-p32"), "dotk: parameters differ")


KEY_ORDER = (
    "    key = key0 + tl.arange(0, BLOCK_N)\n",
    "    key = key0 + (tl.arange(0, BLOCK_N) + PAGE) % BLOCK_N\n",
)


def test_key_order_following_the_block_size_is_refuted():
    # the tile's keys in a rotated order that follows PAGE: the same keys (the exact max is
    # equal), but P @ V and the p @ ones denominator chain them in another order. The generic
    # k lane of tl.dot tells the orders apart; the same rotation on both sides is proved
    text = mutate(ATTN, *KEY_ORDER, count=2)
    assert run(text, SAME).status == "proved"
    assert_refuted(run(text, "tiny.attention.bm64-p16~bm64-p32"), "at different indices")


def test_score_columns_following_the_block_size_are_refuted():
    # k's head-dim columns rotated by PAGE // 16 (PAGE % D is 0 at D = 16): q . k pairs other
    # columns at another block size
    text = mutate(ATTN, "    k = tl.load(k_ptr + kv[:, None] + d[None, :], mask=kmask[:, None], other=0.0)\n",
                  "    k = tl.load(k_ptr + kv[:, None] + ((d + PAGE // 16) % D)[None, :],"
                  " mask=kmask[:, None], other=0.0)\n")  # fmt: skip
    text = mutate(text, "    k = tl.load(k_ptr + kv[:, None] + d[None, :])\n",
                  "    k = tl.load(k_ptr + kv[:, None] + ((d + PAGE // 16) % D)[None, :])\n")  # fmt: skip
    assert run(text, SAME).status == "proved"
    assert_refuted(run(text, "tiny.attention.bm64-p16~bm64-p32"), "reads k at different indices")


def test_denominator_by_tl_sum_over_the_tile_is_refuted_across_tile_heights():
    text = mutate(
        ATTN,
        '    row_sum = tl.sum(tl.where(col0, tl.dot(p, ones, input_precision="ieee"), 0.0), axis=1)',
        "    row_sum = tl.sum(p.to(tl.float32), axis=1)",
        count=2,
    )
    assert_refuted(run(text, "tiny.attention.bm64-p16~bm16-p16"),
                   "reduce: parameters differ (((64, 64), 1, 4) vs ((16, 64), 1, 4))")  # fmt: skip


def test_missing_causal_mask_is_refuted():
    text = mutate(
        ATTN,
        "keep = (key[None, :] <= pos[:, None]) & (key[None, :] >= lo[:, None])",
        "keep = key[None, :] >= lo[:, None]",
    )
    assert_refuted(run(text, SAME), "v@L-beyond")


def test_loop_scheduling_hints_are_accepted():
    """tl.range's pipelining hints schedule the loop, they do not change its arithmetic."""
    text = mutate(ATTN, "for key0 in range(a, b, BLOCK_N):",
                  "for key0 in tl.range(a, b, BLOCK_N, num_stages=2):")  # fmt: skip
    res = run(text, "tiny.attention.bm64-p16~split-bm16-p16")
    assert res.status == "proved", res.unsupported or res.counterexample
    bad = mutate(ATTN, "for key0 in range(a, b, BLOCK_N):",
                 "for key0 in tl.range(a, b, BLOCK_N, reorder=True):")  # fmt: skip
    res = run(bad, SAME)
    assert res.status == "rejected-unsupported" and "range keyword 'reorder'" in res.unsupported


def test_an_interior_tile_with_another_exponential_is_refuted():
    """The exponential is inline PTX (an uninterpreted function of its operand): a tile path
    that skips ex2q's grid rounding computes another function, and which path a tile takes
    follows the chunking."""
    bad = mutate(ATTN, "    p = ex2q(s - m_new[:, None]).to(v.dtype)",
                 "    p = ex2_ftz(s - m_new[:, None]).to(v.dtype)")  # fmt: skip
    assert run(bad, SAME).status == "refuted"


def test_an_inline_asm_not_declared_pure_is_rejected():
    bad = mutate(ATTN, "    alpha = ex2q(m_i - m_new)\n",
                 '    alpha = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", '
                 "[m_i - m_new], dtype=tl.float32, is_pure=False, pack=1)\n")  # fmt: skip
    res = run(bad, SAME)
    assert res.status == "rejected-unsupported" and "inline asm: only" in res.unsupported


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


# --- int32 index arithmetic at the deployment bounds (units.ATTENTION_BOUNDS) -------------


SPLIT_INDEX = 6  # the first split-KV spec: after 3 tile heights x 2 block sizes


def _spec(heads: int, kv_heads: int, head_dim: int, index: int = 0):
    return attention_specs("x", {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim})[index]


def _prove_text(text: str, spec):
    return prove_attention(joined(text, "_attention_kernel.py", ALSO_FILES["attention"]), spec)


def test_int32_obligations_are_proved_at_the_deployment_bounds():
    for spec in (_spec(4, 2, 16), _spec(32, 8, 128, SPLIT_INDEX)):  # spans in sequence; split-KV
        res = _prove_text(ATTN, spec)
        assert res.status == "proved", res.unsupported or res.counterexample
        assert res.stats["int32_obligations"] >= 20
        assert spec.goal.to_dict()["int32"]["bounds"] == U.ATTENTION_BOUNDS


def test_q_row_offset_in_int32_overflows_only_at_large_heads_x_head_dim():
    # tokens * heads * head_dim: 2^20 * 4 * 16 fits in int32, 2^20 * 32 * 128 does not
    text = mutate(ATTN, "rows = (tok.to(tl.int64) * (HKV * GROUP)", "rows = (tok * (HKV * GROUP)")
    assert _prove_text(text, _spec(4, 2, 16)).status == "proved"
    assert_refuted(_prove_text(text, _spec(32, 8, 128)), "int32 overflow in the L execution")


def test_kv_page_offset_in_int32_is_refuted():
    # a block-table entry below BLOCKS_MAX times PAGE * HKV * D leaves int32 at any head shape
    text = mutate(ATTN, "other=0).to(tl.int64)", "other=0)")
    assert_refuted(_prove_text(text, _spec(4, 2, 16)), "int32 overflow")


def test_split_state_offset_in_int32_is_refuted():
    # the split launch's token * max_spans is int32 and fits within the host's rule (requests
    # * kv heads < DECODE_SPLIT_PROGRAMS, the host's own constant); the state offset scaled by
    # heads and head_dim does not, without the int64 cast
    from samebits.kernels.triton.attention import DECODE_SPLIT_PROGRAMS, FULL_WINDOW

    assert U.ATTENTION_BOUNDS["SPLIT_PROGRAMS"] == DECODE_SPLIT_PROGRAMS
    assert U.ATTENTION_BOUNDS["FULL_WINDOW"] == FULL_WINDOW
    text = mutate(ATTN, "    return tok.to(tl.int64) * (HKV * GROUP) + hk * GROUP + r % GROUP\n",
                  "    return tok * (HKV * GROUP) + hk * GROUP + r % GROUP\n")  # fmt: skip
    assert_refuted(
        _prove_text(text, _spec(32, 8, 128, SPLIT_INDEX)), "int32 overflow in the R execution"
    )


# --- head classes: the KV head count symbolic (units.attention_class) ----------------------


def _class_specs(group: int, head_dim: int, split: bool = False):
    from samebits.analysis.kernel_prover.specs import symbolic_unit_specs

    unit = dict(key="u", kind="attention", heads=group * 2, kv_heads=2, head_dim=head_dim)
    if split:
        unit["launch"] = "split"
    return symbolic_unit_specs(U.symbolic_unit(unit))


def test_a_head_class_proves_every_kv_head_count():
    sym = U.symbolic_unit(dict(key="attention.h28.kv4.d128", kind="attention", heads=28,
                               kv_heads=4, head_dim=128))  # fmt: skip
    assert sym["key"] == "attention.g7.d128" and (sym["lo"], sym["hi"]) == (1, U.HEADS_MAX)
    for split in (False, True):
        specs = _class_specs(2, 16, split)
        assert len(specs) == (2 if split else 6)
        for spec in specs:
            assert spec.kv_class == (1, U.HEADS_MAX)
            assert spec.goal.to_dict()["shape"] == {"KV": [1, U.HEADS_MAX]}
            res = _prove_text(ATTN, spec)
            assert res.status == "proved", (spec.name, res.unsupported or res.counterexample)


@pytest.mark.parametrize("old, new, count", [
    ("rows = (tok.to(tl.int64) * (HKV * GROUP)", "rows = (tok.to(tl.int64) * (8 * GROUP)", 1),
    ("kv = ((page * PAGE + key % PAGE) * HKV + hk) * D", "kv = ((page * PAGE + key % PAGE) * 8 + hk) * D", 2),
])  # fmt: skip
def test_a_kernel_right_only_at_eight_kv_heads_is_refuted_by_the_class(old, new, count):
    # q rows or K/V slots laid out for 8 KV heads (both tile updates): proved at kv_heads = 8,
    # refuted for the class
    text = mutate(ATTN, old, new, count)
    assert _prove_text(text, _spec(16, 8, 16)).status == "proved"
    assert _prove_text(text, _class_specs(2, 16)[0]).status == "refuted"

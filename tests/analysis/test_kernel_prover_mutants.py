"""Planted bugs in copies of the real kernels: the prover must reject every one, with a
counterexample (two executions and the element) or, for a non-deterministic construct, with
the line and the reason. The kernel text is read at test time, so the mutants follow the
kernels as they change; each mutation asserts that its anchor text still exists."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_mutation import mutate

pytest.importorskip("z3")

from samebits.analysis.kernel_prover import specs as S  # noqa: E402
from samebits.analysis.kernel_prover.certify import joined  # noqa: E402
from samebits.analysis.kernel_prover.prover import prove  # noqa: E402
from samebits.analysis.kernel_prover.symbolic.source import KernelSource  # noqa: E402
from samebits.kernels.triton.certified.units import ALSO_FILES  # noqa: E402

KDIR = Path(__file__).resolve().parents[2] / "src" / "samebits" / "kernels" / "triton"
LINEAR = (KDIR / "_linear_kernels.py").read_text()
ROWS = (KDIR / "_row_kernels.py").read_text()


def _spec(specs, name):
    by = {s.name: s for s in specs}
    assert name in by, sorted(by)
    return by[name]


def tiny_linear(role: str, kind: str, launch: str):
    return _spec(S.linear_specs("tiny", roles=(role,)), f"tiny.{role}.{kind}.{launch}")


def split_linear(kind: str, launch: str):
    """A row-parallel weight whose plan splits K (S = 4, two 64-steps per range)."""
    return _spec(S.linear_specs("tiny", shapes=[("down", 64, 512)]), f"tiny.down.{kind}.{launch}")


def run(spec, text: str, name: str):
    res = prove(KernelSource.parse(text, name), spec.goal, spec.left, spec.right, spec.m_left)
    return res


def assert_refuted(res, *needles):
    assert res.status == "refuted", (res.status, res.unsupported)
    cex = res.counterexample
    assert cex and cex.get("reason"), cex
    blob = repr(cex)
    for n in needles:
        assert n in blob, (n, cex)
    return cex


BM16 = "ranges-bm16-bn32-w4-s6"  # the first launch of a column plan (S = 1)
BM16_SPLIT = "ranges-bm16-bn32-w4-s4"  # the same tiles as the split plan's first grid launch
TMA_SPLIT = "tma-bm128-bn128-w8-s4-g8"


def test_block_k_chosen_from_m_is_refuted():
    # the k step follows M (a "faster" step for big batches) while the tile stays BLOCK_K wide
    text = mutate(
        LINEAR,
        "    for k0 in range(0, RANGE_K, BLOCK_K):",
        "    step = tl.where(M > 16, BLOCK_K // 2, BLOCK_K)\n"
        "    for k0 in range(0, RANGE_K, step):",
    )
    res = run(tiny_linear("o", "batch", BM16), text, "_linear_kernels.py")
    cex = assert_refuted(res, "y:")
    assert cex["element_and_programs"]["L.M"] > 16  # the two executions: M > 16 vs M = 1
    assert "elem.r" in cex["element_and_programs"]


def test_atomic_add_reduction_is_rejected_with_line():
    text = mutate(
        LINEAR,
        "    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=mask)",
        "    tl.atomic_add(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=mask)",
    )
    res = run(tiny_linear("o", "batch", BM16), text, "_linear_kernels.py")
    assert res.status == "rejected-unsupported"
    line = text.splitlines().index(
        "    tl.atomic_add(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=mask)"
    )
    assert f"_linear_kernels.py:{line + 1}" in res.unsupported
    assert "non-deterministic" in res.unsupported


def _reversed_in_odd_tiles() -> str:
    text = mutate(
        LINEAR,
        "    total = _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, 0, RANGE_K, BLOCK_M, BLOCK_N, "
        "BLOCK_K)",
        "    rev = tl.program_id(0) % 2\n"
        "    total = _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, rev * (SPLITS - 1) * RANGE_K,"
        " RANGE_K, BLOCK_M, BLOCK_N, BLOCK_K)",
    )
    return mutate(
        text,
        "total + _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, s * RANGE_K, RANGE_K,",
        "total + _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, (s + rev * (SPLITS - 1 - 2 * s))"
        " * RANGE_K, RANGE_K,",
    )


def test_reversed_range_order_in_odd_programs_is_refuted():
    res = run(split_linear("batch", BM16_SPLIT), _reversed_in_odd_tiles(), "_linear_kernels.py")
    cex = assert_refuted(res, "y:")
    model = cex["element_and_programs"]
    assert model["elem.r"] // 16 % 2 == 1  # the row sits in an odd m-tile of the left launch


def test_reversed_order_breaks_launch_equivalence_with_the_split_grid():
    spec = split_linear("equiv", f"split_grid-bm16-bn32-w4-s4~{BM16_SPLIT}")
    res = run(spec, _reversed_in_odd_tiles(), "_linear_kernels.py")
    assert_refuted(res, "y:")


def test_row_reading_another_row_is_refuted():
    text = mutate(
        LINEAR,
        "x_rows = x_ptr + rm.to(tl.int64)[:, None] * K",
        "x_rows = x_ptr + (rm ^ 1).to(tl.int64)[:, None] * K",
    )
    res = run(tiny_linear("o", "batch", BM16), text, "_linear_kernels.py")
    assert_refuted(res, "right-outside-row")


def test_norm_row_reading_another_row_is_refuted():
    text = mutate(ROWS, "r = tl.load(x_ptr + offs,", "r = tl.load(x_ptr + (offs ^ WIDTH),")
    res = run(_spec(S.row_specs("tiny"), "tiny.rms_norm.batch"), text, "_row_kernels.py")
    assert_refuted(res, "right-outside-row", "reduce")


def test_early_exit_depending_on_m_is_refuted():
    text = mutate(
        LINEAR,
        "    total = _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, 0, RANGE_K,",
        "    if M > 64:\n        return\n"
        "    total = _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, 0, RANGE_K,",
    )
    res = run(tiny_linear("o", "batch", BM16), text, "_linear_kernels.py")
    cex = assert_refuted(res, "does not write")
    assert cex["element"]["L.M"] > 64


def test_layout_dependent_sum_is_refuted():
    # a norm whose warps follow the batch: tl.sum's tree follows the layout, so no proof
    spec = _spec(S.row_specs("tiny"), "tiny.rms_norm.batch")
    spec.right[0].num_warps = spec.left[0].num_warps * 2
    res = run(spec, ROWS, "_row_kernels.py")
    assert_refuted(res, "reduce: parameters differ")


# --- the TMA kernel (descriptor loads, one k loop, a select at each range's last step) -----

TMA_EQUIV = f"split_grid-bm16-bn32-w4-s4~{TMA_SPLIT}"


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        # the running total added on the other side (a float add is not assumed commutative)
        ("tl.where(i < STEPS, acc, total + acc)", "tl.where(i < STEPS, acc, acc + total)", "y:"),
        # the first range added to a zero total instead of becoming it
        ("tl.where(i < STEPS, acc, total + acc)", "total + acc", "y:"),
        # a weight box read at the wrong k
        ("            b = w_desc.load([off_n, i * BLOCK_K])\n            acc = tl.dot(a, b.T, acc, "
         "input_precision=\"ieee\")\n            if i % STEPS",
         "            b = w_desc.load([off_n, (i % 2) * BLOCK_K])\n            acc = tl.dot(a, b.T, "
         "acc, input_precision=\"ieee\")\n            if i % STEPS", "reads w"),
    ],
)  # fmt: skip
def test_tma_kernel_mutants_break_launch_equivalence(old, new, needle):
    res = run(split_linear("equiv", TMA_EQUIV), mutate(LINEAR, old, new), "_linear_kernels.py")
    assert_refuted(res, needle)


def test_tma_group_axes_swapped_is_refuted():
    # N = 1100: 9 weight tiles of 128 in groups of 8; the swapped axes leave tiles unwritten
    specs = S.linear_specs("tiny", shapes=[("down", 1100, 512)])
    text = mutate(LINEAR, "(tl.program_id(2) * GROUP_N + tl.program_id(0))",
                  "(tl.program_id(0) * GROUP_N + tl.program_id(2))")  # fmt: skip
    res = run(_spec(specs, f"tiny.down.equiv.{TMA_EQUIV}"), text, "_linear_kernels.py")
    assert_refuted(res)


def test_tma_box_of_another_row_is_refuted():
    text = mutate(
        LINEAR,
        "            a = x_desc.load([off_m, i * BLOCK_K])\n            b = w_desc.load([off_n, i * BLOCK_K])\n"
        "            acc = tl.dot(a, b.T, acc, input_precision=\"ieee\")\n            if i % STEPS",
        "            a = x_desc.load([off_m + 1, i * BLOCK_K])\n            b = w_desc.load([off_n, i * BLOCK_K])\n"
        "            acc = tl.dot(a, b.T, acc, input_precision=\"ieee\")\n            if i % STEPS",
    )  # fmt: skip
    res = run(split_linear("batch", TMA_SPLIT), text, "_linear_kernels.py")
    cex = assert_refuted(res, "y:")  # row r reads row r + 1 (zero fill past M when alone)
    assert cex["element_and_programs"]["L.M"] > 1


# --- span-merged attention: spans in sequence, split-KV decode and its ordered merge -------

ATTN = (KDIR / "_attention_kernel.py").read_text()
SPAN_LOOP = (
    "    for span0 in range(0, last + 1, SPAN):\n"
    "        m_s, l_s, acc_s = _attend_span(q, k_ptr, v_ptr, bt_row, span0, pos, lo, last, inner0,\n"
    "                                       inner1, hk, qk_scale, HKV, D, PAGE, BLOCK_M, BLOCK_N,\n"
    "                                       SPAN)  # fmt: skip\n"
    "        m_i, l_i, acc = _merge(m_i, l_i, acc, m_s, l_s, acc_s, (span0 <= pos) & (span0 + SPAN > lo))\n"
)  # fmt: skip
MERGE_READ = (
    "            at = _state_offsets(tok * max_spans + c0 + u, hk, r, HKV, GROUP)\n"
    "            m_s = tl.load("
)
MERGE_TRIP = "    for c0 in tl.range(0, n, UNROLL, num_stages=3):\n"
# the split kernel's store of a span state
STATE_AT = (
    "        at = _state_offsets(tok * max_spans + span, hk, r, HKV, GROUP)\n        _store_state("
)
MERGE_DEF = "def merge_spans_kernel(o_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, max_spans,"


def attention(right: str, text: str, splits_arg: bool = False):
    """The tiny attention goal `bm64-p16 ~ right` on a mutated kernel file; `splits_arg`: the
    mutant merge kernel takes S (the split grid's programs per request) as `splits`."""
    import z3

    from samebits.analysis.kernel_prover import attention as A
    from samebits.analysis.kernel_prover.terms import Lin

    spec = _spec(A.attention_specs("tiny"), f"tiny.attention.bm64-p16~{right}")
    calls = A.calls
    if splits_arg:

        def with_splits(side, spec, sd):
            out = calls(side, spec, sd)
            for c in out:
                if c.kernel == A.MERGE_KERNEL:
                    c.args["splits"] = Lin.var(z3.Int(f"{side}.splits"))
            return out

        A.calls = with_splits
    try:
        return A.prove_attention(
            joined(text, "_attention_kernel.py", ALSO_FILES["attention"]), spec
        )
    finally:
        A.calls = calls


def test_spans_in_reverse_order_are_refuted():
    # spans folded from the last to the first: the span an iteration computes follows the
    # program's last position, which another chunking changes
    text = mutate(ATTN, SPAN_LOOP, SPAN_LOOP.replace(
        "range(0, last + 1, SPAN):\n", "range(0, last + 1, SPAN):\n        rev = last // SPAN * SPAN - span0\n"
    ).replace("bt_row, span0, pos", "bt_row, rev, pos").replace("span0 <= pos", "rev <= pos"))  # fmt: skip
    assert_refuted(attention("bm64-p16", text), "update by an iteration both run",
                   "reads v at different indices")  # fmt: skip


def test_merge_in_reverse_span_order_is_refuted():
    # the split launch's merge folds the stored spans last to first
    text = mutate(ATTN, MERGE_READ, MERGE_READ.replace(
        "tok * max_spans + c0 + u,", "tok * max_spans + tl.max(pos, axis=0) // SPAN - c0 - u,"))  # fmt: skip
    cex = assert_refuted(attention("split-bm16-p32", text), "update by an iteration both run",
                         "integer operands differ")  # fmt: skip
    assert "merge_spans_kernel" in cex["reason"]  # the merge loop against the span loop


def test_merge_trip_in_reverse_order_is_refuted():
    # the merge folds each trip's UNROLL spans last to first (the trips themselves in order)
    text = ATTN.replace("c0 + u", "c0 + UNROLL - 1 - u")
    assert text.count("c0 + UNROLL - 1 - u") == 3  # the span's mask, state row and window
    cex = assert_refuted(attention("split-bm16-p32", text), "update by an iteration both run")
    assert "merge_spans_kernel" in cex["reason"]


def test_merge_trips_skipping_a_span_are_refuted():
    # trips start UNROLL + 1 spans apart: one span in UNROLL + 1 is never folded
    text = mutate(ATTN, MERGE_TRIP, MERGE_TRIP.replace("UNROLL,", "UNROLL + 1,"))
    cex = assert_refuted(attention("split-bm16-p32", text), "update by an iteration both run")
    assert "merge_spans_kernel" in cex["reason"]


def test_merge_trip_of_another_length_than_the_kernels_is_refuted(monkeypatch):
    # the prover told that a trip stands for 2 spans while the kernel folds MERGE_UNROLL
    from samebits.analysis.kernel_prover import attention as A

    post_init = A.AttentionSpec.__post_init__

    def two(self):
        post_init(self)
        self.trips = {k: 2 for k in self.trips}

    monkeypatch.setattr(A.AttentionSpec, "__post_init__", two)
    assert_refuted(attention("split-bm16-p32", ATTN), "update by an iteration both run")


def test_span_boundaries_relative_to_the_chunk_start_are_refuted():
    # spans start at the chunk's first position (mod SPAN) instead of at multiples of SPAN
    text = mutate(ATTN, "    bt_row = bt_ptr + req.to(tl.int64) * bt_stride\n    m_i",
                  "    bt_row = bt_ptr + req.to(tl.int64) * bt_stride\n"
                  "    shift = tl.maximum(tl.load(pos_ptr + tl.load(row0_ptr + pid)), 0) % SPAN\n"
                  "    m_i")  # fmt: skip
    text = mutate(text, "for span0 in range(0, last + 1, SPAN):",
                  "for span0 in range(-shift, last + 1, SPAN):")  # fmt: skip
    # every tile by the masked update (no interior loop, so the tiles stay one progression)
    text = mutate(text, "    a = tl.minimum(tl.maximum(inner0, span0), stop)\n", "    a = stop\n")
    text = mutate(text, "for key0 in range(span0, a, BLOCK_N):",
                  "for key0 in range(tl.maximum(span0, 0), a, BLOCK_N):")  # fmt: skip
    assert_refuted(attention("bm64-p16", text), "update by an iteration both run",
                   "reads v at different indices")  # fmt: skip


def test_merge_row_reading_another_rows_span_states_is_refuted():
    # the merge tile has its own height (`attention_meta.merge_block_m`): its rows must fold
    # their own heads' span states, not a neighbour's
    text = mutate(ATTN, MERGE_READ, MERGE_READ.replace(
        "tok * max_spans + c0 + u, hk, r, HKV", "tok * max_spans + c0 + u, hk, tl.where(live, GROUP - 1 - r, r), HKV"))  # fmt: skip
    cex = assert_refuted(attention("split-bm16-p32", text))
    assert "merge_spans_kernel" in repr(cex)


def test_merge_order_following_the_number_of_programs_is_refuted():
    # the merge folds the spans in reverse when the split launch has more than one program
    # per request
    text = mutate(ATTN, MERGE_DEF, MERGE_DEF.replace("max_spans,", "max_spans, splits,"))
    text = mutate(text, MERGE_READ, MERGE_READ.replace(
        "            at = _state_offsets(tok * max_spans + c0 + u,",
        "            k = tl.where(splits > 1, tl.max(pos, axis=0) // SPAN - c0 - u, c0 + u)\n"
        "            at = _state_offsets(tok * max_spans + k,"))  # fmt: skip
    cex = assert_refuted(attention("split-bm16-p32", text, splits_arg=True),
                         "integer operands differ")  # fmt: skip
    assert cex["element_and_programs"]["R.splits"] > 1


def test_merge_shape_following_the_number_of_programs_is_refuted():
    # with more than one program per request the running state is folded into the span's
    # (the merge's operands swapped): a merge tree whose shape follows S
    text = mutate(ATTN, MERGE_DEF, MERGE_DEF.replace("max_spans,", "max_spans, splits,"))
    text = mutate(text, "            m_i, l_i, acc = _merge(m_i, l_i, acc, m_s, l_s, acc_s, take)\n",
                  "            m1, l1, acc1 = _merge(m_i, l_i, acc, m_s, l_s, acc_s, take)\n"
                  "            m2, l2, acc2 = _merge(m_s, l_s, acc_s, m_i, l_i, acc, take)\n"
                  "            m_i = tl.where(splits > 1, m2, m1)\n"
                  "            l_i = tl.where(splits > 1, l2, l1)\n"
                  "            acc = tl.where(splits > 1, acc2, acc1)\n")  # fmt: skip
    cex = assert_refuted(attention("split-bm16-p32", text, splits_arg=True))
    assert cex["element_and_programs"]["R.splits"] > 1


def test_per_program_partial_merge_is_rejected():
    # flash-decoding style: each of the S programs folds its own spans j, j + S, ... (a tree
    # whose shape is S); the fold of a grid-stride loop is rejected with the reason
    text = mutate(ATTN, "    )  # fmt: skip\n    for span in range(tl.program_id(1),",
                  "    )  # fmt: skip\n"
                  "    m_s = tl.full((BLOCK_M,), float(\"-inf\"), tl.float32)\n"
                  "    l_s = tl.zeros((BLOCK_M,), tl.float32)\n"
                  "    acc_s = tl.zeros((BLOCK_M, D), tl.float32)\n"
                  "    for span in range(tl.program_id(1),")  # fmt: skip
    text = mutate(text, "        m_s, l_s, acc_s = _attend_span(q, k_ptr, v_ptr, bt_row, span * SPAN,",
                  "        m_t, l_t, acc_t = _attend_span(q, k_ptr, v_ptr, bt_row, span * SPAN,")  # fmt: skip
    text = mutate(
        text,
        STATE_AT,
        "        m_s, l_s, acc_s = _merge(m_s, l_s, acc_s, m_t, l_t, acc_t, live)\n" + STATE_AT,
    )
    res = attention("split-bm16-p32", text)
    assert res.status == "rejected-unsupported", res.status
    assert "grid-stride loop carries state" in res.unsupported and "num_programs" in res.unsupported


def test_span_state_not_reset_is_refuted():
    # the sequential kernel continues the previous span's state instead of a fresh one (one
    # online softmax over every key tile, no merge): against split-KV decode, whose spans
    # start fresh, the key-tile loop starts from another state
    text = mutate(ATTN, "def _attend_span(q, k_ptr, v_ptr, bt_row, span0, pos, lo, last, inner0, inner1, hk, qk_scale,\n",
                  "def _attend_span(q, k_ptr, v_ptr, bt_row, span0, pos, lo, last, inner0, inner1, hk, qk_scale, m_s, l_s, acc_s,\n")  # fmt: skip
    init = ("    m_s = tl.full((BLOCK_M,), float(\"-inf\"), tl.float32)\n"
            "    l_s = tl.zeros((BLOCK_M,), tl.float32)\n"
            "    acc_s = tl.zeros((BLOCK_M, D), tl.float32)\n")  # fmt: skip
    text = mutate(text, init + "    stop = tl.minimum(", "    stop = tl.minimum(")
    text = mutate(text, SPAN_LOOP,
                  "    for span0 in range(0, last + 1, SPAN):\n"
                  "        m_i, l_i, acc = _attend_span(q, k_ptr, v_ptr, bt_row, span0, pos, lo, last, inner0,\n"
                  "                                     inner1, hk, qk_scale, m_i, l_i, acc, HKV, D, PAGE, BLOCK_M,\n"
                  "                                     BLOCK_N, SPAN)\n")  # fmt: skip
    text = mutate(text, "        m_s, l_s, acc_s = _attend_span(q, k_ptr, v_ptr, bt_row, span * SPAN, pos, lo, last,\n"
                  "                                       inner0, inner1, hk, qk_scale, HKV,",
                  init.replace("    ", "        ") +
                  "        m_s, l_s, acc_s = _attend_span(q, k_ptr, v_ptr, bt_row, span * SPAN, pos, lo, last,\n"
                  "                                       inner0, inner1, hk, qk_scale, m_s, l_s, acc_s, HKV,")  # fmt: skip
    assert_refuted(attention("split-bm16-p32", text), "before the first iteration",
                   "state:fp32 vs const:fp32")  # fmt: skip


def test_scratch_states_of_two_requests_in_one_row_are_rejected():
    # split and merge index the span states by span only: requests overwrite each other's
    text = mutate(ATTN, STATE_AT, STATE_AT.replace("tok * max_spans + span,", "span,"))
    text = mutate(text, MERGE_READ, MERGE_READ.replace("tok * max_spans + c0 + u,", "c0 + u,"))
    res = attention("split-bm16-p32", text)
    assert res.status == "rejected-unsupported", res.status
    assert "two writers of one element are not excluded" in res.unsupported


def test_split_span_of_another_position_is_refuted():
    # a split program computes the state of another span than the one it stores
    text = mutate(ATTN, "_attend_span(q, k_ptr, v_ptr, bt_row, span * SPAN, pos",
                  "_attend_span(q, k_ptr, v_ptr, bt_row, (span // 2) * SPAN, pos")  # fmt: skip
    assert_refuted(attention("split-bm16-p32", text), "update by an iteration both run",
                   "reads v at different indices")  # fmt: skip


# --- the software exp of the gated activations (data-dependent integers and predicates) ---

SILU_CALL = "    silu = tl.math.div_rn(g, 1.0 + softexp(-g))"
OTHER_ROW_G = (
    "    g2 = tl.load(gu_ptr + (row ^ 1) * (2 * INNER) + cols, mask=mask, other=0.0)"
    ".to(tl.float32)\n"
)


def _silu_batch():
    return _spec(S.row_specs("tiny"), "tiny.silu_mul.batch")


def test_launched_silu_with_softexp_is_proved():
    res = run(_silu_batch(), ROWS, "_row_kernels.py")
    assert res.ok, (res.status, res.unsupported, res.counterexample)


def test_softexp_of_another_rows_element_is_refuted():
    text = mutate(ROWS, SILU_CALL, OTHER_ROW_G + "    silu = tl.math.div_rn(g, 1.0 + softexp(-g2))")
    assert_refuted(run(_silu_batch(), text, "_row_kernels.py"), "right-outside-row")


def test_a_select_whose_condition_reads_another_row_is_refuted():
    # the NaN select of softexp on the neighbour row's value: a data-dependent condition
    text = mutate(
        ROWS, SILU_CALL,
        OTHER_ROW_G + "    silu = tl.math.div_rn(g, 1.0 + tl.where(g2 != g2, g, softexp(-g)))",
    )  # fmt: skip
    cex = assert_refuted(run(_silu_batch(), text, "_row_kernels.py"), "right-outside-row")
    assert "select" in repr(cex) or "fcmp" in repr(cex)


def test_an_exponent_split_following_the_batch_size_is_refuted():
    # softexp's integer k1 = k >> 1 shifted by a batch-dependent amount (the grid's rows)
    text = mutate(
        ROWS, "    k1 = k >> 1\n", "    k1 = k >> tl.minimum(tl.num_programs(0) - 1, 1)\n"
    )
    cex = assert_refuted(run(_silu_batch(), text, "_row_kernels.py"), "integer operands differ")
    assert cex["element_and_programs"].get("L.M", 2) != 1


def test_two_bitwise_equal_formulations_chosen_by_batch_are_refuted():
    """The scaling ``e * 2^k`` by an exponent add (the launched one) or by two multiplies
    (the same bits, by IEEE arithmetic) chosen by M: the prover assumes no identity between
    different operations, so it refuses (sound, not complete)."""
    text = mutate(
        ROWS, "    y = scaled * _pow2(k - k1)\n",
        "    y = tl.where(tl.num_programs(0) > 1, scaled * _pow2(k - k1),"
        " (e * _pow2(k - k1)) * _pow2(k1))\n",
    )  # fmt: skip
    assert_refuted(run(_silu_batch(), text, "_row_kernels.py"), "different operations")

"""Symbolic shapes (issue 28): class certificates whose proofs hold for every N of a linear's
class (`units.linear_n_class`) and every width of a row kernel's BLOCK class
(`units.width_class`), the shape integer symbolic in the proof (`Goal.shape`); and shape
mutants that a proof at one shape cannot see but the symbolic proof refutes."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_mutation import mutate

pytest.importorskip("z3")

from samebits.analysis.kernel_prover import specs as S  # noqa: E402
from samebits.analysis.kernel_prover.prover import prove  # noqa: E402
from samebits.analysis.kernel_prover.symbolic.source import KernelSource  # noqa: E402
from samebits.kernels.triton.certified import units as U  # noqa: E402

KDIR = Path(__file__).resolve().parents[2] / "src" / "samebits" / "kernels" / "triton"
LINEAR = (KDIR / "_linear_kernels.py").read_text()
ROWS = (KDIR / "_row_kernels.py").read_text()
GELU = (KDIR / "_gelu_kernel.py").read_text()


def run(spec, text: str, name: str):
    """Prove ``spec`` against ``text``, joined to the shipped files of ``spec.also_files``
    (GeGLU's kernel imports the row kernels' softexp)."""
    src = KernelSource.parse(text, name).join(
        [KernelSource.parse((KDIR / f).read_text(), f) for f in spec.also_files]
    )
    return prove(src, spec.goal, spec.left, spec.right, spec.m_left)


def _by_name(specs, suffix: str):
    hits = [s for s in specs if s.name.endswith(suffix)]
    assert len(hits) == 1, [s.name for s in specs]
    return hits[0]


def _row_spec(op: str, width: int):
    unit = dict(kind="rows", op=op, **({"inner": width} if op == "silu_mul" else {"width": width}))
    (spec,) = S.symbolic_unit_specs(U.symbolic_unit(unit))
    return spec


def _fixed_row_spec(op: str, width: int):
    dims = dict(hidden=width, inter=width, heads=1, kv_heads=1, head_dim=2, head_norm=True)
    return _by_name(S.row_specs("u", dims), f"u.{op}.batch")


def _linear_class(role: str, n: int, k: int) -> dict:
    """The N class with K fixed (the tests of N symbolic; K classes: `_k_class`)."""
    return U.linear_k_fixed_class(dict(kind="linear", role=role, n=n, k=k, bias=False))


def _k_class(role: str, n: int, k: int) -> dict:
    """The class the gate uses: N and K symbolic (K classes: the k loop folded)."""
    return U.symbolic_unit(dict(kind="linear", role=role, n=n, k=k, bias=False))


# --- the classes -------------------------------------------------------------------------


def test_classes_follow_the_launch_code():
    """A class is the set of shapes the engine launches identically: the row kernels' BLOCK,
    the linear's launch table (narrow / wide / split) with full TMA groups."""
    assert U.width_class(2560) == (4096, 2049, 4096) and U.width_class(4096)[0] == 4096
    assert U.width_class(9728, 1024) == (1024, 513, U.N_MAX)
    a, b = _linear_class("qkv", 6144, 2560), _linear_class("qkv", 5120, 2560)
    assert a == b and (a["lo"], a["hi"]) == (1793, 16383)
    lm = _linear_class("lm_head", 151936, 2560)
    assert lm["out_dtype"] == "fp32" and (lm["lo"], lm["hi"]) == (16384, U.N_MAX)
    assert _linear_class("qkv", 1024, 2560) is None  # a TMA group not full: per shape only
    o = _linear_class("o", 2560, 4096)
    assert o == _linear_class("o", 4096, 4096) and o["role_class"] == "row_parallel"
    assert U.symbolic_specialization(o)["plan"]["splits"] == 4


# --- proofs ------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "width"), [("rms_norm", 48), ("add_rms_norm", 48),
                                           ("silu_mul", 24), ("silu_mul", 3000)])  # fmt: skip
def test_row_width_class_is_proved(op, width):
    spec = _row_spec(op, width)
    assert spec.goal.shape["WIDTH"][0] <= width <= spec.goal.shape["WIDTH"][1]
    res = run(spec, ROWS, "_row_kernels.py")
    assert res.ok, (res.status, res.unsupported, res.counterexample)


def test_linear_n_class_batch_and_launch_equivalence_are_proved():
    """K = 128 column plan, N symbolic in 1793..16383: the M = 16 pointer launch (batch), and
    the pointer launch equal to the grouped TMA launch (cdiv(N, 8 * 256) groups)."""
    specs = S.symbolic_unit_specs(_linear_class("qkv", 4096, 128))
    for suffix in (".batch.ranges-bm16-bn32-w4-s6",
                   ".equiv.ranges-bm16-bn32-w4-s6~tma-bm128-bn256-w8-s4-g8"):  # fmt: skip
        res = run(_by_name(specs, suffix), LINEAR, "_linear_kernels.py")
        assert res.ok, (suffix, res.status, res.unsupported, res.counterexample)


def test_linear_n_class_split_grid_is_proved():
    """S = 4 (down, K = 512): the split-K grid's partials [S, M, N] read back by the flat
    ordered sum, with N symbolic (index ``i`` of ``M * N`` split into row and column)."""
    specs = S.symbolic_unit_specs(_linear_class("down", 4096, 512))
    res = run(_by_name(specs, ".batch.split_grid-bm16-bn32-w4-s4"), LINEAR, "_linear_kernels.py")
    assert res.ok, (res.status, res.unsupported, res.counterexample)


# --- shape mutants -----------------------------------------------------------------------


# the same shape mutant in three kernels: a mask that keeps only full tiles (drops the last
# partial one); each is proved at a shape that is a multiple of the tile, refuted for the class
_PARTIAL_TILE_MUTANTS = {
    "linear-n": (LINEAR, "_linear_kernels.py", "mask = (rm[:, None] < M) & (rn[None, :] < N)",
                 "mask = (rm[:, None] < M) & (rn[None, :] < N // 32 * 32)", "y"),
    "silu": (ROWS, "_row_kernels.py", "    mask = cols < INNER\n    g",
             "    mask = cols < INNER // BLOCK * BLOCK\n    g", "out"),
    "gelu": (GELU, "_gelu_kernel.py", "    mask = cols < INNER\n",
             "    mask = cols < INNER // BLOCK * BLOCK\n", "out"),
}  # fmt: skip


def _partial_tile_specs(which: str):
    """(per-shape spec at a tile multiple, class spec) of a partial-tile mutant."""
    if which == "linear-n":
        name = ".batch.ranges-bm16-bn32-w4-s6"
        fixed = _by_name(S.linear_specs("u", shapes=[("qkv", 4096, 128)]), name)
        return fixed, _by_name(S.symbolic_unit_specs(_linear_class("qkv", 4096, 128)), name)
    if which == "silu":
        return _fixed_row_spec("silu_mul", 2048), _row_spec("silu_mul", 3000)
    (fixed,) = S.gelu_specs("u", 2048)
    (sym,) = S.symbolic_unit_specs(U.symbolic_unit(dict(kind="gelu", op="gelu_mul", inner=3000)))
    return fixed, sym


@pytest.mark.parametrize("which", sorted(_PARTIAL_TILE_MUTANTS))
def test_a_mask_dropping_the_last_partial_tile_is_refuted_for_a_symbolic_shape(which):
    """The store mask keeps only full tiles (BLOCK_N of the linear's N; the column block of
    SiLU / GeGLU): correct at N = 4096 / width 2048 (multiples of every tile: the per-shape
    proof passes), refuted for the class (width 3000: an element of the last block unwritten)."""
    text, name, old, new, out = _PARTIAL_TILE_MUTANTS[which]
    text = mutate(text, old, new)
    fixed, sym = _partial_tile_specs(which)
    assert run(fixed, text, name).ok
    res = run(sym, text, name)
    assert res.status == "refuted", (res.status, res.unsupported)
    assert f"does not write this element of {out}" in res.counterexample["reason"]


def test_a_row_mask_of_the_block_not_the_width_is_rejected_for_symbolic_width():
    """RMSNorm masking by BLOCK instead of WIDTH: correct when the width is the block (the
    per-shape proof at 64 passes), reads the next row for a narrower width of the class."""
    text = mutate(ROWS, "    mask = cols < WIDTH\n    offs", "    mask = cols < BLOCK\n    offs")
    assert run(_fixed_row_spec("rms_norm", 64), text, "_row_kernels.py").ok
    res = run(_row_spec("rms_norm", 64), text, "_row_kernels.py")
    assert not res.ok and res.status in ("refuted", "rejected-unsupported"), res.status
    assert res.counterexample or "stays in its row" in res.unsupported


def test_a_kernel_correct_only_when_k_is_a_multiple_of_128_is_refuted():
    """The pointer chain masks x at the last multiple of 128 below the range end: the same at
    K = 256, a dropped 64-column step at K = 192, where the TMA launch (zero fill, no mask)
    reads it: launch equivalence refutes the mutant."""
    text = mutate(LINEAR, "mask=(rm[:, None] < M) & (kk[None, :] < k_hi)",
                  "mask=(rm[:, None] < M) & (kk[None, :] < k_hi // 128 * 128)")  # fmt: skip
    pair = ".equiv.ranges-bm16-bn32-w4-s6~tma-bm64-bn64-w4-s6"
    ok = _by_name(S.linear_specs("u", shapes=[("qkv", 64, 256)]), pair)
    assert run(ok, text, "_linear_kernels.py").ok
    res = run(_by_name(S.linear_specs("u", shapes=[("qkv", 64, 192)]), pair), text,
              "_linear_kernels.py")  # fmt: skip
    assert res.status == "refuted", (res.status, res.unsupported)


# --- head classes (rope, qkv_rope_store, head_rms_norm: HEADS symbolic) ----------------


def _head_class(op: str, heads: int, d: int = 16, kv: int = 2) -> dict:
    unit = dict(kind="rows", op=op, heads=heads, head_dim=d)
    return U.symbolic_unit({**unit, "kv_heads": kv} if op == "qkv_rope_store" else unit)


def test_head_classes_follow_the_launch_code():
    """rope / qkv_rope_store: heads of one BLOCK_H = next_pow2(heads); head_rms_norm (whose
    kernel never sees the head count): 1..HEADS_MAX; head_dim and kv_heads are in the key."""
    a, b = _head_class("rope", 24, 128), _head_class("rope", 32, 128)
    assert a == b and a["key"] == "rows.rope.h17-32.d128"
    assert _head_class("rope", 8, 128)["key"] == "rows.rope.h5-8.d128"
    q = _head_class("qkv_rope_store", 28, 128, 4)
    assert q["key"] == "rows.qkv_rope_store.h17-32.kv4.d128"
    assert U.symbolic_specialization(q)["block_v"] == 512  # kv * head_dim, fixed
    assert (
        _head_class("head_rms_norm", 16, 256)["key"] == f"rows.head_rms_norm.h1-{U.HEADS_MAX}.d256"
    )
    assert _head_class("rope", U.HEADS_MAX + 1) is None
    # the op-by-op copy of q needs one BLOCK = next_pow2(heads * head_dim) over the class
    assert _head_class("qkv_rope_store", 9, 80, 3) is None
    g = U.symbolic_unit(dict(kind="gelu", op="gelu_mul", inner=15360))
    assert g["key"] == f"gelu.gelu_mul.w513-{U.N_MAX}" and g["kind"] == "gelu"


@pytest.mark.parametrize(("op", "heads"), [("rope", 3), ("head_rms_norm", 2),
                                           ("qkv_rope_store", 3)])  # fmt: skip
def test_head_class_is_proved(op, heads):
    specs = S.symbolic_unit_specs(_head_class(op, heads))
    assert len(specs) == (2 if op == "qkv_rope_store" else 1)
    for spec in specs:
        assert spec.goal.shape["HEADS"][0] <= heads <= spec.goal.shape["HEADS"][1]
        res = run(spec, ROWS, "_row_kernels.py")
        assert res.ok, (spec.name, res.status, res.unsupported, res.counterexample)


def test_gelu_width_class_is_proved():
    (spec,) = S.symbolic_unit_specs(U.symbolic_unit(dict(kind="gelu", op="gelu_mul", inner=3000)))
    res = run(spec, GELU, "_gelu_kernel.py")
    assert res.ok, (res.status, res.unsupported, res.counterexample)


def _fixed_head_spec(op: str, heads: int):
    dims = dict(hidden=64, inter=64, heads=heads, kv_heads=2, head_dim=16, head_norm=False)
    specs = S.row_specs("u", dims)
    return next(s for s in specs if s.name == f"u.{op}.batch")


@pytest.mark.parametrize(("op", "old", "new", "reason"), [
    ("rope", "    _rope_heads(row, row, c, s, h, i, HEADS, HALF)",
     "    _rope_heads(row, row, c, s, h, i, BLOCK_H, HALF)", "(in-place race)"),
    ("qkv_rope_store", "_rope_heads(row + HEADS * 2 * HALF, k_ptr + slot",
     "_rope_heads(row + BLOCK_H * 2 * HALF, k_ptr + slot", "k_cache: reads qkv at different"),
])  # fmt: skip
def test_a_head_count_rounded_up_to_the_block_is_refuted_for_symbolic_heads(op, old, new, reason):
    """BLOCK_H where HEADS belongs (the rotated heads, or where k starts in the qkv row):
    correct when the head count is a power of two (the per-shape proof at 4 heads passes),
    wrong at 3 heads of the class h3-4 (rope: the next token's row; qkv: q's last head read
    as k, the same for every batch: the equivalence with the op-by-op path refutes it)."""
    text = mutate(ROWS, old, new)
    fixed = _fixed_head_spec("rope_q" if op == "rope" else "qkv_rope_store", 4)
    assert run(fixed, text, "_row_kernels.py").ok
    spec = S.symbolic_unit_specs(_head_class(op, 3))[-1]  # qkv: the op-by-op equivalence
    res = run(spec, text, "_row_kernels.py")
    assert res.status == "refuted", (res.status, res.unsupported)
    assert reason in res.counterexample["reason"]


# --- int32 obligations (class proofs: M <= units.M_MAX, shapes in their bounds) ----------


def test_class_proofs_discharge_their_int32_obligations():
    spec = _by_name(S.symbolic_unit_specs(_linear_class("qkv", 4096, 128)),
                    ".batch.ranges-bm16-bn32-w4-s6")  # fmt: skip
    assert spec.goal.int32 == {"M": U.M_MAX} and spec.goal.to_dict()["int32"] == {"M": U.M_MAX}
    res = run(spec, LINEAR, "_linear_kernels.py")
    assert res.ok and min(res.stats["int32_obligations"]) > 0, res.stats


def test_an_int32_store_offset_overflows_at_large_m_times_n():
    """The output offset computed in int32 (no int64 cast): fine at N = 4096 for the per-shape
    proof (which states no int32 bound), refuted for the class (M up to 2^20, N up to 2^14)."""
    text = mutate(LINEAR, "offs = rm.to(tl.int64)[:, None] * N + rn[None, :]",
                  "offs = rm[:, None] * N + rn[None, :]")  # fmt: skip
    fixed = _by_name(
        S.linear_specs("u", shapes=[("qkv", 4096, 128)]), ".batch.ranges-bm16-bn32-w4-s6"
    )
    assert run(fixed, text, "_linear_kernels.py").ok
    sym = _by_name(S.symbolic_unit_specs(_linear_class("qkv", 4096, 128)),
                   ".batch.ranges-bm16-bn32-w4-s6")  # fmt: skip
    res = run(sym, text, "_linear_kernels.py")
    assert res.status == "refuted", (res.status, res.unsupported)
    assert (
        "int32 overflow in the left execution at _linear_kernels.py" in res.counterexample["reason"]
    )


def test_an_int32_row_offset_is_in_range_when_m_times_k_fits():
    """x's row offset in int32: M * K <= 2^20 * 128 fits, so the obligation is proved (the check
    is the range, not a refusal of every int32 product); at K = 4096 it overflows."""
    text = mutate(LINEAR, "x_rows = x_ptr + rm.to(tl.int64)[:, None] * K",
                  "x_rows = x_ptr + rm[:, None] * K")  # fmt: skip
    small = _by_name(S.symbolic_unit_specs(_linear_class("qkv", 4096, 128)),
                     ".batch.ranges-bm16-bn32-w4-s6")  # fmt: skip
    assert run(small, text, "_linear_kernels.py").ok
    large = _by_name(S.symbolic_unit_specs(_linear_class("qkv", 4096, 4096)),
                     ".batch.ranges-bm16-bn32-w4-s6")  # fmt: skip
    res = run(large, text, "_linear_kernels.py")
    assert res.status == "refuted" and "int32 overflow" in res.counterexample["reason"]


# --- K classes (the k loop summarized by induction, `symbolic.folds`) ---------------------


def test_k_classes_follow_the_split_plan():
    """One class per (role class, out dtype, N class, S): K 3072 and 5120 share the S = 1
    column class; o at K 3072 and down at K 14336 the S = 4 row-parallel class; K < 64
    (block_k 32) keeps a K-fixed class. The gate's values of the symbols follow the plan."""
    a, b = _k_class("qkv", 5120, 3072), _k_class("qkv", 6144, 5120)
    assert a == b and a["key"] == "linear.column.bf16.N1793-16383.s1.k64"
    o, down = _k_class("o", 3072, 3072), _k_class("down", 5120, 14336)
    assert o["key"] == down["key"] and o["splits"] == 4
    assert U.class_bounds(o) == {"N": [897, U.N_MAX], "STEPS": [2, U.K_MAX // 256]}
    assert U.shape_values(dict(kind="linear", role="down", n=5120, k=14336), o) == {
        "N": 5120, "STEPS": 56}  # fmt: skip
    assert U.shape_values(dict(kind="linear", role="qkv", n=5120, k=3000), a) == {
        "N": 5120, "STEPS": 47, "PAD": 8}  # fmt: skip
    # K = 3200: S = 2 by the plan, outside the S = 4 class whatever its bounds
    assert U.shape_values(dict(kind="linear", role="down", n=5120, k=3200), o) is None
    assert "x" in _k_class("qkv", 4096, 32)["key"]  # K fixed


@pytest.mark.parametrize(
    ("role", "k", "suffix"),
    [("qkv", 3072, ".batch.ranges-bm16-bn32-w4-s6"),
     ("qkv", 3072, ".equiv.ranges-bm16-bn32-w4-s6~tma-bm64-bn64-w4-s6"),
     ("o", 3072, ".batch.ranges-bm16-bn32-w4-s4"),
     ("o", 3072, ".batch.tma-bm128-bn128-w8-s4-g8")],
)  # fmt: skip
def test_k_class_is_proved(role, k, suffix):
    """K symbolic (S = 1: K = 64 * STEPS - PAD; S = 4: K = 256 * STEPS): the pointer chain and
    the TMA kernel's one loop with its select at range ends (folded in S segments)."""
    spec = _by_name(S.symbolic_unit_specs(_k_class(role, 3072, k)), suffix)
    assert spec.goal.fold and "STEPS" in spec.goal.shape
    res = run(spec, LINEAR, "_linear_kernels.py")
    assert res.ok, (res.status, res.unsupported, res.counterexample)


_EQUIV_S1 = ".equiv.ranges-bm16-bn32-w4-s6~tma-bm64-bn64-w4-s6"
_K_MUTANTS = {
    # correct only when K % 128 == 0 (the per-shape proof at K = 256 passes: test above)
    "k128": ("mask=(rm[:, None] < M) & (kk[None, :] < k_hi)",
             "mask=(rm[:, None] < M) & (kk[None, :] < k_hi // 128 * 128)", _EQUIV_S1,
             "different operations"),
    # the last partial k tile dropped (range end at the last multiple of BLOCK_K)
    "last-k-tile": ("k_hi = tl.minimum(K, k_lo + RANGE_K)",
                    "k_hi = tl.minimum(K // BLOCK_K * BLOCK_K, k_lo + RANGE_K)", _EQUIV_S1,
                    "different operations"),
    # one k step fewer: the folds' iteration sets differ
    "one-step-fewer": ("for k0 in range(0, RANGE_K, BLOCK_K):",
                       "for k0 in range(0, RANGE_K - BLOCK_K, BLOCK_K):", _EQUIV_S1,
                       "different operations"),
    # w's column offset in int32: N * K overflows for large N x K
    "w-offset-int32": ("w_cols = w_ptr + rn.to(tl.int64)[None, :] * K",
                       "w_cols = w_ptr + rn[None, :] * K", ".batch.ranges-bm16-bn32-w4-s6",
                       "int32 overflow in the left execution"),
}  # fmt: skip


@pytest.mark.parametrize("which", sorted(_K_MUTANTS))
def test_k_shape_mutants_are_refuted_for_the_k_class(which):
    old, new, suffix, reason = _K_MUTANTS[which]
    spec = _by_name(S.symbolic_unit_specs(_k_class("qkv", 5120, 3072)), suffix)
    res = run(spec, mutate(LINEAR, old, new), "_linear_kernels.py")
    assert res.status == "refuted", (res.status, res.unsupported)
    assert reason in res.counterexample["reason"], res.counterexample


def test_the_tma_range_sum_in_another_order_is_refuted_for_the_k_class():
    """``acc + total`` at a range end (not ``total + acc``): batch invariant (proved), but
    not the split grid's ordered sum (launch equivalence refuted)."""
    text = mutate(LINEAR, "total = tl.where(i < STEPS, acc, total + acc)",
                  "total = tl.where(i < STEPS, acc, acc + total)")  # fmt: skip
    specs = S.symbolic_unit_specs(_k_class("o", 3072, 3072))
    assert run(_by_name(specs, ".batch.tma-bm128-bn128-w8-s4-g8"), text, "_linear_kernels.py").ok
    res = run(_by_name(specs, ".equiv.split_grid-bm16-bn32-w4-s4~tma-bm128-bn128-w8-s4-g8"),
              text, "_linear_kernels.py")  # fmt: skip
    assert res.status == "refuted", (res.status, res.unsupported)


def test_a_fold_state_read_at_another_lane_is_rejected():
    """The elementwise check of a folded state: the TMA chain accumulating onto its state
    transposed (a square 64 x 64 tile) is not a function of the element's own state: the
    fold refuses it (never a proof over a hole standing for another lane's value)."""
    text = mutate(LINEAR, '            acc = tl.dot(a, b.T, acc, input_precision="ieee")\n'
                  "        total = acc",
                  '            acc = tl.dot(a, b.T, tl.trans(acc), input_precision="ieee")\n'
                  "        total = acc")  # fmt: skip
    spec = _by_name(S.symbolic_unit_specs(_k_class("qkv", 5120, 3072)),
                    ".batch.tma-bm64-bn64-w4-s6")  # fmt: skip
    res = run(spec, text, "_linear_kernels.py")
    assert res.status == "rejected-unsupported", (res.status, res.counterexample)
    assert "not elementwise" in res.unsupported

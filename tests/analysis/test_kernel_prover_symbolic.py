"""Symbolic shapes (issue 28): class certificates whose proofs hold for every N of a linear's
class (`units.linear_n_class`) and every width of a row kernel's BLOCK class
(`units.width_class`), the shape integer symbolic in the proof (`Goal.shape`); and shape
mutants that a proof at one shape cannot see but the symbolic proof refutes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("z3")

from samebits.analysis.kernel_prover import specs as S  # noqa: E402
from samebits.analysis.kernel_prover.prover import prove  # noqa: E402
from samebits.analysis.kernel_prover.symbolic.source import KernelSource  # noqa: E402
from samebits.kernels.triton.certified import units as U  # noqa: E402

KDIR = Path(__file__).resolve().parents[2] / "src" / "samebits" / "kernels" / "triton"
LINEAR = (KDIR / "_linear_kernels.py").read_text()
ROWS = (KDIR / "_row_kernels.py").read_text()


def mutate(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"mutation anchor not found exactly once: {old!r}"
    return text.replace(old, new)


def run(spec, text: str, name: str):
    return prove(KernelSource.parse(text, name), spec.goal, spec.left, spec.right, spec.m_left)


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


def test_a_mask_dropping_the_last_partial_n_tile_is_refuted_for_symbolic_n():
    """The store mask keeps only full BLOCK_N tiles: correct at N = 4096 (a multiple of every
    tile width: the per-shape proof passes), wrong for the class."""
    text = mutate(LINEAR, "mask = (rm[:, None] < M) & (rn[None, :] < N)",
                  "mask = (rm[:, None] < M) & (rn[None, :] < N // 32 * 32)")  # fmt: skip
    fixed = _by_name(
        S.linear_specs("u", shapes=[("qkv", 4096, 128)]), ".batch.ranges-bm16-bn32-w4-s6"
    )
    assert run(fixed, text, "_linear_kernels.py").ok
    sym = _by_name(S.symbolic_unit_specs(_linear_class("qkv", 4096, 128)),
                   ".batch.ranges-bm16-bn32-w4-s6")  # fmt: skip
    res = run(sym, text, "_linear_kernels.py")
    assert res.status == "refuted", (res.status, res.unsupported)
    assert "does not write this element of y" in res.counterexample["reason"]


def test_a_row_mask_of_the_block_not_the_width_is_rejected_for_symbolic_width():
    """RMSNorm masking by BLOCK instead of WIDTH: correct when the width is the block (the
    per-shape proof at 64 passes), reads the next row for a narrower width of the class."""
    text = mutate(ROWS, "    mask = cols < WIDTH\n    offs", "    mask = cols < BLOCK\n    offs")
    assert run(_fixed_row_spec("rms_norm", 64), text, "_row_kernels.py").ok
    res = run(_row_spec("rms_norm", 64), text, "_row_kernels.py")
    assert not res.ok and res.status in ("refuted", "rejected-unsupported"), res.status
    assert res.counterexample or "stays in its row" in res.unsupported


def test_silu_dropping_the_last_partial_column_block_is_refuted():
    text = mutate(ROWS, "    mask = cols < INNER\n", "    mask = cols < INNER // BLOCK * BLOCK\n")
    assert run(_fixed_row_spec("silu_mul", 2048), text, "_row_kernels.py").ok
    res = run(_row_spec("silu_mul", 3000), text, "_row_kernels.py")
    assert res.status == "refuted", (res.status, res.unsupported)
    assert "does not write this element of out" in res.counterexample["reason"]


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

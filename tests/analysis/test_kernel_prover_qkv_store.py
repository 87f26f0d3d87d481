"""The fused qkv split + RoPE + K/V store (`qkv_rope_store_kernel`): its K/V writes go to the
slot loaded from the slot mapping (scatter outputs). Goal 1 (batch invariance, the cache row
of row r's slot compared) and equivalence with the op-by-op path it replaces (split,
rope_kernel of q and k, index_copy_) are proved; planted bugs in copies of the kernel text are
refuted."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_mutation import mutate

pytest.importorskip("z3")

from samebits.analysis.kernel_prover import specs as S  # noqa: E402
from samebits.analysis.kernel_prover.certify import certificate  # noqa: E402
from samebits.analysis.kernel_prover.prover import prove  # noqa: E402
from samebits.analysis.kernel_prover.symbolic.source import KernelSource  # noqa: E402
from samebits.kernels.triton.certified import units as U  # noqa: E402

KDIR = Path(__file__).resolve().parents[2] / "src" / "samebits" / "kernels" / "triton"
ROWS = (KDIR / "_row_kernels.py").read_text()
TINY = (4, 2, 16)  # heads, kv heads, head_dim (the tests' tiny checkpoints)
PADDED = (9, 3, 64)  # SmolLM2-135M: head and v blocks wider than the rows (masks matter)


def specs(shape=TINY) -> dict:
    return {s.name.split(".", 2)[2]: s for s in S.qkv_rope_store_specs("t", *shape)}


def run(spec, text: str = ROWS):
    return prove(KernelSource.parse(text, "_row_kernels.py"), spec.goal, spec.left, spec.right,
                 spec.m_left)  # fmt: skip


def assert_refuted(res, *needles):
    assert res.status == "refuted", (res.status, res.unsupported)
    blob = repr(res.counterexample)
    for n in needles:
        assert n in blob, (n, res.counterexample)
    return res.counterexample


@pytest.mark.parametrize("shape", [TINY, PADDED], ids=lambda s: "h{}.kv{}.d{}".format(*s))
@pytest.mark.parametrize("goal", ["batch", "equiv.per-op"])
def test_fused_qkv_rope_store_is_proved(shape, goal):
    res = run(specs(shape)[goal])
    assert res.status == "proved", (res.unsupported, res.counterexample)
    assert res.stats["compared_store_pairs"] >= 3  # q, and both caches


def test_unit_only_for_models_without_qk_norm():
    d = dict(hidden=64, inter=128, heads=4, kv_heads=2, head_dim=16, vocab=320, bias=False)
    keys = [u["key"] for u in U.units_for({**d, "head_norm": False})]
    assert "rows.qkv_rope_store.h4.kv2.d16" in keys
    assert not [k for k in U.units_for({**d, "head_norm": True}) if "qkv_rope" in k["key"]]
    unit = next(u for u in U.units_for({**d, "head_norm": False})
                if u.get("op") == "qkv_rope_store")  # fmt: skip
    names = [s.name for s in S.unit_specs(unit)]
    assert names == [f"{unit['key']}.batch", f"{unit['key']}.equiv.per-op"]
    spec = U.specialization(unit)
    assert (spec["block_h"], spec["block_kv"], spec["block_d"], spec["block_v"]) == (4, 2, 8, 32)


def test_certificates_name_the_slot_assumption():
    for name, spec in specs().items():
        res = run(spec)
        cert = certificate(spec, res, "_row_kernels.py", "x")
        assert "slot-injective" in cert["assumptions"]
        assert "padding rows" in cert["assumptions"]["slot-injective"]
        assert cert["goal"]["scatter"] == {"k_cache": ["slot", 32], "v_cache": ["slot", 32]}
        assert ("reference-path" in cert["assumptions"]) == (name == "equiv.per-op")
    # kernels without scatter outputs do not name it
    rope = {s.name: s for s in S.row_specs("tiny")}["tiny.rope_q.batch"]
    assert "slot-injective" not in certificate(rope, run(rope), "f", "x")["assumptions"]


# --- mutants ---------------------------------------------------------------------------

K_STORE = "_rope_heads(row + HEADS * 2 * HALF, k_ptr + slot, c, s, hk, i, KV_HEADS, HALF)"
SLOT = "tl.load(slot_ptr + tok).to(tl.int64) * (KV_HEADS * 2 * HALF)"


def _k_at(slot_index: str) -> str:
    other = f"tl.load(slot_ptr + {slot_index}).to(tl.int64) * (KV_HEADS * 2 * HALF)"
    return mutate(ROWS, K_STORE, K_STORE.replace("k_ptr + slot", f"k_ptr + {other}"))


@pytest.mark.parametrize("goal", ["batch", "equiv.per-op"])
def test_k_stored_at_the_slot_of_another_row_is_refuted(goal):
    # slot_ptr[tok ^ 1]: for M odd the last row reads slot[M], no row's slot (and in the M = 1
    # launch a slot outside its row): its store may land in any cache row
    res = run(specs()[goal], _k_at("(tok ^ 1)"))
    assert_refuted(res, "k_cache", "outside the cache row")
    # every row at row 0's slot: two programs write one cache element
    res = run(specs()[goal], _k_at("0"))
    assert_refuted(res, "two programs/lanes of the left execution write the same element")


def test_k_and_v_at_the_slot_of_another_row_is_refuted():
    text = mutate(ROWS, SLOT, SLOT.replace("slot_ptr + tok", "slot_ptr + (tok ^ 1)"))
    for spec in specs().values():
        assert_refuted(run(spec, text), "outside the cache row")


def test_store_into_the_next_cache_row_is_refuted():
    text = mutate(ROWS, K_STORE, K_STORE.replace("k_ptr + slot", "k_ptr + slot + 2 * HALF"))
    cex = assert_refuted(run(specs()["batch"], text), "outside the cache row")
    assert "k_cache" in cex["reason"]


@pytest.mark.parametrize("goal", ["batch", "equiv.per-op"])
def test_rope_at_another_tokens_position_is_refuted(goal):
    anchor = "c, s = _rope_angles(cos_ptr, sin_ptr, pos_ptr, tok, i, HALF)\n    row = qkv_ptr"
    text = mutate(ROWS, anchor, anchor.replace("pos_ptr, tok,", "pos_ptr, tok ^ 1,"))
    assert_refuted(run(specs()[goal], text), "at different indices")


def test_v_copied_from_the_k_part_is_refuted_by_the_per_op_equivalence():
    text = mutate(
        ROWS,
        "v = tl.load(row + (HEADS + KV_HEADS) * 2 * HALF + j",
        "v = tl.load(row + HEADS * 2 * HALF + j",
    )
    # the same for every row in every batch, so batch invariance alone holds: the unit's
    # second goal (the op-by-op path) is what rejects it
    assert run(specs()["batch"], text).status == "proved"
    assert_refuted(run(specs()["equiv.per-op"], text), "v_cache", "reads qkv at different")


def test_k_stored_unrotated_is_refuted_by_the_per_op_equivalence():
    # the op-by-op path must be read in stream order: index_copy_ sees rope_kernel's k
    calls = S.per_op_qkv_calls(*TINY, 1)
    assert [c.kernel for c in calls][3:5] == ["rope_kernel", "index_copy_kernel"]
    spec = specs()["equiv.per-op"]
    reordered = [*spec.right[:3], spec.right[4], spec.right[3], spec.right[5]]
    res = prove(KernelSource.parse(ROWS, "_row_kernels.py"), spec.goal, spec.left, reordered,
                spec.m_left)  # fmt: skip
    assert_refuted(res, "k_cache")

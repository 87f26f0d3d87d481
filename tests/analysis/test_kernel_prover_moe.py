"""The grouped MoE expert kernel (`moe_grouped_kernel`, unit kind "moe"): every row it writes
is proved equal to the certified linear's M = 1 launch on the row's input and its tile's
expert weight, for any routing (symbolic tile table, symbolic number of tiles), at every
grouped launch; planted bugs in copies of `_moe_kernels.py` are refuted (a split or tile
choice that follows the expert's row count, another range boundary per count, the wrong
gather / scatter / expert, a row outside its tile, a race between programs)."""

from __future__ import annotations

import pytest

pytest.importorskip("z3")

from samebits.analysis.kernel_prover.certify import certify_units, prove_spec  # noqa: E402
from samebits.analysis.kernel_prover.moe import grouped_specs  # noqa: E402
from samebits.analysis.kernel_prover.specs import unit_specs  # noqa: E402
from samebits.kernels.triton.certified import gate  # noqa: E402
from samebits.kernels.triton.certified import units as U  # noqa: E402

MOE = U.KERNEL_DIR / "_moe_kernels.py"
SPLIT = ("down", 64, 512)  # S = 4, two 64-steps per range
COLUMN = ("gate_up", 256, 64)  # S = 1


def spec(shape=SPLIT, i: int = 0):
    return grouped_specs("t", *shape)[i]


def run_mutant(sp, tmp_path, old: str, new: str):
    text = MOE.read_text()
    assert text.count(old) == 1, f"mutation anchor not found exactly once: {old!r}"
    path = tmp_path / MOE.name
    path.write_text(text.replace(old, new))
    return prove_spec(sp, path)[0]


def assert_refuted(res, *needles):
    assert res.status == "refuted", (res.status, res.unsupported)
    for n in needles:
        assert n in repr(res.counterexample), (n, res.counterexample)


@pytest.mark.parametrize("shape", [SPLIT, COLUMN])
def test_grouped_rows_are_proved_at_every_grouped_launch(shape):
    for sp in grouped_specs("t", *shape):
        res = prove_spec(sp)[0]
        assert res.status == "proved", (sp.name, res.unsupported, res.counterexample)
        assert res.stats["compared_store_pairs"] >= 1


def test_split_choice_by_rows_of_the_expert_is_refuted(tmp_path):
    """A 'fast path' for loaded experts: one chain over all of K (no split ranges) when the
    tile holds more than 4 rows: the rows' bits then follow the expert's row count."""
    old = "    for s in tl.static_range(1, SPLITS):\n"
    new = ("    if hi - lo > 4:\n"
           "        total = _grouped_chain(x_ptr, w_e, xr, live, rn, N, K, 0, SPLITS * RANGE_K,\n"
           "                               BLOCK_M, BLOCK_N, BLOCK_K)\n"
           "    for s in tl.static_range(1, SPLITS * (hi - lo <= 4)):\n")  # fmt: skip
    res = run_mutant(spec(), tmp_path, old, new)
    assert res.status in ("refuted", "rejected-unsupported"), res.status
    if res.status == "rejected-unsupported":  # a runtime bound in static_range: not modelled
        pytest.fail(res.unsupported)


def test_tile_config_by_rows_of_the_expert_is_refuted(tmp_path):
    """Range boundaries that move by one k-step when the tile holds more than 8 rows."""
    old = "    k_hi = tl.minimum(K, k_lo + RANGE_K)\n"
    new = "    k_hi = tl.minimum(K, k_lo + RANGE_K - BLOCK_K * (hi - lo > 8))\n"
    text = (
        MOE.read_text()
        .replace(
            "def _grouped_chain(x_ptr, w_ptr, xr, live, rn, N, K, k_lo,",
            "def _grouped_chain(x_ptr, w_ptr, xr, live, rn, N, K, k_lo, lo, hi,",
        )
        .replace("live, rn, N, K, 0, RANGE_K,", "live, rn, N, K, 0, lo, hi, RANGE_K,")
        .replace(
            "live, rn, N, K, s * RANGE_K, RANGE_K,", "live, rn, N, K, s * RANGE_K, lo, hi, RANGE_K,"
        )
    )
    path = tmp_path / MOE.name
    assert text.count(old) == 1
    path.write_text(text.replace(old, new))
    assert_refuted(prove_spec(spec(), path)[0])


def test_split_ranges_by_rows_of_the_expert_are_refuted(tmp_path):
    """Split-K with another range per expert count: range s starts at s * RANGE_K shifted by
    one k-step for an odd number of rows in the tile."""
    old = "for s in tl.static_range(1, SPLITS):\n        total = total + _grouped_chain(x_ptr, w_e, xr, live, rn, N, K, s * RANGE_K,"
    new = ("shift = ((hi - lo) % 2) * BLOCK_K\n    for s in tl.static_range(1, SPLITS):\n"
           "        total = total + _grouped_chain(x_ptr, w_e, xr, live, rn, N, K, "
           "s * RANGE_K - shift,")  # fmt: skip
    res = run_mutant(spec(), tmp_path, old, new)
    assert_refuted(res, "reads")


def test_gather_from_the_output_map_is_refuted(tmp_path):
    res = run_mutant(
        spec(COLUMN), tmp_path, "xr = tl.load(x_rows_ptr + i,", "xr = tl.load(y_rows_ptr + i,"
    )
    assert_refuted(res, "reads x at different indices")


def test_expert_of_another_tile_is_refuted(tmp_path):
    res = run_mutant(
        spec(COLUMN),
        tmp_path,
        "e = tl.load(tile_expert_ptr + t)",
        "e = tl.load(tile_expert_ptr + t + 1)",
    )
    assert_refuted(res, "reads w at different indices")


def test_rows_past_the_tile_end_are_refuted(tmp_path):
    """One row past the tile end: it is the next tile's first row (a race), or no tile's."""
    res = run_mutant(spec(COLUMN), tmp_path, "    live = i < hi\n", "    live = i < hi + 1\n")
    assert res.status == "refuted", (res.status, res.unsupported)
    reason = res.counterexample["reason"]
    assert "write the same element of y" in reason or "outside its program's tile" in reason


def test_store_at_the_sorted_row_is_refuted(tmp_path):
    """Storing at the sorted position instead of y_rows[i] (the output would be in expert
    order, not the caller's pair order)."""
    res = run_mutant(
        spec(COLUMN),
        tmp_path,
        "offs = yr.to(tl.int64)[:, None] * N",
        "offs = i.to(tl.int64)[:, None] * N",
    )
    assert_refuted(res, "not y_rows[row]")


def test_programs_racing_on_one_row_are_refuted(tmp_path):
    """Every tile writing the rows of tile 0 (a scatter that ignores the tile's own rows)."""
    res = run_mutant(spec(COLUMN), tmp_path, "    i = lo + tl.arange(0, BLOCK_M)\n",
                     "    i = tl.load(tile_lo_ptr + 0) + tl.arange(0, BLOCK_M)\n")  # fmt: skip
    assert res.status == "refuted", (res.status, res.unsupported)


def test_moe_units_of_the_30b_shape_name_the_grouped_kernel():
    from samebits.model.presets import PRESETS

    units = [u for u in U.units_for(U.dims_of(PRESETS["qwen3-30b-a3b"])) if u["kind"] == "moe"]
    assert sorted(u["key"] for u in units) == ["moe.grouped.down.2048x768",
                                               "moe.grouped.gate_up.1536x2048"]  # fmt: skip
    spec_ = U.specialization(units[0])
    assert spec_["launches"] and spec_["reference_launch"].startswith(("ranges", "split_grid"))
    assert all(sp.name.startswith("moe.") for sp in unit_specs(units[0]))


def test_grouped_unit_certificate_gates_and_goes_stale(tmp_path):
    """A certified grouped unit passes the gate; the record goes stale when the linear kernels
    it was proved against change, or when the grouped launches do."""
    import json

    unit = dict(key="moe.grouped.gate_up.256x64", kind="moe", op="grouped", role="gate_up",
                n=256, k=64)  # fmt: skip
    (record,) = certify_units([unit], tmp_path)
    assert record["proved"] and "tile-table" in record["assumptions"]
    assert set(record[U.ALSO_RECORD]) == {"_linear_kernels.py"}
    path = tmp_path / f"{unit['key']}.json"
    assert gate.check_unit(unit, tmp_path)[0] is None
    text = path.read_text()
    for change, needle in ((lambda r: r[U.ALSO_RECORD].update({"_linear_kernels.py": "0"}),
                            "_linear_kernels.py changed"),
                           (lambda r: r["specialization"]["launches"].pop(), "launches")):  # fmt: skip
        rec = json.loads(text)
        change(rec)
        path.write_text(json.dumps(rec))
        problem = gate.check_unit(unit, tmp_path)[0]
        assert problem is not None and needle in problem, problem


# --- the combine kernel -----------------------------------------------------------------
def combine(goal: str, top_k: int = 4, hidden: int = 64):
    from samebits.analysis.kernel_prover.moe import combine_specs

    return {s.name.split(".")[-1]: s for s in combine_specs("t", top_k, hidden)}[goal]


@pytest.mark.parametrize("top_k, hidden", [(4, 64), (8, 2048), (1, 48)])
def test_combine_is_proved_batch_invariant_and_equal_to_the_torch_ops(top_k, hidden):
    for goal in ("batch", "equiv~torch-ops"):
        res = prove_spec(combine(goal, top_k, hidden))[0]
        assert res.status == "proved", (goal, res.unsupported, res.counterexample)


COMBINE_MUTANTS = {
    # ascending routing-score order: the weights come largest first, so from the last rank
    "score_ascending": (
        "    acc = tl.load(o_ptr + t * TOP_K * H + c,",
        "    acc = tl.load(o_ptr + (t * TOP_K + TOP_K - 1) * H + c,",
    ),
    "fma": ("        acc = acc + o * tl.load(w_ptr + t * TOP_K + r)\n",
            "        acc = tl.fma(o, tl.load(w_ptr + t * TOP_K + r), acc)\n"),
    "added_on_the_left": ("        acc = acc + o * tl.load(w_ptr + t * TOP_K + r)\n",
                          "        acc = o * tl.load(w_ptr + t * TOP_K + r) + acc\n"),
    # (dropping the `.to(tl.float32)` of o is no mutant: bf16 * fp32 promotes to fp32)
    "product_rounded_to_bf16": ("        acc = acc + o * tl.load(w_ptr + t * TOP_K + r)\n",
        "        acc = acc + (o * tl.load(w_ptr + t * TOP_K + r)).to(y_ptr.dtype.element_ty)\n"),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(COMBINE_MUTANTS))
def test_combine_mutants_are_refuted_against_the_torch_ops(name, tmp_path):
    old, new = COMBINE_MUTANTS[name]
    res = run_mutant(combine("equiv~torch-ops"), tmp_path, old, new)
    assert res.status == "refuted", (res.status, res.unsupported)


def test_combine_with_another_tokens_weight_is_refuted(tmp_path):
    old = "        acc = acc + o * tl.load(w_ptr + t * TOP_K + r)\n"
    new = "        acc = acc + o * tl.load(w_ptr + r)\n"
    assert_refuted(run_mutant(combine("batch"), tmp_path, old, new), "w")

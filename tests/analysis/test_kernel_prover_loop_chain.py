"""Loop chains in the attention prover: consecutive loops over one key progression, carrying
the same state, summarized as one fold whose update at a key tile is the body of the loop that
runs it. The case: `benchmarks/prefill_probe.py`'s interior-tile prefill (the span's tiles in
three loops: masked, unmasked interior tiles, masked), whose split points follow the program's
rows, so one tile is interior in one chunking and masked in another. The prover must prove it
chunk, tile-height and page-layout invariant, and refute planted bugs in it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("z3")

from samebits.analysis.kernel_prover import attention as A  # noqa: E402
from samebits.analysis.kernel_prover.certify import joined  # noqa: E402
from samebits.kernels.triton.certified.units import ALSO_FILES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ATTN = (ROOT / "src/samebits/kernels/triton/_attention_kernel.py").read_text()
PROBE = (ROOT / "benchmarks/prefill_probe.py").read_text()
PAGED = '@triton.jit(do_not_specialize=["bt_stride", "window"])\ndef paged_attention_kernel('


def _probe_def(name: str) -> str:
    """The source of one `@triton.jit` function of the probe."""
    at = PROBE.index(f"def {name}(")
    return PROBE[PROBE.rfind("@triton.jit", 0, at) : PROBE.index("\n\n\n", at)]


def interior_kernel_file() -> str:
    """`_attention_kernel.py` with `paged_attention_kernel` replaced by the probe's variant."""
    start = ATTN.index(PAGED)
    end = ATTN.index("\n\n\n", start)
    kernel = _probe_def("interior_prefill_kernel").replace(
        "def interior_prefill_kernel(", "def paged_attention_kernel("
    )
    parts = [_probe_def("_attend_tile_interior"), _probe_def("_attend_span_interior"), kernel]
    return ATTN[:start] + "\n\n\n".join(parts) + ATTN[end:]


def prove(text: str, right: str):
    specs = {s.name: s for s in A.attention_specs("tiny")}
    spec = specs[f"tiny.attention.bm64-p16~{right}"]
    return A.prove_attention(joined(text, "_attention_kernel.py", ALSO_FILES["attention"]), spec)


def mutate(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"mutation anchor not found exactly once: {old!r}"
    return text.replace(old, new)


@pytest.mark.parametrize("right", ["bm16-p16", "bm64-p32"])
def test_interior_tiles_are_proved_invariant(right):
    res = prove(interior_kernel_file(), right)
    assert res.status == "proved", (res.status, res.unsupported, res.counterexample)


SPLIT_SPAN = """    d = tl.arange(0, D)
    for span in range(tl.program_id(1), last // SPAN + 1, tl.num_programs(1)):
        m_s, l_s, acc_s = _attend_span(q, k_ptr, v_ptr, bt_row, span * SPAN, pos, lo, last, hk,
"""
SPLIT_INTERIOR = """    d = tl.arange(0, D)
    first = tl.maximum(tl.min(tl.where(live, pos, last), axis=0), 0)
    inner0 = (tl.max(tl.where(live, lo, 0), axis=0) + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    inner1 = (first + 1) // BLOCK_N * BLOCK_N
    for span in range(tl.program_id(1), last // SPAN + 1, tl.num_programs(1)):
        m_s, l_s, acc_s = _attend_span_interior(q, k_ptr, v_ptr, bt_row, span * SPAN, pos, lo,
                                                last, inner0, inner1, hk,
"""


@pytest.mark.parametrize("right", ["split-bm16-p16", "split-bm16-p32"])
def test_split_kv_decode_with_interior_spans_is_proved(right):
    # the form a shipped change would take: both launches run the interior-tile span (goal 4)
    res = prove(mutate(interior_kernel_file(), SPLIT_SPAN, SPLIT_INTERIOR), right)
    assert res.status == "proved", (res.status, res.unsupported, res.counterexample)


INNER1 = "    inner1 = (first + 1) // BLOCK_N * BLOCK_N"
MUTANTS = {
    # the interior tiles run one tile past the program's first position
    "interior one tile late": (INNER1, INNER1.replace("(first + 1)", "(first + 1 + BLOCK_N)")),
    # the interior update forgets to rescale the running sum
    "no rescale in the interior update": (
        'acc = tl.dot(p, v, acc * alpha[:, None], input_precision="ieee")\n    return m_new',
        'acc = tl.dot(p, v, acc, input_precision="ieee")\n    return m_new',
    ),
    # the interior bound from the program's last row, not its first
    "interior bound from the last row": (
        "    first = tl.maximum(tl.min(tl.where(live, pos, last), axis=0), 0)",
        "    first = tl.maximum(tl.max(tl.where(live, pos, last), axis=0), 0)",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_interior_tile_mutants_are_refuted(name):
    text = mutate(interior_kernel_file(), *MUTANTS[name])
    res = prove(text, "bm16-p16")
    assert res.status == "refuted", (res.status, res.unsupported)
    assert "_attend_span_interior" in res.counterexample["reason"]


def test_tiles_run_twice_are_not_proved():
    # the last loop restarts at the interior loop's start: tiles a..b run twice
    text = mutate(interior_kernel_file(), "    for key0 in range(b, stop, BLOCK_N):",
                  "    for key0 in range(a, stop, BLOCK_N):")  # fmt: skip
    res = prove(text, "bm16-p16")
    assert res.status in ("refuted", "rejected-unsupported"), res.status

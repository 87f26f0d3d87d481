"""Loop chains in the attention prover: consecutive loops over one key progression, carrying
the same state, summarized as one fold whose update at a key tile is the body of the loop that
runs it. The case: the shipped kernel's span (`_attention_kernel._attend_span`: its tiles in
three loops, masked, unmasked interior tiles, masked), whose split points follow the program's
rows, so one tile is interior in one chunking and masked in another. The prover must prove it
chunk, tile-height and page-layout invariant and split-KV equivalent, and refute planted bugs
in it."""

from __future__ import annotations

from pathlib import Path

import pytest
from kernel_mutation import mutate

pytest.importorskip("z3")

from samebits.analysis.kernel_prover import attention as A  # noqa: E402
from samebits.analysis.kernel_prover.certify import joined  # noqa: E402
from samebits.kernels.triton.certified.units import ALSO_FILES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ATTN = (ROOT / "src/samebits/kernels/triton/_attention_kernel.py").read_text()


def prove(text: str, right: str):
    specs = {s.name: s for s in A.attention_specs("tiny")}
    spec = specs[f"tiny.attention.bm64-p16~{right}"]
    return A.prove_attention(joined(text, "_attention_kernel.py", ALSO_FILES["attention"]), spec)


@pytest.mark.parametrize("right", ["bm16-p16", "bm64-p32"])
def test_interior_tiles_are_proved_invariant(right):
    res = prove(ATTN, right)
    assert res.status == "proved", (res.status, res.unsupported, res.counterexample)


@pytest.mark.parametrize("right", ["split-bm16-p16", "split-bm16-p32"])
def test_split_kv_decode_with_interior_spans_is_proved(right):
    # both launches run the interior-tile span (goal 4)
    res = prove(ATTN, right)
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
    text = mutate(ATTN, *MUTANTS[name])
    res = prove(text, "bm16-p16")
    assert res.status == "refuted", (res.status, res.unsupported)
    assert "_attend_span" in res.counterexample["reason"]


def test_tiles_run_twice_are_not_proved():
    # the last loop restarts at the interior loop's start: tiles a..b run twice
    text = mutate(ATTN, "    for key0 in range(b, stop, BLOCK_N):",
                  "    for key0 in range(a, stop, BLOCK_N):")  # fmt: skip
    res = prove(text, "bm16-p16")
    assert res.status in ("refuted", "rejected-unsupported"), res.status

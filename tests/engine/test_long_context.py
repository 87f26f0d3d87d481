"""Long contexts in the engine core (torch-free, the scheduler and KV-cache manager alone):

- a 128k-token request on an 8B-shaped model fits the KV cache an H200 gives it (the sizing
  rule of `assembly.num_kv_blocks`, computed), and is admitted uncapped;
- chunked prefill of a 128k prompt with the GPU's default budget (8192 tokens a step);
- preemption of a long sequence mid-prefill (prefix caching: the recompute starts at its
  cached blocks) and mid-decode (no prefix caching: recomputed from 0, outputs kept);
- prefix-cache hits midway through a 100k prompt: ending mid-block (the divergence inside a
  block), a prompt ending mid-block, and never covering the last token;
- a prompt the KV cache can never hold is refused at `add_request` (not queued to hang).
"""

from __future__ import annotations

import dataclasses
import sys
from types import SimpleNamespace

import pytest

from samebits.config import (
    SCHEDULER_DEFAULTS,
    CacheConfig,
    EngineConfig,
    SchedulerConfig,
    kv_blocks_for_memory,
)
from samebits.engine.assembly import num_kv_blocks
from samebits.engine.kv_cache_manager import cdiv
from samebits.engine.request import Request, RequestStatus
from samebits.engine.scheduler import Scheduler, SchedulerOutput
from samebits.model.config import ModelConfig, YarnRopeScaling
from samebits.model.presets import PRESETS

BLOCK = 16
LONG = 131072  # 128k tokens
SEQS, BUDGET = SCHEDULER_DEFAULTS["cuda"]  # 256 sequences, 8192 tokens a step
H200_BYTES = int(139.8 * 2**30)  # what torch reports as an H200's total memory
QWEN3_8B_YARN = dataclasses.replace(
    PRESETS["qwen3-8b"], rope_scaling=YarnRopeScaling("yarn", 4.0, 32768)
)


def _tokens(n: int, seed: int) -> list[int]:
    """`n` deterministic token ids (no two seeds share a position's id)."""
    return [(i * 7919 + seed * 104729) % 151936 for i in range(n)]


def _scheduler(num_kv_blocks: int, **overrides) -> Scheduler:
    args = dict(
        max_num_seqs=SEQS,
        max_num_batched_tokens=BUDGET,
        max_model_len=LONG,
        block_size=BLOCK,
        num_kv_blocks=num_kv_blocks,
    )
    args.update(overrides)
    return Scheduler(**args)


def _step(scheduler: Scheduler, check: bool = True) -> SchedulerOutput:
    """One step; each request's token is 1000 + its output count (outputs differ)."""
    out = scheduler.schedule()
    for item in out.scheduled:
        end = item.start_position + len(item.token_ids)
        assert end <= len(item.block_table) * BLOCK < end + BLOCK  # tables cover, minimally
    sampled = {
        s.request_id: 1000 + scheduler.requests[s.request_id].num_output_tokens
        for s in out.scheduled
        if s.sample
    }
    scheduler.update_from_output(out, sampled)
    if check:
        scheduler.check_integrity()
    return out


def _run(scheduler: Scheduler, check: bool = True) -> list[SchedulerOutput]:
    outs = []
    while scheduler.has_unfinished_requests():
        outs.append(_step(scheduler, check))
        assert len(outs) < 10_000, "the scheduler made no progress"
    return outs


def _chunks(outs: list[SchedulerOutput], rid: str) -> list[tuple[int, int, bool]]:
    """(start, length, sample) of each chunk of request `rid`, in step order."""
    return [
        (s.start_position, len(s.token_ids), s.sample)
        for out in outs
        for s in out.scheduled
        if s.request_id == rid
    ]


def _weight_bytes(cfg: ModelConfig, elem: int = 2) -> int:
    """Bytes of the model's weights in bfloat16 (embedding, untied head, layers, norms)."""
    layer = cfg.hidden_size * (cfg.q_size + 2 * cfg.kv_size) + cfg.q_size * cfg.hidden_size
    layer += 3 * cfg.hidden_size * cfg.intermediate_size + 2 * cfg.hidden_size
    embed = cfg.vocab_size * cfg.hidden_size * (1 if cfg.tie_word_embeddings else 2)
    return elem * (embed + cfg.num_hidden_layers * layer + cfg.hidden_size)


def _kv_block_bytes(cfg: ModelConfig, elem: int = 2) -> int:
    """`runner.kv_bytes_per_block` for a bfloat16 cache: K and V of every layer."""
    return 2 * cfg.num_hidden_layers * BLOCK * cfg.num_key_value_heads * cfg.head_dim * elem


# ---------------------------------------------------------------- KV-cache sizing at 128k


@pytest.mark.parametrize("model", ["llama-3-8b", "qwen3-8b-yarn"])
def test_a_128k_request_on_an_8b_model_fits_an_h200(model, monkeypatch):
    """The GPU's KV cache at the defaults (0.9 utilization, 256 sequences): memory decides,
    and it holds several 128k sequences (llama-3-8b: ~56k blocks, ~6.9 sequences)."""
    cfg = QWEN3_8B_YARN if model == "qwen3-8b-yarn" else PRESETS[model]
    assert cfg.max_context_len == LONG
    in_use = _weight_bytes(cfg) + 3 * 2**30  # + CUDA context, RoPE tables, workspace
    fits = kv_blocks_for_memory(H200_BYTES, H200_BYTES - in_use, 0.9, _kv_block_bytes(cfg))
    runner = SimpleNamespace(kv_blocks_for_device=lambda model, block_size, utilization: fits)
    monkeypatch.setitem(sys.modules, "samebits.engine.runner", runner)  # no torch, no GPU
    deployment = SimpleNamespace(
        plan=SimpleNamespace(device="cuda"), max_model_len=LONG, model=None
    )
    config = EngineConfig.from_kwargs(device="cuda", max_model_len=LONG)
    blocks = num_kv_blocks(deployment, config)
    assert blocks == fits < 4 * SEQS * LONG // BLOCK  # memory, not the sequence-slot cap
    assert blocks * BLOCK >= 5 * LONG
    cache = CacheConfig(BLOCK, blocks)
    scheduler = Scheduler.from_configs(cache, SchedulerConfig(SEQS, BUDGET, LONG))
    request = Request("long", _tokens(LONG - 1, 1), max_tokens=1)
    scheduler.add_request(request)
    assert request.max_model_len == LONG  # not capped by the cache
    outs = _run(scheduler, check=False)
    scheduler.check_integrity()
    assert len(outs) == cdiv(LONG - 1, BUDGET)
    assert request.finish_reason == "length" and request.num_tokens == LONG


# ---------------------------------------------------------------- chunked prefill


def test_chunked_prefill_of_a_128k_prompt_with_the_default_budget():
    """A cache of exactly one 128k sequence: 16 chunks of <= 8192 tokens, then decode to
    the context's end; every full block is cached; all blocks free at the end."""
    scheduler = _scheduler(num_kv_blocks=LONG // BLOCK)
    prompt = _tokens(LONG - 8, 1)
    request = Request("long", prompt, max_tokens=100)
    scheduler.add_request(request)
    assert request.max_model_len == LONG
    outs = [_step(scheduler) for _ in range(16)]
    last = len(prompt) - 15 * BUDGET
    assert _chunks(outs, "long") == [(i * BUDGET, BUDGET, False) for i in range(15)] + [
        (15 * BUDGET, last, True)
    ]
    for i, out in enumerate(outs):
        assert list(out.scheduled[0].token_ids) == prompt[i * BUDGET : (i + 1) * BUDGET]
        assert out.num_batched_tokens == len(out.scheduled[0].token_ids)
    assert len(scheduler.kv_cache_manager.get_block_ids("long")) == LONG // BLOCK
    outs = _run(scheduler)
    assert _chunks(outs, "long") == [(len(prompt) + i, 1, True) for i in range(7)]
    assert request.num_tokens == LONG and request.finish_reason == "length"
    assert request.output_token_ids == [1000 + i for i in range(8)]
    pool = scheduler.kv_cache_manager.block_pool
    assert pool.num_free_blocks == pool.num_blocks
    assert len(pool.cached_block_hash_to_block) == LONG // BLOCK - 1  # last token: no K/V


# ---------------------------------------------------------------- preemption


def test_long_prefill_preempted_then_recomputed_from_its_cached_blocks():
    """Two long prompts that do not fit together: the newer (40k) is preempted mid-prefill,
    waits (strict FCFS) while the older decodes, then resumes at its cached full blocks."""
    scheduler = _scheduler(num_kv_blocks=6000)
    a = Request("a", _tokens(65536, 1), max_tokens=40)
    b = Request("b", _tokens(40000, 2), max_tokens=4)
    scheduler.add_request(a)
    scheduler.add_request(b)
    outs, b_blocks, computed = [], (), 0
    while not scheduler.num_preemptions:
        b_blocks = scheduler.kv_cache_manager.get_block_ids("b")
        computed = b.num_computed_tokens
        outs.append(_step(scheduler))
    assert outs[-1].preempted == ("b",) and "b" not in [s.request_id for s in outs[-1].scheduled]
    assert b.status is RequestStatus.PREEMPTED and b.num_output_tokens == 0
    assert 0 < computed < 40000
    outs += _run(scheduler)
    assert scheduler.num_preemptions == 1 and a.num_output_tokens == 40
    resumed = computed // BLOCK * BLOCK  # the full blocks computed before the preemption
    b_chunks = _chunks(outs, "b")
    first_resumed = next(i for i, c in enumerate(b_chunks) if c[0] == resumed)
    assert b_chunks[first_resumed - 1][0] + b_chunks[first_resumed - 1][1] == computed
    assert sum(n for start, n, _ in b_chunks[first_resumed:] if start < 40000) == 40000 - resumed
    b_items = [s for out in outs for s in out.scheduled if s.request_id == "b"]
    readmit = next(s for s in b_items if s.start_position == resumed)
    assert readmit.block_table[: resumed // BLOCK] == b_blocks[: resumed // BLOCK]
    assert scheduler.prefix_cache_hits == resumed
    assert b.output_token_ids == [1000, 1001, 1002, 1003] and b.finish_reason == "length"


def test_long_decode_preempted_then_recomputed_from_zero_without_prefix_caching():
    """A 64k sequence preempted while decoding (an older request needs a block): without
    prefix caching it is recomputed from position 0, its outputs included, and goes on.
    Admission asks blocks for one chunk only, so while the older request runs the
    recompute can be preempted again (the newest goes first); the older one progresses
    every step, so both finish."""
    scheduler = _scheduler(num_kv_blocks=4070, enable_prefix_caching=False)
    a = Request("a", _tokens(1000, 1), max_tokens=100)
    b = Request("b", _tokens(64000, 2), max_tokens=60)
    scheduler.add_request(a)
    scheduler.add_request(b)
    outs = []
    while not scheduler.num_preemptions:
        outs.append(_step(scheduler))
    assert outs[-1].preempted == ("b",)
    kept = list(b.output_token_ids)
    assert b.num_computed_tokens == 0 and 0 < len(kept) < 60  # preempted mid-decode
    rest = _run(scheduler)
    assert {rid for out in rest for rid in out.preempted} <= {"b"}
    chunks = _chunks(rest, "b")
    restarts = [i for i, (start, _, _) in enumerate(chunks) if start == 0]
    assert len(restarts) == scheduler.num_preemptions  # each preemption: from position 0
    for (start, n, _), (after, _, _) in zip(chunks, chunks[1:], strict=False):
        assert after in (start + n, 0)  # contiguous chunks, or a restart
    final = chunks[restarts[-1] :]
    recomputed = final[: next(i for i, c in enumerate(final) if c[2]) + 1]
    assert all(n in (BUDGET - 1, BUDGET) for _, n, _ in recomputed[:-1])  # a's token: 1
    end = recomputed[-1][0] + recomputed[-1][1]
    assert end >= 64000 + len(kept)  # the kept outputs' K/V recomputed too
    last_restart = next(
        out
        for out in rest[::-1]
        for s in out.scheduled
        if s.request_id == "b" and s.start_position == 0
    )
    tokens = [
        t
        for out in rest[rest.index(last_restart) :]
        for s in out.scheduled
        if s.request_id == "b" and s.start_position < end
        for t in s.token_ids
    ]
    assert tokens == list(b.all_token_ids[:end])
    assert b.output_token_ids[: len(kept)] == kept and b.num_output_tokens == 60
    assert a.num_output_tokens == 100 and scheduler.prefix_cache_hits == 0


# ---------------------------------------------------------------- prefix hits


def test_prefix_hits_midway_through_a_100k_prompt():
    """After a 100k prompt is computed: a prompt diverging inside block 3125 hits 3125
    blocks (50000 tokens); a prompt that is a prefix ending mid-block hits its full blocks;
    a prefix of whole blocks leaves its last block to compute (the last token's logits)."""
    scheduler = _scheduler(num_kv_blocks=LONG // BLOCK)
    prompt = _tokens(100_000, 1)
    first = Request("first", prompt, max_tokens=1)
    scheduler.add_request(first)
    _run(scheduler)
    pool = scheduler.kv_cache_manager.block_pool
    cached = tuple(pool.get_cached_block(h).block_id for h in first.block_hashes)
    assert len(cached) == len(pool.cached_block_hash_to_block) == 100_000 // BLOCK
    tail = _tokens(9993, 2)
    assert tail[0] != prompt[50_007]
    cases = {  # request: (prompt, tokens the hit covers)
        "diverges": (prompt[:50_007] + tail, 50_000),
        "prefix-mid-block": (prompt[:70_005], 70_000),
        "prefix-whole-blocks": (prompt[:80_000], 80_000 - BLOCK),
    }
    for rid, (ids, hit) in cases.items():
        hits_before = scheduler.prefix_cache_hits
        scheduler.add_request(Request(rid, ids, max_tokens=2))
        (item,) = _step(scheduler).scheduled
        assert item.start_position == hit
        assert list(item.token_ids) == ids[hit : hit + BUDGET]
        assert item.block_table[: hit // BLOCK] == cached[: hit // BLOCK]  # shared blocks
        assert scheduler.prefix_cache_hits - hits_before == hit
        outs = _run(scheduler)
        computed = hit + len(item.token_ids)
        computed += sum(n for start, n, _ in _chunks(outs, rid) if start < len(ids))
        assert computed == len(ids)
    assert pool.num_free_blocks == pool.num_blocks


# ---------------------------------------------------------------- refusal


def test_a_prompt_the_kv_cache_can_never_hold_is_refused_at_add_request():
    scheduler = _scheduler(num_kv_blocks=4096)  # 65536 slots under a 128k context
    with pytest.raises(ValueError, match="needs 6250 KV blocks, the cache has 4096"):
        scheduler.add_request(Request("big", _tokens(100_000, 1), max_tokens=1))
    assert not scheduler.has_unfinished_requests() and not scheduler.waiting
    fits = Request("fits", _tokens(65536, 1), max_tokens=10)
    scheduler.add_request(fits)
    assert fits.max_model_len == 65537  # capped at the cache: alone it always fits
    _run(scheduler, check=False)
    assert fits.num_tokens == 65537 and fits.finish_reason == "length"

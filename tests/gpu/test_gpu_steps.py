"""Launched steps on a real GPU (issue 13): the device argmax a `DeviceStep` hands out is
numpy's argmax of the very rows it copies to the host (ties: the first index; a NaN row
reports NaN; +inf and all -inf rows their value), for a graph's reused buffer and an eager
step's own tensor; and an engine with async scheduling and device greedy tokens gives the
tokens and digests of the synchronous engine (random-weight Llama-3-8B shape, bf16)."""

from __future__ import annotations

import numpy as np
import pytest

from samebits import SamplingParams
from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.outputs import RequestOutputKind, logits_digest

pytestmark = pytest.mark.gpu
VOCAB = 128256


def _rows(torch):
    """Rows with ties at the max, a NaN, +inf, all -inf, and plain random rows."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn((40, VOCAB), device="cuda", generator=g)
    x[:10] = torch.round(x[:10] * 2) / 2  # coarse values: many ties
    x[10, [5, 70000, 128000]] = 9.0  # a three-way tie at the maximum
    x[11, 1234] = float("nan")
    x[12, [3, 99]] = float("inf")
    x[13] = float("-inf")
    x[14, 17] = float("nan")
    x[14, 16] = float("inf")
    return x


@pytest.mark.parametrize("reused", [False, True])
def test_device_argmax_is_numpy_argmax_of_the_copied_rows(cuda, reused, gpu_record):
    import torch

    from samebits.engine.runner import DeviceStep

    logits = _rows(torch)
    layout = ({f"r{i}": i for i in range(len(logits))}, {})
    step = DeviceStep(logits, layout, reused)
    if reused:
        logits.fill_(0.0)  # the next replay overwrites a graph's buffer: the copy must not see it
    greedy, rows = step.greedy(), step.rows()
    bad = []
    for rid, (index, value) in greedy.items():
        row = rows[rid]
        want = int(np.argmax(row))
        if np.isnan(row[want]):  # a NaN row: any NaN's index, the sampler raises either way
            ok = bool(np.isnan(value))
        else:
            ok = index == want and np.float32(value).tobytes() == row[want].tobytes()
        if not ok:
            bad.append(rid)
    assert not np.isnan(rows["r10"]).any() and greedy["r10"][0] == 5
    assert np.isnan(greedy["r11"][1]) and np.isnan(greedy["r14"][1])
    assert greedy["r12"] == (3, float("inf")) and greedy["r13"][1] == float("-inf")
    assert bad == [] and step.digests() is None
    gpu_record(f"device argmax (reused={reused})", f"{len(greedy)} rows == numpy argmax")


@pytest.mark.parametrize("copy_rows", [False, True])
def test_device_step_digests_equal_hashlib_of_its_rows(cuda, copy_rows, gpu_record):
    """A graph's reused buffer overwritten after launch: the device digests and the rows
    (copied at launch, or on demand from the step's own copy) still describe the step."""
    import torch

    from samebits.engine.runner import DeviceStep

    logits = _rows(torch)
    layout = ({f"r{i}": i for i in range(len(logits))}, {})
    step = DeviceStep(logits, layout, True, copy_rows=copy_rows, digests=True)
    logits.fill_(0.0)
    rows = step.rows()
    wrong = [rid for rid, d in step.digests().items() if d.result() != logits_digest(rows[rid])]
    assert wrong == [] and not np.array_equal(rows["r20"], np.zeros_like(rows["r20"]))
    gpu_record(f"DeviceStep digests (copy_rows={copy_rows})", f"{len(rows)} rows == hashlib")


@pytest.mark.parametrize("vocab", [VOCAB, 151_937, 49_152])
def test_device_sha256_equals_hashlib(cuda, vocab, gpu_record):
    """`sha256_rows` on the H200 against hashlib on the host copy: 70 rows (three programs of
    32 lanes), a vocabulary whose rows end mid-block, special values."""
    import torch

    from samebits.kernels.triton.sha256 import hex_digests, sha256_rows

    g = torch.Generator(device="cuda").manual_seed(vocab)
    rows = torch.randn((70, vocab), device="cuda", generator=g)
    rows[0, :4] = torch.tensor([float("nan"), -0.0, float("inf"), float("-inf")])
    got = hex_digests(sha256_rows(rows).cpu().numpy())
    host = rows.cpu().numpy()
    assert got == [logits_digest(row) for row in host]
    gpu_record(f"device SHA-256, vocab {vocab}", "70 rows == hashlib")


def _run(engine: LLMEngine, jobs, kind: RequestOutputKind = RequestOutputKind.CUMULATIVE) -> dict:
    for i, (prompt, params) in enumerate(jobs):
        engine.add_request(str(i), prompt, params, output_kind=kind)
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out.outputs[0]
    return done


def _equal(a: dict, b: dict, *fields: str) -> list[bool]:
    """Per request of `a`: whether its output in `b` has equal `fields`."""
    return [all(getattr(a[k], f) == getattr(b[k], f) for f in fields) for k in a]


@pytest.fixture(scope="module")
def dep8b(cuda):
    import torch

    from samebits.model.random_init import random_model

    loaded = random_model("llama-3-8b", seed=0, device="cuda", dtype=torch.bfloat16)
    return build_deployment(loaded, "invariant", device="cuda")


def test_async_engine_equals_sync_engine(dep8b, gpu_record):
    dep = dep8b
    rng = np.random.default_rng(0)
    jobs = []
    for i in range(48):
        prompt = rng.integers(0, VOCAB - 3, int(rng.integers(5, 300))).tolist()
        kw = {"temperature": 0.0} if i % 3 else {"temperature": 0.9, "top_p": 0.9}
        kw |= {"logprobs": 3} if i % 5 == 0 else {}
        jobs.append((prompt, SamplingParams(max_tokens=12, ignore_eos=True, seed=i, **kw)))
    results = {}
    for flag in (False, True):
        engine = LLMEngine.from_deployment(
            dep, num_kv_blocks=2048, max_num_seqs=64, async_scheduling=flag
        )
        results[flag] = _run(engine, jobs)
        stats = engine.stats()
        del engine
    a, b = results[False], results[True]
    same = _equal(a, b, "token_ids", "logits_digests", "logprobs")
    gpu_record("async scheduling == sync (llama-3-8b bf16)", f"{sum(same)}/{len(jobs)} {stats}")
    assert len(a) == len(b) == len(jobs) and all(same)


def test_steps_scheduled_ahead_equal_the_synchronous_engine(dep8b, gpu_record):
    """All plain greedy (so each step's successor is launched before its tokens are known,
    fed from the device argmax, replayed from the decode graphs), with lengths from 3 to 40
    tokens and a stop token that ends requests early (their rows ahead are wasted)."""
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, VOCAB - 3, int(rng.integers(5, 200))).tolist() for _ in range(40)]
    lengths = [int(n) for n in rng.integers(3, 41, len(prompts))]
    results, stats = {}, {}
    for ahead in (False, True):
        engine = LLMEngine.from_deployment(
            dep8b, num_kv_blocks=2048, max_num_seqs=64, lookahead=ahead
        )
        if not results:  # a stop token: the 3rd token of request 0's greedy run
            probe = _run(engine, [(prompts[0], SamplingParams(max_tokens=3, temperature=0.0))])
            stop = probe["0"].token_ids[2]
        jobs = [
            (p, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True,
                               stop_token_ids=[] if i % 2 else [stop]))
            for i, (p, n) in enumerate(zip(prompts, lengths, strict=True))
        ]  # fmt: skip
        results[ahead] = _run(engine, jobs)
        stats[ahead] = (engine.num_steps_ahead, engine.runner.stats())
        del engine
    a, b = results[False], results[True]
    same = _equal(a, b, "token_ids", "logits_digests", "finish_reason")
    stopped = sum(o.finish_reason == "stop" for o in b.values())
    gpu_record("steps ahead == sync (llama-3-8b bf16)",
               f"{sum(same)}/{len(a)} equal, {stopped} stopped early, {stats[True]}")  # fmt: skip
    assert len(a) == len(b) == len(prompts) and all(same)
    assert stopped >= 1  # request 0 stops at its 3rd token, with a step ahead in flight
    assert stats[False][0] == 0 and stats[True][0] > 20
    assert stats[True][1].get("graph_steps", 0) > 20


def test_device_digests_are_the_host_digests_of_the_returned_rows(dep8b, gpu_record):
    """The engine's digests (SHA-256 on the device) against hashlib of the rows it returns
    (`return_logits`), and the same outputs with the digests hashed on the host."""
    rng = np.random.default_rng(2)
    jobs = [
        (rng.integers(0, VOCAB - 3, 40 + 9 * i).tolist(),
         SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True, return_logits=i % 2 == 0))
        for i in range(12)
    ]  # fmt: skip
    outs, hashed = {}, {}
    for on_device in (True, False):
        engine = LLMEngine.from_deployment(
            dep8b, num_kv_blocks=1024, max_num_seqs=16, device_digests=on_device
        )
        outs[on_device] = _run(engine, jobs, RequestOutputKind.FINAL_ONLY)
        hashed[on_device] = engine.runner.num_device_digest_steps
        del engine
    dev, host = outs[True], outs[False]
    checked = 0
    for k, out in dev.items():
        assert out.token_ids == host[k].token_ids and out.logits_digests == host[k].logits_digests
        if out.logits is not None:
            assert out.logits_digests == [logits_digest(np.asarray(r)) for r in out.logits]
            checked += len(out.logits)
    assert checked == 36 and hashed[True] >= 6 and hashed[False] == 0
    gpu_record("engine digests on the device == hashlib",
               f"{checked} returned rows; 12 requests; {hashed[True]} steps hashed on the device")  # fmt: skip

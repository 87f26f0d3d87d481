"""Steps scheduled ahead (async scheduling with `lookahead`) on the CPU: the step after a
plain-greedy step is launched before that step's tokens are known, its input ids gathered
from the previous step's argmax by the runner (eagerly, and through the decode graphs'
buffers). Every output (tokens, digests, text, logprobs) equals the synchronous engine's, with
stop tokens and stop strings that leave a wasted row, a cache small enough to refuse steps
ahead and preempt, arrivals between steps and an abort of a request in flight; the scheduler's
invariants hold after every step and every block is free at the end."""

from __future__ import annotations

import numpy as np
import pytest

from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.engine.runner import ModelRunner
from samebits.graphs.policy import GraphConfig
from samebits.model import load_model
from samebits.sampling import SamplingParams

BLOCK = 16


@pytest.fixture(scope="module")
def deployment(tiny_llama_dir):
    return build_deployment(load_model(tiny_llama_dir), "invariant")


def _engine(dep, *, blocks: int = 64, graphs: bool = False, ahead: bool = True) -> LLMEngine:
    engine = LLMEngine.from_deployment(
        dep, num_kv_blocks=blocks, block_size=BLOCK, max_num_seqs=8, async_scheduling=ahead
    )
    if graphs:
        config = GraphConfig(True, (1, 2, 4, 8), capture_at_start=False)
        engine.runner = ModelRunner(dep.model, BLOCK, blocks, config, dep.max_model_len)
    return engine


class DigestSpyRunner:
    """A ModelRunner that says it hashes on the device (a CPU step ignores the hint) and
    records each launch's `device_digests`: the engine's choice, seen from the runner."""

    hashes_on_device = True

    def __init__(self, runner: ModelRunner, asked: list[bool]) -> None:
        self.runner, self.asked = runner, asked
        self.feeds_tokens = runner.feeds_tokens

    def launch(self, sched_out, feed=None, copy_rows=True, device_digests=False):
        self.asked.append(device_digests)
        return self.runner.launch(sched_out, feed, copy_rows, device_digests)

    def stats(self) -> dict[str, int]:
        return self.runner.stats()


def _prompts(vocab: int, n: int) -> list[list[int]]:
    rng = np.random.default_rng(7)
    return [rng.integers(3, vocab, 4 + 7 * i).tolist() for i in range(n)]


def _params(stop_token: int | None) -> list[SamplingParams]:
    greedy = dict(temperature=0.0, ignore_eos=True)
    stops = (stop_token,) if stop_token is not None else ()
    return [
        SamplingParams(max_tokens=9, seed=0, **greedy),
        SamplingParams(max_tokens=3, seed=1, **greedy),
        SamplingParams(max_tokens=12, seed=2, stop_token_ids=list(stops), **greedy),
        SamplingParams(max_tokens=7, seed=3, logprobs=3, **greedy),
        SamplingParams(max_tokens=10, seed=4, stop=["e", "a"], **greedy),
        SamplingParams(max_tokens=11, seed=5, **greedy),
    ]


def _drive(engine: LLMEngine, jobs, arrive_every: int = 0, abort: str | None = None) -> dict:
    """Run the jobs (all at once, or one more every `arrive_every` steps), checking the
    scheduler's invariants after every step; the final output per request."""
    pending, done, steps = list(jobs), {}, 0
    while pending or engine.has_unfinished_requests():
        while pending and (arrive_every == 0 or steps % arrive_every == 0):
            rid, prompt, params = pending.pop(0)
            engine.add_request(rid, prompt, params)
            if arrive_every:
                break
        done.update({o.request_id: o.outputs[0] for o in engine.step() if o.finished})
        steps += 1
        if abort is not None and steps == 3:
            engine.abort_request(abort)
        engine.scheduler.check_integrity()
    return done


def _jobs(engine: LLMEngine, stop_token: int | None = None) -> list:
    prompts = _prompts(engine.vocab_size, 6)
    return [
        (str(i), p, s) for i, (p, s) in enumerate(zip(prompts, _params(stop_token), strict=True))
    ]


def _same(a, b) -> bool:
    fields = ("token_ids", "logits_digests", "text", "logprobs", "finish_reason")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def _stop_token(dep) -> int:
    """A token request 2 produces at its 4th step (so its stop leaves a wasted row)."""
    out = _drive(_engine(dep, ahead=False), _jobs(_engine(dep, ahead=False)))
    return out["2"].token_ids[3]


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_steps_ahead_give_the_synchronous_outputs(deployment, graphs):
    stop = _stop_token(deployment)
    want = _drive(_engine(deployment, ahead=False), _jobs(_engine(deployment), stop))
    engine = _engine(deployment, graphs=graphs)
    got = _drive(engine, _jobs(engine, stop))
    assert engine.num_steps_ahead >= 5
    assert got["2"].finish_reason == "stop" and len(got["2"].token_ids) == 4
    assert sorted(got) == sorted(want)
    assert all(_same(got[rid], want[rid]) for rid in want)
    assert engine.scheduler.make_stats().num_free_blocks == 64
    if graphs:
        assert engine.runner.stats()["graph_steps"] >= engine.num_steps_ahead


def test_steps_ahead_with_arrivals_a_small_cache_and_an_abort(deployment):
    want = _drive(_engine(deployment, ahead=False), _jobs(_engine(deployment)))
    preemptions = []
    for blocks, every, abort in ((64, 2, None), (4, 0, None), (64, 0, "5")):
        engine = _engine(deployment, blocks=blocks)
        got = _drive(engine, _jobs(engine), arrive_every=every, abort=abort)
        assert engine.num_steps_ahead > 0
        assert sorted(got) == sorted(rid for rid in want if rid != abort)
        assert all(_same(got[rid], want[rid]) for rid in got)
        assert engine.scheduler.make_stats().num_free_blocks == blocks
        preemptions.append(engine.scheduler.num_preemptions)
    assert preemptions == [0, 1, 0]  # 4 blocks of 16: one request is preempted


def test_lookahead_off_launches_no_step_ahead(deployment):
    engine = _engine(deployment)
    engine.update_runtime_config(lookahead=False)
    _drive(engine, _jobs(engine))
    assert engine.num_steps_ahead == 0


def test_runtime_switches_change_between_steps_and_no_value(deployment):
    """`update_runtime_config` switches lookahead and async scheduling off and on while
    requests run (the outputs equal the synchronous engine's), validates like the config,
    and refuses a setting that is fixed once the engine is built."""
    want = _drive(_engine(deployment, ahead=False), _jobs(_engine(deployment)))
    engine = _engine(deployment)
    jobs, done = _jobs(engine), {}
    for rid, prompt, params in jobs:
        engine.add_request(rid, prompt, params)
    for step in range(60):
        if step % 3 == 0:
            engine.update_runtime_config(lookahead=step % 2 == 0, async_scheduling=step != 9)
        done.update({o.request_id: o.outputs[0] for o in engine.step() if o.finished})
    assert not engine.has_unfinished_requests() and engine.num_steps_ahead >= 1
    assert all(_same(done[rid], want[rid]) for rid in want) and sorted(done) == sorted(want)
    with pytest.raises(TypeError, match="enforce_eager"):
        engine.update_runtime_config(enforce_eager=True)
    with pytest.raises(ValueError, match="lookahead"):
        engine.update_runtime_config(lookahead="yes")
    assert engine.config.runtime_config.enforce_eager is False


def test_a_sampled_request_keeps_the_step_behind(deployment):
    engine = _engine(deployment)
    engine.add_request("t", [5, 6, 7], SamplingParams(max_tokens=6, temperature=0.7, seed=1))
    _drive(engine, [])
    assert engine.num_steps_ahead == 0


@pytest.mark.parametrize("kind", ["FINAL_ONLY", "DELTA", "CUMULATIVE", "mixed"])
def test_device_digests_asked_only_for_steps_without_streamed_outputs(deployment, kind):
    """A streamed output waits for its digests each step, so the engine asks the runner for
    device digests (which arrive steps later) only when no request of the step streams."""
    from samebits.outputs import RequestOutputKind

    engine = _engine(deployment)
    asked: list[bool] = []
    engine.runner = DigestSpyRunner(engine.runner, asked)
    kinds = (
        [RequestOutputKind[k] for k in ("FINAL_ONLY", "DELTA")]
        if kind == "mixed"
        else [RequestOutputKind[kind]]
    )
    for i, prompt in enumerate(_prompts(engine.vocab_size, 2)):
        params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
        engine.add_request(str(i), prompt, params, output_kind=kinds[i % len(kinds)])
    while engine.has_unfinished_requests():
        engine.step()
    assert asked and set(asked) == {kind == "FINAL_ONLY"}

"""Async scheduling (step n+1 launched before step n's outputs are built) and the greedy
token read off a runner's argmax, on the CPU: the same tokens and digests as the plain
engine, arrivals join one step later, aborts of a request in flight lose nothing else."""

from __future__ import annotations

import numpy as np
import pytest

from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.engine.step_result import StepLogits
from samebits.model import load_model
from samebits.sampling import SamplingParams
from samebits.testing.drive import run_until_done

GREEDY = {"ignore_eos": True, "temperature": 0.0}
PARAMS = [
    SamplingParams(max_tokens=6, seed=1, **GREEDY),  # plain greedy
    SamplingParams(max_tokens=6, seed=2, repetition_penalty=1.3, **GREEDY),
    SamplingParams(max_tokens=6, ignore_eos=True, seed=3, temperature=0.8, top_p=0.9),
    SamplingParams(max_tokens=5, seed=4, min_tokens=3, logprobs=2, **GREEDY),
    SamplingParams(max_tokens=6, seed=5, stop=["a", "e", "o"], **GREEDY),
]
PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8], [9, 10], [11, 12, 13, 14], [15, 16, 17]]


@pytest.fixture(scope="module")
def deployment(tiny_llama_dir):
    return build_deployment(load_model(tiny_llama_dir), "invariant")


class ArgmaxStep:
    """A launched step as a GPU runner's: the argmax comes with the step, the rows later."""

    def __init__(self, rows: StepLogits, poison: str | None) -> None:
        if poison in rows:
            rows[poison] = np.full_like(rows[poison], np.nan)
        self._rows = rows

    def greedy(self) -> dict[str, tuple[int, float]]:
        top = {rid: int(np.argmax(row)) for rid, row in self._rows.items()}
        return {rid: (i, float(self._rows[rid][i])) for rid, i in top.items()}

    def rows(self) -> StepLogits:
        return self._rows

    def digests(self) -> None:
        return None


class ArgmaxRunner:
    """Wraps a ModelRunner (implements `step_result.Runner`): `launch` returns an ArgmaxStep
    (a row of `poison` all NaN); it takes no step fed ahead and hashes nothing itself."""

    feeds_tokens = False
    hashes_on_device = False

    def __init__(self, runner, poison: str | None = None) -> None:
        self.runner, self.poison = runner, poison

    def launch(self, sched_out, feed=None, copy_rows=True, device_digests=False) -> ArgmaxStep:
        assert feed is None and not device_digests
        return ArgmaxStep(self.runner.launch(sched_out).rows(), self.poison)

    def stats(self) -> dict[str, int]:
        return {}


def _engine(deployment, **kwargs) -> LLMEngine:
    return LLMEngine.from_deployment(deployment, num_kv_blocks=64, block_size=16, **kwargs)


def _run(engine: LLMEngine, n: int = len(PROMPTS)) -> dict:
    for i in range(n):
        engine.add_request(str(i), PROMPTS[i], PARAMS[i])
    return {rid: out.outputs[0] for rid, out in run_until_done(engine).items()}


def _same(a, b) -> bool:
    return (a.token_ids, a.logits_digests, a.text, a.logprobs) == (
        b.token_ids, b.logits_digests, b.text, b.logprobs
    )  # fmt: skip


def test_async_scheduling_gives_the_same_outputs(deployment):
    plain = _run(_engine(deployment))
    engine = _engine(deployment, async_scheduling=True)
    assert engine.config.runtime_config.async_scheduling is True
    got = _run(engine)
    assert sorted(got) == sorted(plain)
    assert all(_same(got[rid], plain[rid]) for rid in plain)
    engine.scheduler.check_integrity()
    assert engine.scheduler.make_stats().num_free_blocks == 64


def test_async_scheduling_is_off_on_the_cpu_unless_asked(deployment):
    assert _engine(deployment).config.runtime_config.async_scheduling is False


def test_a_request_added_between_steps_joins_one_step_later(deployment):
    first_output_step = {}
    for flag in (False, True):
        engine = _engine(deployment, async_scheduling=flag)
        engine.add_request("a", PROMPTS[0], PARAMS[0])
        engine.step()
        engine.add_request("b", PROMPTS[1], PARAMS[0])
        steps = 0
        while "b" not in {o.request_id for o in engine.step()}:
            steps += 1
        first_output_step[flag] = steps
        run_until_done(engine)
    assert first_output_step == {False: 0, True: 1}


def test_abort_of_a_request_in_flight(deployment):
    plain = _run(_engine(deployment), 2)
    engine = _engine(deployment, async_scheduling=True)
    for i in range(3):
        engine.add_request(str(i), PROMPTS[i], PARAMS[i])
    engine.step()
    engine.step()  # "2" is in the step launched during this call
    engine.abort_request("2")
    finished = run_until_done(engine)
    assert "2" not in finished
    assert all(_same(finished[rid].outputs[0], plain[rid]) for rid in plain)
    engine.scheduler.check_integrity()
    assert engine.scheduler.make_stats().num_free_blocks == 64


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_greedy_tokens_from_the_runner_argmax(deployment, async_scheduling):
    plain = _run(_engine(deployment))
    engine = _engine(deployment, async_scheduling=async_scheduling)
    engine.runner = ArgmaxRunner(engine.runner)
    on_host, real = [], engine._sample
    engine._sample = lambda rid, row: on_host.append(rid) or real(rid, row)
    got = _run(engine)
    assert all(_same(got[rid], plain[rid]) for rid in plain)
    # plain greedy rows never reach the host sampler; penalties, temperature, min_tokens do
    assert "0" not in on_host and "4" not in on_host
    assert on_host.count("1") == 6 and on_host.count("2") == 6
    assert on_host.count("3") == 3  # the positions before min_tokens=3 (EOS masked)


def test_a_nan_row_fails_its_request_only_with_the_samplers_error(deployment):
    plain = _run(_engine(deployment))
    engine = _engine(deployment, async_scheduling=True)
    engine.runner = ArgmaxRunner(engine.runner, poison="0")
    got = _run(engine)
    failures = engine.pop_failures()
    assert list(failures) == ["0"] and "NaN or +inf" in str(failures["0"])
    assert sorted(got) == ["1", "2", "3", "4"]
    assert all(_same(got[rid], plain[rid]) for rid in got)
    assert engine.scheduler.make_stats().num_free_blocks == 64

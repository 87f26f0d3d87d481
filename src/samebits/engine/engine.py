"""LLMEngine: the scheduler, the model runner and the pure sampler, one step at a time.

No torch import here: the runner is built by `engine/assembly.py` (or handed in: anything
implementing `step_result.Runner`). Invariant: every sampled token is `sample(logits_row,
params, seed, position, prompt, outputs)` where `logits_row` is the runner's row for the
request's last known token and `position` is the number of outputs so far — so a request's
tokens depend only on its own input and the deployment. Intake is in `intake.py`, output
building in `output_processor.py`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from samebits.config import SWITCHABLE_RUNTIME, EngineConfig, RuntimeConfig, build_config
from samebits.engine import assembly
from samebits.engine.intake import PromptInput, new_request, prompt_ids, validate_request
from samebits.engine.output_processor import OutputProcessor, RequestState
from samebits.engine.request import RequestStatus
from samebits.engine.row_workers import map_rows
from samebits.engine.scheduler import Scheduler, SchedulerOutput
from samebits.engine.step_result import Runner, StepLogits, StepResult
from samebits.outputs import RequestOutput, RequestOutputKind
from samebits.sampling import SamplingParams, greedy_token, new_seed, sample
from samebits.structured.matcher import GrammarMatcher, GrammarTokenizer

Launched = tuple[SchedulerOutput, StepResult]

__all__ = ["LLMEngine", "PromptInput"]


class LLMEngine:
    """See docs/architecture.md, "Contract: LLMEngine".

    `config` is the resolved `EngineConfig` the engine was built from: every None of the
    requested config (dtype, max_model_len, num_kv_blocks, num_threads, async_scheduling)
    filled in with what the deployment and the cache actually use. Its runtime switches
    (`async_scheduling`, `lookahead`, `device_digests`; see `RuntimeConfig`) may be changed
    between steps with `update_runtime_config`; a step already launched is collected by the
    next `step()`."""

    def __init__(
        self, deployment: Any, runner: Runner, scheduler: Scheduler, config: EngineConfig
    ) -> None:
        self.deployment = deployment
        self.runner = runner
        self.scheduler = scheduler
        self.config = config
        self.tokenizer = deployment.tokenizer
        self.model_name = deployment.loaded.name
        self.fingerprint: str = deployment.fingerprint
        self.numerics_id: str = str(getattr(deployment, "numerics_id", ""))
        self.max_model_len: int = deployment.max_model_len
        self.vocab_size: int = deployment.config.vocab_size
        self.output_processor = OutputProcessor(self.tokenizer, self.fingerprint, self._fail)
        self._failures: dict[str, Exception] = {}
        self.num_steps = 0
        self.num_batched_tokens_total = 0
        self.last_batch_size = 0
        self._grammar_tokenizer: GrammarTokenizer | None = None
        self._inflight: Launched | None = None  # async scheduling: step n+1
        self.num_steps_ahead = 0  # steps scheduled ahead of their predecessor's tokens

    # ------------------------------------------------------------------ assembly
    @classmethod
    def from_args(
        cls, model: str | None = None, progress: bool = False,
        config: EngineConfig | None = None, **kwargs: Any,
    ) -> LLMEngine:  # fmt: skip
        """Load the model and build the engine from `config` (default: all defaults) with
        the flat keyword arguments `kwargs` (`samebits.config.ENGINE_KWARGS`) and `model`
        (None: the config's, else the embedded default) applied on top. TypeError naming
        an unknown keyword; ValueError for a bad value (before anything is loaded)."""
        if model is not None:
            kwargs["model"] = model
        cfg = build_config(config, **kwargs)
        loaded = assembly.load(cfg, progress)
        return cls._assemble(assembly.deploy(loaded, cfg, release_sources=True), cfg)

    @classmethod
    def from_loaded(
        cls, loaded: Any, release_sources: bool = False, config: EngineConfig | None = None,
        **kwargs: Any,
    ) -> LLMEngine:  # fmt: skip
        """Build the deployment (plan, decoder, fingerprint) for an already loaded model
        (`config.model_config.model` is not used: `loaded` is the model).
        `release_sources`: the engine owns `loaded` and may drop weights the kernels copied."""
        cfg = build_config(config, **kwargs)
        return cls._assemble(assembly.deploy(loaded, cfg, release_sources), cfg)

    @classmethod
    def from_deployment(
        cls, deployment: Any, config: EngineConfig | None = None, **kwargs: Any
    ) -> LLMEngine:
        """A fresh scheduler, KV cache and runner over a built deployment (cheap on the CPU;
        on a GPU the decode graphs are captured here unless `enforce_eager`, vLLM's name).
        `kwargs`: cache, scheduler and runtime keywords (`block_size`, `num_kv_blocks`,
        `enable_prefix_caching`, `gpu_memory_utilization`, `max_num_seqs`,
        `max_num_batched_tokens`, `enforce_eager`, ...); the deployment's model settings
        (plan, device, dtype, context length, threads) are what it was built with, whatever
        the config says (`assembly.assemble`); scheduler budgets not given take the
        deployment device's defaults (`assembly.deployment_config`)."""
        assembly.check_deployment_kwargs(kwargs)
        return cls._assemble(deployment, assembly.deployment_config(deployment, config, kwargs))

    @classmethod
    def _assemble(cls, deployment: Any, cfg: EngineConfig) -> LLMEngine:
        from samebits.engine.heap import freeze_startup_heap

        cfg, runner, scheduler = assembly.assemble(deployment, cfg)
        engine = cls(deployment, runner, scheduler, cfg)
        freeze_startup_heap()  # no step pays a full collection of the start-up heap
        return engine

    @property
    def runtime(self) -> RuntimeConfig:
        return self.config.runtime_config

    def update_runtime_config(self, **changes: Any) -> None:
        """Switch runtime settings between steps: only `config.SWITCHABLE_RUNTIME` (no value
        depends on them). TypeError for another name, ValueError for a bad value."""
        other = sorted(set(changes) - set(SWITCHABLE_RUNTIME))
        if other:
            raise TypeError(
                f"only {', '.join(SWITCHABLE_RUNTIME)} may change on a built engine, got "
                f"{', '.join(map(repr, other))}"
            )
        runtime = dataclasses.replace(self.runtime, **changes)
        self.config = dataclasses.replace(self.config, runtime_config=runtime)

    # ------------------------------------------------------------------ requests
    def add_request(
        self, request_id: str, prompt_token_ids: PromptInput, params: SamplingParams,
        prompt: str | None = None,
        output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE,
    ) -> None:  # fmt: skip
        """Queue a request. Assigns a seed when `params.seed` is None.

        `output_kind` (see `RequestOutputKind`): CUMULATIVE outputs carry everything so far,
        DELTA outputs only what is new (what streaming consumers want: O(new) per step),
        FINAL_ONLY one cumulative output at the end. It chooses what is reported, never what
        is sampled, so it is not part of the sampler state (nor of the audit log).

        `prompt_token_ids` takes what vLLM's `add_request` takes: a list (or tuple) of token
        ids, a string (tokenized with `add_special_tokens=True`, like `LLM.generate`), or a
        dict `{"prompt_token_ids": [...]}` / `{"prompt": "..."}` (both keys: the ids are used,
        the text is recorded). `prompt` is the text reported in `RequestOutput.prompt`; it
        defaults to the string given, if any. TypeError for any other prompt type; ValueError
        for bad values (see the contract in docs/architecture.md).
        """
        ids, prompt = prompt_ids(self.tokenizer, prompt_token_ids, prompt)
        if not isinstance(output_kind, RequestOutputKind):
            raise TypeError(f"output_kind must be a RequestOutputKind, got {output_kind!r}")
        in_use = request_id in self.output_processor.request_states
        validate_request(request_id, ids, params, in_use, self.vocab_size, self.max_model_len)
        guide = self._grammar_matcher(params)
        params = params if params.seed is not None else params.with_seed(new_seed())
        eos = self.tokenizer.eos_token_ids
        request = new_request(request_id, ids, params, eos, self.max_model_len)
        self.scheduler.add_request(request)
        self.output_processor.add_request(request, params, prompt, output_kind, guide)

    def _grammar_matcher(self, params: SamplingParams) -> GrammarMatcher | None:
        """A fresh matcher for a structured-outputs request (None otherwise); the tokenizer
        view is built on the first such request and shared read-only."""
        if params.structured_outputs is None:
            return None
        if self._grammar_tokenizer is None:
            self._grammar_tokenizer = GrammarTokenizer(self.tokenizer, self.vocab_size)
        return GrammarMatcher(self._grammar_tokenizer, params.structured_outputs)

    def reset_prefix_cache(self) -> bool:
        """Forget the prefix cache (benchmarks' cold runs; vLLM's name). Only while no request
        runs or waits (their blocks stay put); returns whether the cache was dropped. No
        value changes either way: a hit and a recomputation give the same bits."""
        if self.scheduler.has_unfinished_requests() or self._inflight is not None:
            return False
        return self.scheduler.kv_cache_manager.reset_prefix_cache()

    def abort_request(self, request_id: str) -> None:
        """Stop a request and free its blocks; unknown ids are ignored (a finished request
        whose output was held for its digests is dropped)."""
        if self.output_processor.abort_request(request_id):
            self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)

    def has_unfinished_requests(self) -> bool:
        """Whether a request still runs, waits, or has a held final output."""
        return self.scheduler.has_unfinished_requests() or bool(self.output_processor.held)

    @property
    def num_held_outputs(self) -> int:
        """Final outputs held for their digests so far (see `step`)."""
        return self.output_processor.num_held_outputs

    # ------------------------------------------------------------------ stepping
    def step(self) -> list[RequestOutput]:
        """Schedule, run one forward pass, sample, and report every request that advanced
        (a FINAL_ONLY request only when it finished), as its `output_kind` asks. A finished
        FINAL_ONLY request whose digests are still computing (the device SHA-256 takes a few
        steps) is held: a later step reports it, once they are done, so no step waits on a
        request's last digests while the device could run the next one; a step with nothing
        left to run waits for them. `has_unfinished_requests` is True while one is held.

        With `async_scheduling` the next step is scheduled and launched as soon as this
        step's tokens are known and its stop conditions applied, before this step's outputs
        are built (digests, logprobs, text: host work that then overlaps the device's).
        A request added or aborted between two calls then joins or leaves one step later
        than without; no value changes (its rows are batch invariant).

        Failure isolation: an exception in one request's sampling, detokenization or output
        (e.g. a non-finite logit) aborts that request only; it is reported by
        `pop_failures()` and the step goes on for every other request.
        """
        out = self.output_processor
        launched, self._inflight = self._inflight or self._launch(), None
        if launched is None:
            return out.release_held(wait=True)
        sched_out, result = launched
        ahead = self._launch_ahead(sched_out, result)
        sampled = self._sample_tokens(sched_out, result)
        finished = {r.request_id for r in self.scheduler.update_from_output(sched_out, sampled)}
        self.num_steps += 1
        self.num_batched_tokens_total += sched_out.num_batched_tokens
        self.last_batch_size = len(sched_out.scheduled)
        for rid, token in sampled.items():
            out.isolated(rid, self._check_stop, rid, token, finished)
        if self.runtime.async_scheduling:
            self._inflight = ahead or self._launch()
        self._record_rows(sched_out, result, sampled)
        outputs = []
        for rid, token in sampled.items():
            if rid in out.request_states:
                outputs.append(out.isolated(rid, out.emit, rid, token, finished))
        out.drop_finished(finished)
        return [o for o in outputs if o is not None] + out.release_held(wait=False)

    def _launch(self) -> Launched | None:
        """Schedule a step and start it on the runner (None: nothing to run)."""
        sched_out = self.scheduler.schedule()
        if not sched_out.scheduled:
            return None
        return sched_out, self._start(sched_out)

    def _start(self, sched_out: SchedulerOutput, feed: StepResult | None = None) -> StepResult:
        """Launch on the runner. A runner that can hash the rows on the device does so (with
        `device_digests` on) for a step whose outputs are not streamed (the device digest
        arrives a few steps later; a streamed output waits for its digests, hashed on the
        host in about a millisecond), and is told whether the rows are needed on the host at
        all (`_needs_host_rows`). Hints only: the digests are the same strings either way."""
        on_device = (
            self.runtime.device_digests
            and self.runner.hashes_on_device
            and not self.output_processor.streams(
                s.request_id for s in sched_out.scheduled if s.sample
            )
        )
        copy_rows = not on_device or self._needs_host_rows(sched_out)
        return self.runner.launch(
            sched_out, feed=feed, copy_rows=copy_rows, device_digests=on_device
        )

    def _needs_host_rows(self, sched_out: SchedulerOutput) -> bool:
        """Whether a request of the step reads its rows on the host: prompt logprobs,
        logprobs or returned logits, a grammar, or a token that is not the row's argmax."""
        states = self.output_processor.request_states
        for s in sched_out.scheduled:
            st = states.get(s.request_id)
            if s.all_rows:
                return True
            if s.sample and st is not None and (st.needs_rows or not st.takes_argmax):
                return True
        return False

    def _launch_ahead(self, sched_out: SchedulerOutput, result: StepResult) -> Launched | None:
        """The next step, scheduled and launched before this one's tokens are known, when it
        only continues this one and every token of this one is its argmax (plain greedy, no
        grammar): fed from `result.tokens()` on the device. None: schedule after update."""
        rt = self.runtime
        if not (rt.async_scheduling and rt.lookahead and self.runner.feeds_tokens):
            return None
        if not self._all_plain_greedy(sched_out):
            return None
        ahead = self.scheduler.schedule_ahead(sched_out)
        if ahead is None:
            return None
        self.num_steps_ahead += 1
        return ahead, self._start(ahead, feed=result)

    def _all_plain_greedy(self, sched_out: SchedulerOutput) -> bool:
        """Whether every live request sampling in the step takes its row's argmax."""
        states = self.output_processor.request_states
        live = (states.get(s.request_id) for s in sched_out.scheduled if s.sample)
        return all(st.takes_argmax for st in live if st is not None)

    def _sample_tokens(self, sched_out: SchedulerOutput, result: StepResult) -> dict[str, int]:
        """This step's token per sampling request still live. A plain-greedy row's token is
        its argmax (`greedy_token`): read from the runner's argmax when it has one
        (no wait for the rows), else `sample` runs on the host row."""
        states = self.output_processor.request_states
        rids = [s.request_id for s in sched_out.scheduled if s.sample and s.request_id in states]
        greedy = result.greedy()
        sampled: dict[str, int] = {}
        host: list[str] = []
        for rid in rids:
            if greedy is None or not states[rid].takes_argmax:
                host.append(rid)
                continue
            token = self.output_processor.isolated(rid, greedy_token, *greedy[rid])
            if token is not None:
                sampled[rid] = token
        rows = result.rows() if host else StepLogits()
        items = [(rid, rows[rid]) for rid in host]
        for (rid, _), token in zip(items, map_rows(self._sample, items), strict=True):
            if isinstance(token, Exception):
                self._fail(rid, token)
            else:
                sampled[rid] = token
        return {rid: sampled[rid] for rid in rids if rid in sampled}

    def _sample(self, rid: str, row: np.ndarray) -> int:
        """`sample` on the host row (the grammar matcher, if any, accepts the token)."""
        st = self.output_processor.request_states[rid]
        req, params = st.request, st.params
        position = len(req.output_token_ids)
        allowed = _allowed(st, position)
        token = sample(
            row, params, st.seed, position, req.prompt_token_ids, req.output_token_ids,
            req.eos_token_ids, allowed,
        )  # fmt: skip
        if st.guide is not None:
            st.guide.accept(token)
        return token

    def _record_rows(
        self, sched_out: SchedulerOutput, result: StepResult, sampled: dict[str, int]
    ) -> None:
        """Hand the step's rows to the output processor. The rows cross to the host only when
        something reads them there: no device digests, or a request that needs its rows."""
        device = result.digests()
        wanted = device is None or self._needs_host_rows(sched_out)
        rows = result.rows() if wanted else StepLogits()
        self.output_processor.record_rows(rows, device, sampled)

    def _check_stop(self, rid: str, token: int, finished: set[str]) -> None:
        """Finish the request on a stop string or a complete grammar (before the next step
        is scheduled)."""
        if rid not in finished and self.output_processor.stops(rid, token):
            self.scheduler.finish_request(rid, RequestStatus.FINISHED_STOPPED)
            finished.add(rid)

    # ------------------------------------------------------------------ failures, stats
    def pop_failures(self) -> dict[str, Exception]:
        """Requests aborted by an exception since the last call, with that exception."""
        failures, self._failures = self._failures, {}
        return failures

    def _fail(self, rid: str, exc: Exception) -> None:
        """Abort `rid` after an exception in its own work (recorded for pop_failures)."""
        self._failures[rid] = exc
        self.abort_request(rid)

    def stats(self) -> dict[str, float]:
        """Counters for /metrics (scheduler counters plus step totals)."""
        out: dict[str, float] = dict(dataclasses.asdict(self.scheduler.make_stats()))
        out.update(
            num_steps=self.num_steps,
            num_batched_tokens_total=self.num_batched_tokens_total,
            last_batch_size=self.last_batch_size,
        )
        out.update(self.runner.stats())  # graph / eager steps on a GPU
        return out


def _allowed(st: RequestState, position: int) -> np.ndarray | None:
    """The grammar's mask before output `position` (None without structured outputs)."""
    if st.guide is None:
        return None
    if st.guide.num_accepted != position:
        raise AssertionError(
            f"grammar matcher of {st.request.request_id} accepted {st.guide.num_accepted} "
            f"tokens, the request has {position} outputs"
        )
    return st.guide.allowed()

"""LLMEngine: the scheduler, the model runner and the pure sampler, one step at a time.

No torch import here: the runner is handed in (see `from_args`). Invariant: every sampled
token is `sample(logits_row, params, seed, position, prompt, outputs)` where `logits_row` is
the runner's row for the request's last known token and `position` is the number of outputs
so far — so a request's tokens depend only on its own input and the deployment.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from samebits.config import (
    DEFAULT_NUM_KV_BLOCKS,
    DEVICE_DTYPES,
    KERNEL_PLANS,
    KWARG_PARTS,
    EngineConfig,
    build_config,
    resolved_parts,
)
from samebits.detokenizer import IncrementalDetokenizer, find_stop_string, truncate_at_stop
from samebits.engine.request import Request, RequestStatus
from samebits.engine.row_workers import all_done, digest_later, map_rows, resolved
from samebits.engine.scheduler import Scheduler
from samebits.engine.step_result import StepLogits, StepResult, launch_step
from samebits.outputs import CompletionOutput, RequestOutput, RequestOutputKind, logits_digest
from samebits.sampling import (
    SamplingParams,
    compute_logprobs,
    greedy_token,
    is_plain_greedy,
    new_seed,
    sample,
)
from samebits.structured.matcher import GrammarMatcher, GrammarTokenizer

PromptLogprobs = list[dict[int, float] | None]

# A memory-sized KV cache holds at most this many times what max_num_seqs full-length
# sequences need (the rest serves the prefix cache); a tiny model on a large GPU would
# otherwise get tens of millions of blocks, each a Python object in the block pool.
KV_BLOCKS_PER_SEQUENCE_SLOT = 4

# Steps whose SHA-256 digests may still be computing on the row workers (each pins its
# step's host rows, 512 KB per 128k-vocab row) before a step waits for the oldest. An
# output waits for its own digests, so this bounds memory, never what is reported.
DIGEST_STEPS_AHEAD = 4
# The same bound for digests computed on the device (32 bytes per row come back; each step
# holds a device copy of its rows until hashed): one step per digest stream.
DEVICE_DIGEST_STEPS_AHEAD = 8

# What add_request takes as a prompt: token ids, text, or a vLLM-style dict of either.
PromptInput = str | list[int] | tuple[int, ...] | dict[str, object]


@dataclass
class _RequestState:
    """Per-request output bookkeeping the scheduler does not need.

    CUMULATIVE / FINAL_ONLY: `digests`, `logprobs`, `logits` hold every position. DELTA: they
    hold the positions not handed out yet (each output takes them and leaves fresh lists);
    `sent_tokens` / `sent_text` count the tokens and characters already handed out.
    """

    request: Request
    params: SamplingParams
    prompt: str | None
    detok: IncrementalDetokenizer
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    prompt_ids_out: list[int] = field(default_factory=list)  # DELTA: shared by its outputs
    sent_tokens: int = 0
    sent_text: int = 0
    # str or future-like (`result()`: a row worker's or the device's), resolved in outputs
    digests: list = field(default_factory=list)
    logprobs: list[dict[int, float]] = field(default_factory=list)
    logits: list[np.ndarray] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    text: str = ""
    stop_reason: str | int | None = None
    prompt_logprobs: PromptLogprobs | None = None  # [None, lp(1), ...] as rows arrive
    guide: GrammarMatcher | None = None  # structured outputs: has accepted every output

    @property
    def needs_rows(self) -> bool:
        """Whether the request keeps more of a sampled row than its digest."""
        return self.params.logprobs is not None or self.params.return_logits


class LLMEngine:
    """See docs/architecture.md, "Contract: LLMEngine".

    `config` is the resolved `EngineConfig` the engine was built from: every None of the
    requested config (dtype, max_model_len, num_kv_blocks, num_threads) filled in with what
    the deployment and the cache actually use. `async_scheduling` (from the config) may be
    switched between steps; a step already launched is collected by the next `step()`.
    `lookahead` (on by default; used only with `async_scheduling`) schedules a step that only
    continues a plain-greedy step before that step's tokens are known (`Scheduler.
    schedule_ahead`), its input tokens fed from the device argmax: the device then never
    waits for the host between decode steps."""

    def __init__(
        self, deployment, runner, scheduler: Scheduler, block_size: int,
        config: EngineConfig | None = None,
    ) -> None:  # fmt: skip
        self.deployment = deployment
        self.runner = runner
        self.scheduler = scheduler
        self.block_size = block_size
        self.config = config
        self.tokenizer = deployment.tokenizer
        self.model_name = deployment.loaded.name
        self.fingerprint = deployment.fingerprint
        self.max_model_len = deployment.max_model_len
        self.vocab_size = deployment.config.vocab_size
        self._states: dict[str, _RequestState] = {}
        self._failures: dict[str, Exception] = {}
        self.num_steps = 0
        self.num_batched_tokens_total = 0
        self.last_batch_size = 0
        self._grammar_tokenizer: GrammarTokenizer | None = None
        self._inflight: tuple[Any, StepResult] | None = None  # async scheduling: step n+1
        self._digest_steps: deque[list] = deque()  # digests still being computed
        # finished FINAL_ONLY requests whose digests are still computing: their output is
        # built by a later step (in finishing order) instead of stalling this one
        self._held: dict[str, None] = {}
        self.num_held_outputs = 0
        self.async_scheduling = bool(config and config.runtime_config.async_scheduling)
        self.lookahead = True
        self.num_steps_ahead = 0  # steps scheduled ahead of their predecessor's tokens

    @classmethod
    def from_args(
        cls, model=None, progress: bool = False, config: EngineConfig | None = None,
        **kwargs: Any,
    ) -> LLMEngine:  # fmt: skip
        """Load the model and build the engine from `config` (default: all defaults) with
        the flat keyword arguments `kwargs` (`samebits.config.ENGINE_KWARGS`) and `model`
        (None: the config's, else the embedded default) applied on top. TypeError naming
        an unknown keyword; ValueError for a bad value (before anything is loaded)."""
        if model is not None:
            kwargs["model"] = model
        cfg = build_config(config, **kwargs)
        from samebits.model import load_model, weights_target

        mc = cfg.model_config
        mc.check_device()
        target = weights_target(mc.device, mc.dtype)
        loaded = load_model(mc.model, progress=progress, weights_to=target)
        return cls.from_loaded(loaded, release_sources=True, config=cfg)

    @classmethod
    def from_loaded(
        cls, loaded, release_sources: bool = False, config: EngineConfig | None = None,
        **kwargs: Any,
    ) -> LLMEngine:  # fmt: skip
        """Build the deployment (plan, decoder, fingerprint) for an already loaded model
        (`config.model_config.model` is not used: `loaded` is the model).
        `release_sources`: the engine owns `loaded` and may drop weights the kernels copied."""
        from samebits.deployment import build_deployment

        cfg = build_config(config, **kwargs)
        mc, rc = cfg.model_config, cfg.runtime_config
        mc.check_device()
        deployment = build_deployment(
            loaded, mc.kernel_plan, rc.num_threads, mc.max_model_len, release_sources,
            mc.device, mc.dtype,
        )  # fmt: skip
        return cls.from_deployment(deployment, config=cfg)

    @classmethod
    def from_deployment(
        cls, deployment, config: EngineConfig | None = None, **kwargs: Any
    ) -> LLMEngine:
        """A fresh scheduler, KV cache and runner over a built deployment (cheap on the CPU;
        on a GPU the decode graphs are captured here unless `enforce_eager`, vLLM's name).
        `kwargs`: cache, scheduler and runtime keywords (`block_size`, `num_kv_blocks`,
        `enable_prefix_caching`, `gpu_memory_utilization`, `max_num_seqs`,
        `max_num_batched_tokens`, `enforce_eager`); the deployment's model settings (plan,
        device, dtype, context length, threads) are what it was built with, whatever the
        config says. The KV cache size is resolved by `_num_kv_blocks`."""
        misplaced = sorted(k for k in kwargs if KWARG_PARTS.get(k) == "model_config")
        misplaced += ["num_threads"] if "num_threads" in kwargs else []
        if misplaced:
            raise TypeError(
                f"from_deployment got {', '.join(map(repr, misplaced))}: the deployment "
                "already fixes them (use from_loaded / from_args)"
            )
        cfg = build_config(config, **kwargs)
        asked = cfg.scheduler_config.max_model_len
        if asked is not None and asked != deployment.max_model_len:
            raise ValueError(
                f"scheduler_config.max_model_len {asked} differs from the deployment's context "
                f"length {deployment.max_model_len}: set model_config.max_model_len instead"
            )
        from samebits.engine.graph_policy import graph_config
        from samebits.engine.heap import freeze_startup_heap
        from samebits.engine.runner import ModelRunner

        plan = deployment.plan
        cfg = resolved_parts(
            cfg, **_plan_settings(plan), max_model_len=deployment.max_model_len,
            num_threads=plan.num_threads or None,  # GPU plans run no CPU kernel threads (0)
            num_kv_blocks=_num_kv_blocks(deployment, cfg),
            async_scheduling=_async_scheduling(plan.device, cfg),
        )  # fmt: skip
        cache = cfg.cache_config
        from samebits.analysis.kernel_prover.gate import check_block_size

        check_block_size(deployment, cache.block_size)  # certified GPU plans: certified pages
        sched = dataclasses.replace(cfg.scheduler_config, max_model_len=deployment.max_model_len)
        cfg = dataclasses.replace(cfg, scheduler_config=sched)
        salt = bytes.fromhex(deployment.fingerprint)
        scheduler = Scheduler.from_configs(cache, sched, salt)
        graphs = graph_config(plan.device, cfg.runtime_config.enforce_eager, sched.max_num_seqs)
        runner = ModelRunner(
            deployment.model, cache.block_size, cache.num_kv_blocks, graphs,
            deployment.max_model_len,
        )  # fmt: skip
        engine = cls(deployment, runner, scheduler, cache.block_size, cfg)
        freeze_startup_heap()  # no step pays a full collection of the start-up heap
        return engine

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
        prompt_token_ids, prompt = self._prompt_ids(prompt_token_ids, prompt)
        if not isinstance(output_kind, RequestOutputKind):
            raise TypeError(f"output_kind must be a RequestOutputKind, got {output_kind!r}")
        self._validate(request_id, prompt_token_ids, params)
        guide = self._grammar_matcher(params)
        params = params if params.seed is not None else params.with_seed(new_seed())
        request = Request(
            request_id=request_id,
            prompt_token_ids=list(prompt_token_ids),
            max_tokens=params.max_tokens,
            eos_token_ids=tuple(self.tokenizer.eos_token_ids),
            stop_token_ids=tuple(params.stop_token_ids),
            ignore_eos=params.ignore_eos,
            max_model_len=self.max_model_len,
            params=params,
            seed=params.seed,
            min_tokens=params.min_tokens,
            needs_prompt_rows=params.prompt_logprobs is not None,
        )
        self.scheduler.add_request(request)
        detok = IncrementalDetokenizer(self.tokenizer, params.skip_special_tokens)
        state = _RequestState(request, params, prompt, detok, output_kind, guide=guide)
        if output_kind is RequestOutputKind.DELTA:
            state.prompt_ids_out = list(prompt_token_ids)
        if params.prompt_logprobs is not None:
            state.prompt_logprobs = [None]
        self._states[request_id] = state

    def _grammar_matcher(self, params: SamplingParams) -> GrammarMatcher | None:
        """A fresh matcher for a structured-outputs request (None otherwise); the tokenizer
        view is built on the first such request and shared read-only."""
        if params.structured_outputs is None:
            return None
        if self._grammar_tokenizer is None:
            self._grammar_tokenizer = GrammarTokenizer(self.tokenizer, self.vocab_size)
        return GrammarMatcher(self._grammar_tokenizer, params.structured_outputs)

    def _prompt_ids(self, given: object, prompt: str | None) -> tuple[list[int], str | None]:
        """(token ids, recorded text) of an add_request prompt; TypeError for unknown types."""
        if isinstance(given, dict):
            unknown = sorted(map(str, set(given) - {"prompt", "prompt_token_ids"}))
            if unknown or not given:
                raise TypeError(
                    "a dict prompt takes the keys 'prompt_token_ids' and/or 'prompt', got "
                    f"{unknown or 'none'}"
                )
            text = given.get("prompt")
            if text is not None and not isinstance(text, str):
                raise TypeError(f"dict prompt: 'prompt' must be a str, got {type(text).__name__}")
            prompt = prompt if prompt is not None else text
            if "prompt_token_ids" not in given:
                given = text
            else:
                given = given["prompt_token_ids"]
                if not isinstance(given, list | tuple):
                    raise TypeError(
                        "dict prompt: 'prompt_token_ids' must be a list of ints, got "
                        f"{type(given).__name__}"
                    )
        if isinstance(given, str):
            ids = self.tokenizer.encode(given, add_special_tokens=True)
            return ids, prompt if prompt is not None else given
        if not isinstance(given, list | tuple):
            raise TypeError(
                "prompt must be a str, a list of token ids, {'prompt_token_ids': [...]} or "
                f"{{'prompt': '...'}}, got {type(given).__name__}"
            )
        for t in given:
            if not isinstance(t, int) or isinstance(t, bool):
                raise TypeError(f"prompt token ids must be ints, got {type(t).__name__} {t!r}")
        return list(given), prompt

    def _validate(self, request_id: str, ids: list[int], params: SamplingParams) -> None:
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        if params.n != 1:
            raise ValueError("LLMEngine.add_request takes n=1; expand n>1 with derive_seed")
        if request_id in self._states:
            raise ValueError(f"request_id {request_id!r} is already in use")
        if not ids:
            raise ValueError("the prompt is empty: it must have at least one token")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"prompt token id {bad[0]!r} is out of range [0, {self.vocab_size})")
        if len(ids) + params.max_tokens > self.max_model_len:
            raise ValueError(
                f"prompt ({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the "
                f"context length of {self.max_model_len} tokens"
            )
        bad = [t for t, _ in params.logit_bias if t >= self.vocab_size]
        if bad:
            raise ValueError(f"logit_bias token id {bad[0]} is out of range [0, {self.vocab_size})")

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
        self._held.pop(request_id, None)
        if self._states.pop(request_id, None) is not None:
            self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)

    def has_unfinished_requests(self) -> bool:
        """Whether a request still runs, waits, or has a held final output."""
        return self.scheduler.has_unfinished_requests() or bool(self._held)

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
        launched, self._inflight = self._inflight or self._launch(), None
        if launched is None:
            return self._release_held(wait=True)
        sched_out, result = launched
        ahead = self._launch_ahead(sched_out, result)
        sampled = self._sample_tokens(sched_out, result)
        finished = {r.request_id for r in self.scheduler.update_from_output(sched_out, sampled)}
        self.num_steps += 1
        self.num_batched_tokens_total += sched_out.num_batched_tokens
        self.last_batch_size = len(sched_out.scheduled)
        for rid, token in sampled.items():
            self._isolated(rid, self._check_stop, rid, token, finished)
        if self.async_scheduling:
            self._inflight = ahead or self._launch()
        self._record_rows(sched_out, result, sampled)
        outputs: list[RequestOutput] = []
        for rid, token in sampled.items():
            out = (
                self._isolated(rid, self._emit, rid, token, finished)
                if rid in self._states
                else None
            )
            if out is not None:
                outputs.append(out)
        for rid in finished:
            if rid not in self._held:
                self._states.pop(rid, None)
        return outputs + self._release_held(wait=False)

    def _launch(self) -> tuple[Any, StepResult] | None:
        """Schedule a step and start it on the runner (None: nothing to run)."""
        sched_out = self.scheduler.schedule()
        if not sched_out.scheduled:
            return None
        return sched_out, self._start(sched_out)

    def _start(self, sched_out, feed: StepResult | None = None) -> StepResult:
        """Launch on the runner. A ModelRunner that can hash the rows on the device does so
        for a step whose outputs are not streamed (the device digest arrives a few steps
        later: `DIGEST_STREAMS`; a streamed output waits for its digests, hashed on the host
        in about a millisecond), and is told whether the rows are needed on the host at all
        (`_needs_host_rows`). Hints only: the digests are the same strings either way."""
        if not getattr(self.runner, "feeds_tokens", False):
            return launch_step(self.runner, sched_out)
        on_device = getattr(self.runner, "device_digests", False) and not self._streams(sched_out)
        copy_rows = not on_device or self._needs_host_rows(sched_out)
        return self.runner.launch(
            sched_out, feed=feed, copy_rows=copy_rows, device_digests=on_device
        )

    def _streams(self, sched_out) -> bool:
        """Whether a request sampling in the step reports before it finishes (not FINAL_ONLY)."""
        states = (self._states.get(s.request_id) for s in sched_out.scheduled if s.sample)
        final = RequestOutputKind.FINAL_ONLY
        return any(st.output_kind is not final for st in states if st is not None)

    def _needs_host_rows(self, sched_out) -> bool:
        """Whether a request of the step reads its rows on the host: prompt logprobs,
        logprobs or returned logits, a grammar, or a token that is not the row's argmax."""
        for s in sched_out.scheduled:
            st = self._states.get(s.request_id)
            if getattr(s, "all_rows", False):
                return True
            if s.sample and st is not None and (st.needs_rows or not _takes_argmax(st)):
                return True
        return False

    def _launch_ahead(self, sched_out, result: StepResult) -> tuple[Any, StepResult] | None:
        """The next step, scheduled and launched before this one's tokens are known, when it
        only continues this one and every token of this one is its argmax (plain greedy, no
        grammar): fed from `result.tokens()` on the device. None: schedule after update."""
        if not (self.async_scheduling and self.lookahead):
            return None
        if not getattr(self.runner, "feeds_tokens", False) or not self._all_plain_greedy(sched_out):
            return None
        ahead = self.scheduler.schedule_ahead(sched_out)
        if ahead is None:
            return None
        self.num_steps_ahead += 1
        return ahead, self._start(ahead, feed=result)

    def _all_plain_greedy(self, sched_out) -> bool:
        """Whether every live request sampling in the step takes its row's argmax."""
        states = (self._states.get(s.request_id) for s in sched_out.scheduled if s.sample)
        return all(_takes_argmax(st) for st in states if st is not None)

    def _sample_tokens(self, sched_out, result: StepResult) -> dict[str, int]:
        """This step's token per sampling request still live. A plain-greedy row's token is
        its argmax (`greedy_token`): read from the runner's argmax when it has one
        (no wait for the rows), else `sample` runs on the host row."""
        rids = [
            s.request_id for s in sched_out.scheduled if s.sample and s.request_id in self._states
        ]
        greedy = result.greedy()
        sampled: dict[str, int] = {}
        host: list[str] = []
        for rid in rids:
            if greedy is None or not _takes_argmax(self._states[rid]):
                host.append(rid)
                continue
            token = self._isolated(rid, greedy_token, *greedy[rid])
            if token is not None:
                sampled[rid] = token
        rows = result.rows() if host else {}
        items = [(rid, rows[rid]) for rid in host]
        for (rid, _), token in zip(items, map_rows(self._sample, items), strict=True):
            if isinstance(token, Exception):
                self._fail(rid, token)
            else:
                sampled[rid] = token
        return {rid: sampled[rid] for rid in rids if rid in sampled}

    def _record_rows(self, sched_out, result: StepResult, sampled: dict[str, int]) -> None:
        """Fold the step's rows into the requests' records: prompt logprobs of `all_rows`
        chunks, then each sampled row's digest (never skipped: the runner's device digest,
        else hashed from the host row), logprobs and copy. The rows cross to the host only
        when something here reads them."""
        live = [rid for rid in sampled if rid in self._states]
        device = result.digests()
        wanted = device is None or self._needs_host_rows(sched_out)
        rows = result.rows() if wanted else StepLogits()
        starts = {rid: start for rid, (start, _) in step_logits_chunks(rows)}
        chunks = [(rid, r) for rid, (_, r) in step_logits_chunks(rows) if rid in self._states]
        fold = lambda rid, r: self._prompt_logprobs(rid, starts[rid], r)  # noqa: E731
        for (rid, _), err in zip(chunks, map_rows(fold, chunks), strict=True):
            if err is not None:
                self._fail(rid, err)
        pending = []
        for rid in live:
            digest = device[rid] if device is not None else digest_later(logits_digest, rows[rid])
            self._states[rid].digests.append(digest)
            if not isinstance(digest, str):
                pending.append(digest)
        self._bound_digests_ahead(
            pending, DIGEST_STEPS_AHEAD if device is None else DEVICE_DIGEST_STEPS_AHEAD
        )
        items = [(rid, rows[rid]) for rid in live if self._states[rid].needs_rows]
        record = lambda rid, row: self._record(rid, row, sampled[rid])  # noqa: E731
        for (rid, _), err in zip(items, map_rows(record, items), strict=True):
            if err is not None:
                self._fail(rid, err)

    def _bound_digests_ahead(self, pending: list, limit: int) -> None:
        """Keep the digests of at most `limit` steps in flight (each holds its step's host
        rows or device buffers): wait for the oldest beyond that."""
        self._digest_steps.append(pending)
        while len(self._digest_steps) > limit:
            resolved(self._digest_steps.popleft())

    def pop_failures(self) -> dict[str, Exception]:
        """Requests aborted by an exception since the last call, with that exception."""
        failures, self._failures = self._failures, {}
        return failures

    def _isolated(self, rid: str, work, *args):
        """work(*args), or None after aborting `rid` if it raised (recorded for pop_failures)."""
        try:
            return work(*args)
        except Exception as exc:  # noqa: BLE001 - isolate one request's failure
            self._fail(rid, exc)
            return None

    def _fail(self, rid: str, exc: Exception) -> None:
        """Abort `rid` after an exception in its own work (recorded for pop_failures)."""
        self._failures[rid] = exc
        self.abort_request(rid)

    def _check_stop(self, rid: str, token: int, finished: set[str]) -> None:
        """Finish the request on a stop string or a complete grammar (before the next step
        is scheduled). The token is detokenized here only when stop strings need the text."""
        if rid in finished:
            return
        st = self._states[rid]
        if (st.params.stop and self._apply_stop_strings(rid, token)) or self._grammar_done(rid):
            self.scheduler.finish_request(rid, RequestStatus.FINISHED_STOPPED)
            finished.add(rid)

    def _emit(self, rid: str, token: int, finished: set[str]) -> RequestOutput | None:
        """Detokenize the new token (unless `_check_stop` did) and build the request's output
        (None for an unfinished FINAL_ONLY request, and for a finished one whose digests are
        still computing on the device or the row workers: held, built by a later step)."""
        st = self._states[rid]
        if st.detok.num_tokens < len(st.request.output_token_ids):
            self._append_text(rid, token)
        done = rid in finished
        if st.output_kind is RequestOutputKind.FINAL_ONLY:
            if not done:
                return None
            if not all_done(st.digests):
                self._held[rid] = None
                self.num_held_outputs += 1
                return None
        return self._output(rid, done)

    def _release_held(self, wait: bool) -> list[RequestOutput]:
        """The final outputs of the held requests, in the order they finished, up to the first
        whose digests are still computing (`wait`: all, waiting for their digests)."""
        ready = []
        for rid in self._held:
            if not (wait or all_done(self._states[rid].digests)):
                break
            ready.append(rid)
        outputs = []
        for rid in ready:
            del self._held[rid]
            out = self._isolated(rid, self._output, rid, True)
            self._states.pop(rid, None)
            if out is not None:
                outputs.append(out)
        return outputs

    def _prompt_logprobs(self, rid: str, start: int, rows: np.ndarray) -> Exception | None:
        """Fold a chunk's rows into the request's prompt logprobs: the row at prompt position
        p gives entry p + 1 (logprob of prompt token p + 1 and the top k, by
        `compute_logprobs`, as for sampled tokens). Rows already folded in (a recomputed
        chunk after a preemption) and rows past the prompt are skipped."""
        try:
            st = self._states[rid]
            lps, prompt = st.prompt_logprobs, st.request.prompt_token_ids
            k = st.params.prompt_logprobs
            if lps is None or k is None:
                return None
            for position in range(start, start + len(rows)):
                if position + 1 >= len(prompt):
                    break
                if position + 1 == len(lps):
                    lps.append(compute_logprobs(rows[position - start], prompt[position + 1], k))
            return None
        except Exception as exc:  # noqa: BLE001 - returned to the caller, per request
            return exc

    def _sample(self, rid: str, row: np.ndarray) -> int:
        """`sample` on the host row (the grammar matcher, if any, accepts the token)."""
        st = self._states[rid]
        req, params = st.request, st.params
        position = len(req.output_token_ids)
        allowed = self._allowed(st, position)
        token = sample(
            row, params, params.seed, position, req.prompt_token_ids, req.output_token_ids,
            req.eos_token_ids, allowed,
        )  # fmt: skip
        if st.guide is not None:
            st.guide.accept(token)
        return token

    def _record(self, rid: str, row: np.ndarray, token: int) -> Exception | None:
        """The sampled row's logprobs and copy (as the request asks); an exception is
        returned (the caller aborts the request)."""
        try:
            st = self._states[rid]
            if st.params.logprobs is not None:
                lp = compute_logprobs(row, token, st.params.logprobs)
                st.logprobs.append(lp)
                st.cumulative_logprob += lp[token]
            if st.params.return_logits:
                st.logits.append(row.copy())
            return None
        except Exception as exc:  # noqa: BLE001 - returned to the caller, per request
            return exc

    @staticmethod
    def _allowed(st: _RequestState, position: int) -> np.ndarray | None:
        """The grammar's mask before output `position` (None without structured outputs)."""
        if st.guide is None:
            return None
        if st.guide.num_accepted != position:
            raise AssertionError(
                f"grammar matcher of {st.request.request_id} accepted {st.guide.num_accepted} "
                f"tokens, the request has {position} outputs"
            )
        return st.guide.allowed()

    def _grammar_done(self, rid: str) -> bool:
        """Whether the request's grammar is complete (nothing may follow): it stops."""
        guide = self._states[rid].guide
        return guide is not None and guide.terminated

    def _append_text(self, rid: str, token: int) -> int:
        """Detokenize `token`; returns where the stop-string search should start."""
        st = self._states[rid]
        start = len(st.detok.text)
        st.detok.append(token)
        st.text = st.detok.text
        return start

    def _apply_stop_strings(self, rid: str, token: int) -> bool:
        st = self._states[rid]
        start = self._append_text(rid, token)
        if not st.params.stop or len(st.request.output_token_ids) <= st.params.min_tokens:
            return False  # vLLM: stop strings count only after more than min_tokens outputs
        hit = find_stop_string(st.detok.text, st.params.stop, start)
        if hit is None:
            return False
        index, stop = hit
        st.text = truncate_at_stop(st.detok.text, index, stop, st.params.include_stop_str_in_output)
        st.stop_reason = stop
        return True

    def _output(self, rid: str, finished: bool) -> RequestOutput:
        st = self._states[rid]
        req = st.request
        if finished and st.stop_reason is None:
            st.detok.flush()
            st.text = st.detok.text
        shown = len(st.text) if finished else _shown_length(st.text, st.params.stop)
        if st.output_kind is RequestOutputKind.DELTA:
            return self._delta_output(rid, st, finished, shown)
        if len(st.digests) != len(req.output_token_ids):  # a digest is never skipped
            raise AssertionError(
                f"output of {rid}: {len(req.output_token_ids)} tokens, {len(st.digests)} digests"
            )
        completion = CompletionOutput(
            index=0,
            text=st.text[:shown],
            token_ids=list(req.output_token_ids),
            logprobs=list(st.logprobs) if st.params.logprobs is not None else None,
            finish_reason=req.finish_reason if finished else None,
            stop_reason=st.stop_reason if st.stop_reason is not None else req.stop_reason,
            seed=st.params.seed,
            logits_digests=resolved(st.digests),
            logits=np.stack(st.logits) if st.params.return_logits and st.logits else None,
            cumulative_logprob=st.cumulative_logprob if st.params.logprobs is not None else None,
        )
        return RequestOutput(
            request_id=rid,
            prompt=st.prompt,
            prompt_token_ids=list(req.prompt_token_ids),
            outputs=[completion],
            finished=finished,
            fingerprint=self.fingerprint,
            prompt_logprobs=_complete_prompt_logprobs(
                st.prompt_logprobs, len(req.prompt_token_ids)
            ),
        )

    def _delta_output(
        self, rid: str, st: _RequestState, finished: bool, shown: int
    ) -> RequestOutput:
        """What is new since the request's previous output: O(new), nothing is copied from
        earlier positions. The pending digests / logprobs / rows are handed over as they are
        (fresh lists are left), the token ids and text are the unsent slices."""
        req = st.request
        new_tokens = req.output_token_ids[st.sent_tokens :]
        if len(st.digests) != len(new_tokens) or shown < st.sent_text:
            raise AssertionError(
                f"delta output of {rid}: {len(new_tokens)} new tokens but {len(st.digests)} "
                f"digests, or the text went back ({shown} < {st.sent_text} characters)"
            )
        first = st.sent_tokens == 0
        digests, st.digests = st.digests, []
        logprobs, logits = None, None
        if st.params.logprobs is not None:
            logprobs, st.logprobs = st.logprobs, []
        if st.params.return_logits and st.logits:
            logits, st.logits = np.stack(st.logits), []
        text = st.text[st.sent_text : shown]
        st.sent_tokens += len(new_tokens)
        st.sent_text = shown
        completion = CompletionOutput(
            index=0,
            text=text,
            token_ids=new_tokens,
            logprobs=logprobs,
            finish_reason=req.finish_reason if finished else None,
            stop_reason=st.stop_reason if st.stop_reason is not None else req.stop_reason,
            seed=st.params.seed,
            logits_digests=resolved(digests),
            logits=logits,
            cumulative_logprob=st.cumulative_logprob if st.params.logprobs is not None else None,
        )
        prompt_lps = None
        if first:
            prompt_lps = _complete_prompt_logprobs(st.prompt_logprobs, len(req.prompt_token_ids))
        return RequestOutput(
            request_id=rid,
            prompt=st.prompt,
            prompt_token_ids=st.prompt_ids_out,
            outputs=[completion],
            finished=finished,
            fingerprint=self.fingerprint,
            prompt_logprobs=prompt_lps,
        )

    def stats(self) -> dict[str, float]:
        """Counters for /metrics (scheduler counters plus step totals)."""
        out: dict[str, float] = dict(dataclasses.asdict(self.scheduler.make_stats()))
        out.update(
            num_steps=self.num_steps,
            num_batched_tokens_total=self.num_batched_tokens_total,
            last_batch_size=self.last_batch_size,
        )
        out.update(getattr(self.runner, "stats", dict)())  # graph / eager steps on a GPU
        return out


def _plan_settings(plan) -> dict[str, str]:
    """The deployment's device, dtype and plan name as config values; nothing for a plan the
    config cannot name (a test's interpreter plan): the config's values are kept then."""
    if plan.name not in KERNEL_PLANS or plan.dtype not in DEVICE_DTYPES.get(plan.device, ()):
        return {}
    return {"device": plan.device, "dtype": plan.dtype, "kernel_plan": plan.name}


def _num_kv_blocks(deployment, cfg: EngineConfig) -> int:
    """The KV cache's block count: `num_kv_blocks` when set; else on a GPU what fits in
    `gpu_memory_utilization` of its memory, capped at KV_BLOCKS_PER_SEQUENCE_SLOT times what
    `max_num_seqs` full-length sequences need; else (CPU) DEFAULT_NUM_KV_BLOCKS."""
    cache = cfg.cache_config
    if cache.num_kv_blocks is not None:
        return cache.num_kv_blocks
    if deployment.plan.device == "cpu":
        return DEFAULT_NUM_KV_BLOCKS
    from samebits.engine.runner import kv_blocks_for_device

    per_sequence = -(-deployment.max_model_len // cache.block_size)
    useful = KV_BLOCKS_PER_SEQUENCE_SLOT * cfg.scheduler_config.max_num_seqs * per_sequence
    fits = kv_blocks_for_device(deployment.model, cache.block_size, cache.gpu_memory_utilization)
    return min(useful, fits)


def _takes_argmax(st: _RequestState) -> bool:
    """Whether the request's next token is its row's argmax (plain greedy, no grammar)."""
    return st.guide is None and is_plain_greedy(st.params, len(st.request.output_token_ids), None)


def _async_scheduling(device: str, cfg: EngineConfig) -> bool:
    """The config's `async_scheduling`; None: on for a GPU, off for the CPU."""
    asked = cfg.runtime_config.async_scheduling
    return device != "cpu" if asked is None else asked


def step_logits_chunks(step_logits) -> list[tuple[str, tuple[int, np.ndarray]]]:
    """The `chunk_rows` of a runner's result (a plain dict of sampled rows has none)."""
    return list(getattr(step_logits, "chunk_rows", {}).items())


def _complete_prompt_logprobs(lps: PromptLogprobs | None, num_prompt: int):
    """A copy of the prompt logprobs once every prompt position has its entry (they are, by
    the time a request has an output: its sampled row comes from the last prompt chunk)."""
    if lps is None:
        return None
    if len(lps) != num_prompt:
        raise AssertionError(f"prompt logprobs cover {len(lps)} of {num_prompt} positions")
    return list(lps)


def _shown_length(text: str, stops) -> int:
    """While running, hide the last len(longest stop) - 1 characters: they may start a stop
    string, and streamed text must only ever grow (the final text is cut at the stop, never
    before what was shown: a stop found now ends in the new text, so it starts in the held
    back part). Never negative: a text shorter than the hold shows nothing."""
    hold = max((len(s) for s in stops), default=1) - 1
    return max(0, len(text) - hold)

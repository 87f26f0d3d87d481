"""The engine determinism matrix: scenarios that vary batching, chunking, prefix caching,
cache pressure, arrivals/aborts and sampling, each ending in the spec's predicate.

Every tracked request's view (its logits rows and tokens) must be a prefix of `Ref(input)`
(`samebits.spec.is_reference_prefix`), and views of equal inputs across all scenarios must
agree (`samebits.spec.deterministic`). The report counts logit-row comparisons per category.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from samebits.config import DEFAULT_NUM_KV_BLOCKS
from samebits.engine.engine import LLMEngine
from samebits.engine.runner import cold_logits
from samebits.outputs import RequestOutputKind
from samebits.sampling import SamplingParams
from samebits.spec import (
    RequestView,
    deterministic,
    first_disagreement,
    first_mismatch,
    is_reference_prefix,
    reference_view,
    view_from_output,
)

FINAL = RequestOutputKind.FINAL_ONLY  # only final outputs are read

CATEGORIES = ("batch", "chunk", "prefill_vs_decode", "prefix", "pressure", "arrivals", "sampling")
LONG = "long"  # the long-context scenarios (`MatrixSize.long_prompts`), counted when built
WINDOW = "window"  # sliding-window scenarios (`MatrixSize.window`), counted when built


@dataclass(frozen=True)
class Job:
    """One request of a scenario. `abort_at` aborts it at that step (it is then untracked)."""

    prompt: tuple[int, ...]
    params: SamplingParams
    arrival: int = 0
    abort_at: int | None = None


@dataclass
class Scenario:
    category: str
    name: str
    jobs: list[Job]
    engine: dict = field(default_factory=dict)


@dataclass
class Report:
    rows: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CATEGORIES})
    mismatches: list[str] = field(default_factory=list)
    scenarios: int = 0
    preemptions: int = 0
    prefix_hits: int = 0

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    def summary(self) -> str:
        per = ", ".join(f"{c}={n}" for c, n in self.rows.items())
        return (
            f"{self.total_rows} logit-row comparisons over {self.scenarios} scenarios ({per}); "
            f"{len(self.mismatches)} mismatches; {self.preemptions} preemptions; "
            f"{self.prefix_hits} prefix-cache hit tokens"
        )


def run_scenario(deployment, scenario: Scenario) -> tuple[list[RequestView | None], dict]:
    """Run the jobs through a fresh engine; returns one view per job (None if aborted).
    The cache is DEFAULT_NUM_KV_BLOCKS unless the scenario sizes it (on every device: a
    scenario is about bits, not memory, and a GPU engine per scenario must not claim
    `gpu_memory_utilization` of the device each time). Only final outputs are read, so the
    requests are FINAL_ONLY (on a GPU their digests are then hashed on the device)."""
    kwargs = {"num_kv_blocks": DEFAULT_NUM_KV_BLOCKS, **scenario.engine}
    engine = LLMEngine.from_deployment(deployment, **kwargs)
    jobs = scenario.jobs
    finished: dict[str, object] = {}
    step = 0
    while step <= max(j.arrival for j in jobs) or engine.has_unfinished_requests():
        for i, job in enumerate(jobs):
            if job.arrival == step:
                engine.add_request(str(i), list(job.prompt), job.params, output_kind=FINAL)
            if job.abort_at == step:
                engine.abort_request(str(i))
        for out in engine.step():
            if out.finished:
                finished[out.request_id] = out
        engine.scheduler.kv_cache_manager.check_integrity()
        step += 1
    views = [_view(job, finished.get(str(i))) for i, job in enumerate(jobs)]
    return views, engine.stats()


def _view(job: Job, out) -> RequestView | None:
    if out is None or job.abort_at is not None:
        return None
    c = out.outputs[0]
    return view_from_output(job.prompt, job.params, c.token_ids, c.logits)


class RefCache:
    """Ref(input, n) per distinct input, computed once (cold, batch of one, no cache)."""

    def __init__(self, deployment):
        self.deployment = deployment
        self._views: dict[tuple, RequestView] = {}

    def get(self, job: Job) -> RequestView:
        key = (job.prompt, job.params.sampler_state(), job.params.max_tokens, job.params.ignore_eos)
        if key not in self._views:
            eos = () if job.params.ignore_eos else tuple(self.deployment.tokenizer.eos_token_ids)
            self._views[key] = reference_view(
                lambda ids: cold_logits(self.deployment, ids), job.prompt, job.params,
                job.params.max_tokens, eos,
            )  # fmt: skip
        return self._views[key]


def check_matrix(deployment, scenarios: Sequence[Scenario]) -> Report:
    """Run every scenario and check each tracked view against Ref and against each other."""
    refs, report, all_views = RefCache(deployment), Report(), []
    for sc in scenarios:
        views, stats = run_scenario(deployment, sc)
        report.scenarios += 1
        report.preemptions += int(stats["num_preemptions"])
        report.prefix_hits += int(stats["prefix_cache_hits"])
        for job, view in zip(sc.jobs, views, strict=True):
            if view is None:
                continue
            all_views.append(view)
            ref = refs.get(job)
            report.rows[sc.category] = report.rows.get(sc.category, 0) + len(view.records)
            if not is_reference_prefix(view, ref):
                report.mismatches.append(f"{sc.name}: {first_mismatch(view, ref)}")
    if not deterministic(all_views, all_views):
        report.mismatches.append(f"views disagree: {first_disagreement(all_views, all_views)}")
    return report


# ---------------------------------------------------------------------------- scenarios
PRESSURE_SLOTS = 96  # the pressure scenario's KV token slots, whatever its page size


@dataclass(frozen=True)
class MatrixSize:
    """How big a matrix to build (tiny random models take the large one)."""

    vocab: int
    n_out: int = 6
    batch_sizes: tuple[int, ...] = (2, 5, 16, 32)
    budgets: tuple[int, ...] = (5, 16, 64, 512)
    repeats: int = 2
    # The KV page size of the prefix, pressure and follow-up scenarios (small pages put cache
    # hits and preemptions inside short prompts); a certified GPU plan takes 16, the smallest
    # page its attention certificates cover.
    small_block: int = 4
    # Every engine of the matrix with this `async_scheduling` (None: the device's default).
    async_scheduling: bool | None = None
    # Long-context scenarios (category "long"): prompt lengths (short, long) crossing several
    # attention spans, decoding `long_n_out` tokens; None: none are built.
    long_prompts: tuple[int, int] | None = None
    long_n_out: int = 4
    # Sliding-window scenarios (category "window") for a model whose local layers see this
    # many keys: prompts, chunks, batches, decodes and prefix hits across the window's edge;
    # None: none are built.
    window: int | None = None


def build_scenarios(size: MatrixSize, seed: int = 0) -> list[Scenario]:
    """The matrix: every category, deterministic from `seed`."""
    rng = random.Random(seed)
    pool = _Pool(rng, size)
    out: list[Scenario] = []
    for r in range(size.repeats):
        out += _batch(pool, rng, size, r) + _chunk(pool, size, r) + _prefix(pool, size, r)
        out += _pressure(pool, size, r) + _arrivals(pool, rng, r) + _sampling(pool, rng, r)
    if size.long_prompts is not None:
        out += _long(pool, size)
    if size.window is not None:
        out += _window(pool, size)
    if size.async_scheduling is None:
        return out
    runtime = {"async_scheduling": size.async_scheduling}
    return [dataclasses.replace(s, engine={**s.engine, **runtime}) for s in out]


class _Pool:
    """Prompts sharing prefixes of varied lengths (hits end inside blocks, too)."""

    def __init__(self, rng: random.Random, size: MatrixSize):
        self.rng, self.size = rng, size
        bases = [self.tokens(n) for n in (5, 16, 21, 33)]
        self.prompts = [b + self.tokens(rng.randint(1, 12)) for b in bases for _ in range(3)]

    def tokens(self, n: int) -> tuple[int, ...]:
        return tuple(self.rng.randrange(self.size.vocab) for _ in range(n))

    def prompt(self) -> tuple[int, ...]:
        return self.rng.choice(self.prompts)

    def params(self, seed: int, **kw) -> SamplingParams:
        base = dict(max_tokens=self.size.n_out, temperature=0.0, ignore_eos=True,
                    return_logits=True, seed=seed)  # fmt: skip
        base.update(kw)
        return SamplingParams(**base)

    def job(self, arrival: int = 0, **kw) -> Job:
        return Job(self.prompt(), self.params(self.rng.randrange(4), **kw), arrival)


def _batch(pool: _Pool, rng, size: MatrixSize, r: int) -> list[Scenario]:
    target = Job(pool.prompts[r], pool.params(7))
    out = [Scenario("batch", f"batch-alone-{r}", [target])]
    for b in size.batch_sizes:
        jobs = [pool.job() for _ in range(b - 1)]
        jobs.insert(rng.randrange(b), target)
        out.append(Scenario("batch", f"batch-{b}-{r}", jobs, {"max_num_seqs": max(b, 2)}))
    return out


def _chunk(pool: _Pool, size: MatrixSize, r: int) -> list[Scenario]:
    jobs = [Job(pool.prompts[(r + i) % len(pool.prompts)], pool.params(i)) for i in range(3)]
    return [
        Scenario("chunk", f"budget-{b}-{r}", jobs, {"max_num_batched_tokens": b})
        for b in size.budgets
    ]


def _prefix(pool: _Pool, size: MatrixSize, r: int) -> list[Scenario]:
    jobs = [pool.job(arrival=i) for i in range(6)]
    repeat = [dataclasses.replace(j, arrival=j.arrival + 30) for j in jobs]  # hot cache rerun
    return [
        Scenario("prefix", f"prefix-cold-hot-{r}", jobs + repeat, {"block_size": size.small_block}),
        Scenario("prefix", f"prefix-nocache-{r}", jobs, {"enable_prefix_caching": False}),
    ]


def _pressure(pool: _Pool, size: MatrixSize, r: int) -> list[Scenario]:
    """Six requests in 96 KV slots, each decoding across at least one page boundary: the
    running requests outgrow the cache at any page size (up to 32) and get preempted."""
    jobs = [pool.job(max_tokens=size.n_out + size.small_block) for _ in range(6)]
    blocks = PRESSURE_SLOTS // size.small_block
    cfg = {"block_size": size.small_block, "num_kv_blocks": blocks, "max_num_batched_tokens": 32}
    return [Scenario("pressure", f"pressure-{r}", jobs, cfg)]


def _arrivals(pool: _Pool, rng, r: int) -> list[Scenario]:
    jobs = [pool.job(arrival=rng.randrange(8)) for _ in range(6)]
    for i in (1, 4):
        jobs[i] = dataclasses.replace(jobs[i], abort_at=jobs[i].arrival + rng.randrange(1, 4))
    return [Scenario("arrivals", f"staggered-aborts-{r}", jobs, {"max_num_batched_tokens": 16})]


def _sampling(pool: _Pool, rng, r: int) -> list[Scenario]:
    kws = [dict(temperature=0.7, top_p=0.9), dict(temperature=1.0, top_k=20),
           dict(temperature=1.0, top_p=0.8, top_k=50, repetition_penalty=1.1)]  # fmt: skip
    jobs = [Job(pool.prompt(), pool.params(100 + i, **kw)) for i, kw in enumerate(kws)]
    mixed = jobs + [pool.job() for _ in range(4)]
    return [
        Scenario("sampling", f"sampling-alone-{r}", jobs[:1]),
        Scenario("sampling", f"sampling-batched-{r}", mixed, {"max_num_batched_tokens": 16}),
    ]


def _long(pool: _Pool, size: MatrixSize) -> list[Scenario]:
    """Prompts of `long_prompts` tokens (several spans of `ATTENTION_SPAN` keys): alone;
    chunked with budgets just below / above a span and across spans; batched with each other
    and short requests (split-KV decode in a batch); a prefix-cache hit that ends mid-span;
    two long requests in a cache too small for both (preemption, recompute)."""
    from samebits.kernels.interface import ATTENTION_SPAN as SPAN

    assert size.long_prompts is not None
    short, long = size.long_prompts
    params = pool.params(11, max_tokens=size.long_n_out)
    a, b = Job(pool.tokens(long), params), Job(pool.tokens(short), params)
    c = Job(a.prompt[: 2 * SPAN + SPAN // 2 + 5] + pool.tokens(9), params, arrival=0)
    page = size.small_block
    room = {"block_size": page, "num_kv_blocks": 2 * (long + short) // page + 64}
    out = [Scenario(LONG, "long-alone", [a], room)]
    out += [Scenario(LONG, f"long-budget-{n}", [a, b], {**room, "max_num_batched_tokens": n})
            for n in (SPAN - 3, SPAN + 1, 4 * SPAN + 7)]  # fmt: skip
    mixed = [a, b] + [pool.job(max_tokens=size.long_n_out) for _ in range(5)]
    out.append(Scenario(LONG, "long-batch", mixed, {**room, "max_num_seqs": 8}))
    hot = [a, dataclasses.replace(c, arrival=64)]  # after a has finished, at any budget
    out.append(Scenario(LONG, "long-prefix-mid-span", hot, room))
    grow = pool.params(12, max_tokens=size.long_n_out + page)  # each decodes across a page
    twins = [Job(b.prompt, grow), Job(pool.tokens(short), grow)]
    blocks = (3 * short // 2) // page + 4
    # a budget of one whole prompt: the second is admitted while the first decodes, then one
    # must give way (at any device budget or prompt length)
    cfg = {"block_size": page, "num_kv_blocks": blocks, "max_num_batched_tokens": short + page}
    out.append(Scenario(LONG, "long-pressure", twins, cfg))
    return out


def _window(pool: _Pool, size: MatrixSize) -> list[Scenario]:
    """Around a sliding window of W keys (window edges at absolute positions): a prompt of
    3W + 7 tokens alone, chunked with budgets W - 1, W, W + 1 and 7 (chunk edges on both
    sides of a window edge), as the needle in batches of 2, 5 and 16; a request decoding
    across the edge (prompt W - 3, 8 tokens out); a prefix-cache hit of W + 13 tokens (its
    cached blocks partly below the window of the follow-up's positions)."""
    assert size.window is not None
    w, page = size.window, size.small_block
    params = pool.params(21, max_tokens=size.n_out)
    a = Job(pool.tokens(3 * w + 7), params)
    room = {"block_size": page, "num_kv_blocks": 8 * (4 * w) // page + 64}
    out = [Scenario(WINDOW, "window-alone", [a], room)]
    out += [Scenario(WINDOW, f"window-budget-{n}", [a], {**room, "max_num_batched_tokens": n})
            for n in (w - 1, w, w + 1, 7)]  # fmt: skip
    for b in (2, 5, 16):
        jobs = [pool.job() for _ in range(b - 1)]
        jobs.insert(b // 2, a)
        out.append(Scenario(WINDOW, f"window-needle-{b}", jobs, {**room, "max_num_seqs": b}))
    edge = Job(pool.tokens(w - 3), pool.params(22, max_tokens=8))
    out.append(Scenario(WINDOW, "window-decode-edge", [edge, pool.job()], room))
    hit = Job(a.prompt[: w + 13] + pool.tokens(2 * w), params, arrival=40)
    out.append(Scenario(WINDOW, "window-prefix-hit", [a, hit], room))
    return out


def prefill_vs_decode(deployment, prompt: Sequence[int], n: int) -> tuple[int, list[str]]:
    """Decode step i's logits row equals the row of a fresh request prefilled with
    prompt + generated[:i] (the prefill path). Returns (rows compared, mismatches)."""
    base = SamplingParams(
        max_tokens=n, temperature=0.0, ignore_eos=True, return_logits=True, seed=1
    )
    views, _ = run_scenario(
        deployment, Scenario("prefill_vs_decode", "decode", [Job(tuple(prompt), base)])
    )
    decoded = views[0]
    tokens = [rec.token for rec in decoded.records]
    one = dataclasses.replace(base, max_tokens=1)
    jobs = [Job(tuple(prompt) + tuple(tokens[:i]), one, arrival=i % 3) for i in range(n)]
    prefilled, _ = run_scenario(deployment, Scenario("prefill_vs_decode", "prefill", jobs))
    bad = [
        f"position {i}" for i, v in enumerate(prefilled)
        if v.records[0].logits_row != decoded.records[i].logits_row
    ]  # fmt: skip
    return n, bad


def prefix_with_generated(
    deployment, prompt: Sequence[int], n: int, extra: Sequence[int], block_size: int = 4,
    async_scheduling: bool | None = None,
):  # fmt: skip
    """A follow-up turn that repeats a conversation (prompt + generated + extra) on the same
    engine hits the cache built from generated tokens. Returns (follow-up job, view, hit tokens)."""
    engine = LLMEngine.from_deployment(
        deployment, block_size=block_size, num_kv_blocks=DEFAULT_NUM_KV_BLOCKS,
        async_scheduling=async_scheduling,
    )  # fmt: skip
    params = SamplingParams(
        max_tokens=n, temperature=0.0, ignore_eos=True, return_logits=True, seed=3
    )
    first = _run_one(engine, "first", Job(tuple(prompt), params))
    hits_before = engine.stats()["prefix_cache_hits"]
    follow = Job(tuple(prompt) + tuple(first.outputs[0].token_ids) + tuple(extra), params)
    out = _run_one(engine, "follow", follow)
    c = out.outputs[0]
    hits = engine.stats()["prefix_cache_hits"] - hits_before
    return follow, view_from_output(follow.prompt, params, c.token_ids, c.logits), hits


def _run_one(engine: LLMEngine, rid: str, job: Job):
    engine.add_request(rid, list(job.prompt), job.params)
    final = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            final = out if out.finished else final
    return final


def full_check(deployment, size: MatrixSize) -> tuple[Report, int]:
    """Every category of the matrix, the prefill-vs-decode comparison and a follow-up turn that
    reuses cached blocks of generated tokens. Returns (report, follow-up prefix-hit tokens);
    the caller asserts `report.mismatches == []` and that every category was exercised."""
    scenarios = build_scenarios(size)
    report = check_matrix(deployment, scenarios)
    prompt = scenarios[0].jobs[0].prompt
    rows, bad = prefill_vs_decode(deployment, prompt, size.n_out)
    report.rows["prefill_vs_decode"] += rows
    report.mismatches += bad
    first = _follow_prompt([j.prompt for s in scenarios for j in s.jobs], size.small_block)
    follow, view, hits = prefix_with_generated(
        deployment, first, size.n_out, (1, 2, 3), size.small_block, size.async_scheduling
    )
    report.rows["prefix"] += len(view.records)
    if not is_reference_prefix(view, RefCache(deployment).get(follow)):
        report.mismatches.append("follow-up turn differs from Ref")
    return report, hits


def _follow_prompt(prompts: Sequence[tuple[int, ...]], block: int) -> tuple[int, ...]:
    """The first prompt of at least one page, cut to end two tokens before a page boundary:
    the first turn's generated tokens then fill a page the follow-up turn finds cached."""
    prompt = next(p for p in prompts if len(p) >= block)
    return prompt[: len(prompt) // block * block - 2]


def full_check_problems(report: Report, hits: int) -> list[str]:
    """Why a `full_check` run does not pass (empty: it passes): mismatches, or a category
    the run failed to exercise (no preemption, no prefix hit, an empty category)."""
    problems = list(report.mismatches)
    if hits <= 0:
        problems.append("the follow-up turn hit no blocks holding generated tokens")
    if report.preemptions <= 0:
        problems.append("the pressure scenarios forced no preemption")
    if report.prefix_hits <= 0:
        problems.append("no prefix-cache hits")
    problems += [f"category {c} compared no rows" for c in CATEGORIES if report.rows[c] <= 0]
    return problems

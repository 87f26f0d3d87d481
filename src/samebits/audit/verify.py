"""`verify_log`: chain check, fingerprint check, then bit-for-bit replay of a random sample.

Refusal: when any entry was produced under a fingerprint other than the local engine's, the
log cannot be checked on this deployment and nothing is replayed (`refused` is set), unless
the entry records a `numerics_id` equal to the local engine's: then only the machine differs
(GPU name, driver, host, versions that fix no bits; see `kernels/fingerprint.py`) and the
entry is replayed (counted in `other_machine`).
Sampling: `k` request entries drawn uniformly without replacement with `random.Random(seed)`;
a provider that falsified a fraction `f` of the outputs escapes with probability at most
`(1 - f) ** k`, so the check catches it with probability at least `1 - (1 - f) ** k`.
"""

from __future__ import annotations

import math
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from samebits.audit.chain_check import ChainIssue, check_chain
from samebits.audit.reader import LogContents, LoggedEntry, ReadProblem
from samebits.audit.replay import ReplayEngine, ReplayResult, replay_entry

DETECTION_FRACTIONS = (0.01, 0.05, 0.10)


@dataclass(frozen=True)
class SampleSpec:
    """How many request entries to replay: `count`, or `rate` of them (rounded up), or all."""

    count: int | None = None
    rate: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.count is not None and self.rate is not None:
            raise ValueError("give either a sample count or a sample rate, not both")
        if self.count is not None and self.count < 0:
            raise ValueError(f"sample count must be >= 0, got {self.count}")
        if self.rate is not None and not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"sample rate must be in [0, 1], got {self.rate}")

    def size(self, population: int) -> int:
        if self.count is not None:
            return min(self.count, population)
        if self.rate is not None:
            return min(population, math.ceil(self.rate * population))
        return population


@dataclass
class VerifyReport:
    """Everything `verify_log` found. `exit_code`: 0 all good, 1 a failure, 2 refused."""

    num_entries: int
    num_requests: int
    read_problems: list[ReadProblem]
    chain_issues: list[ChainIssue]
    foreign_fingerprints: dict[str, int]
    local_fingerprint: str
    sample_seed: int
    results: list[ReplayResult] = field(default_factory=list)
    local_numerics_id: str = ""
    other_machine: dict[str, int] = field(default_factory=dict)  # accepted by numerics id

    @property
    def refused(self) -> bool:
        return bool(self.foreign_fingerprints)

    @property
    def failed_results(self) -> list[ReplayResult]:
        return [r for r in self.results if not r.ok]

    @property
    def corrupt_lines(self) -> list[ReadProblem]:
        return [p for p in self.read_problems if p.kind == "corrupt"]

    @property
    def exit_code(self) -> int:
        if self.refused:
            return 2
        if self.chain_issues or self.corrupt_lines or self.failed_results:
            return 1
        return 0


def detection_probability(fraction: float, k: int) -> float:
    """Probability that `k` uniform samples hit at least one of a fraction `fraction`."""
    return 1.0 - (1.0 - fraction) ** k


def request_entries(contents: LogContents) -> list[LoggedEntry]:
    return [e for e in contents.entries if e.entry.get("type") == "request"]


def foreign_fingerprints(
    contents: LogContents, local: str, local_numerics: str = ""
) -> dict[str, int]:
    """Fingerprints in the log other than `local`, with their entry counts; an entry whose
    `numerics_id` is `local_numerics` (non-empty) is not foreign."""
    return _count_fingerprints(contents, local, lambda n: not local_numerics or n != local_numerics)


def other_machine_fingerprints(
    contents: LogContents, local: str, local_numerics: str
) -> dict[str, int]:
    """Fingerprints other than `local` of entries whose numerics id is `local_numerics`."""
    if not local_numerics:
        return {}
    return _count_fingerprints(contents, local, lambda n: n == local_numerics)


def _count_fingerprints(
    contents: LogContents, local: str, counted: Callable[[str], bool]
) -> dict[str, int]:
    counts: dict[str, int] = {}
    for logged in contents.entries:
        fp = str(logged.entry.get("fingerprint"))
        if fp != local and counted(str(logged.entry.get("numerics_id") or "")):
            counts[fp] = counts.get(fp, 0) + 1
    return counts


def choose_sample(entries: list[LoggedEntry], spec: SampleSpec, seed: int) -> list[LoggedEntry]:
    """The entries to replay, in log order."""
    k = spec.size(len(entries))
    picked = sorted(random.Random(seed).sample(range(len(entries)), k))
    return [entries[i] for i in picked]


def verify_log(
    contents: LogContents,
    engine: ReplayEngine,
    spec: SampleSpec = SampleSpec(),
    expected_head: str | None = None,
    on_result: Callable[[ReplayResult], None] | None = None,
) -> VerifyReport:
    """Check the chain, refuse on a foreign fingerprint, else replay the sample."""
    numerics = str(getattr(engine, "numerics_id", "") or "")
    report = check_log(contents, engine.fingerprint, spec, expected_head, numerics)
    if not report.refused:
        replay_sample(report, contents, engine, spec, on_result)
    return report


def check_log(
    contents: LogContents, local_fingerprint: str, spec: SampleSpec, expected_head: str | None,
    local_numerics_id: str = "",
) -> VerifyReport:  # fmt: skip
    """The checks that need no replay: read problems, chain, fingerprints (numerics ids)."""
    return VerifyReport(
        num_entries=len(contents.entries),
        num_requests=len(request_entries(contents)),
        read_problems=list(contents.problems),
        chain_issues=check_chain(contents.entries, expected_head),
        foreign_fingerprints=foreign_fingerprints(contents, local_fingerprint, local_numerics_id),
        local_fingerprint=local_fingerprint,
        sample_seed=spec.seed if spec.seed is not None else secrets.randbits(63),
        local_numerics_id=local_numerics_id,
        other_machine=other_machine_fingerprints(contents, local_fingerprint, local_numerics_id),
    )


def replay_sample(
    report: VerifyReport,
    contents: LogContents,
    engine: ReplayEngine,
    spec: SampleSpec,
    on_result: Callable[[ReplayResult], None] | None = None,
) -> None:
    """Replay the sample chosen by `report.sample_seed`, appending to `report.results`."""
    for logged in choose_sample(request_entries(contents), spec, report.sample_seed):
        result = replay_entry(engine, logged)
        report.results.append(result)
        if on_result is not None:
            on_result(result)

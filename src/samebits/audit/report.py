"""Human-readable text of a verification run (used by `samebits verify`)."""

from __future__ import annotations

from samebits.audit.replay import ReplayResult
from samebits.audit.verify import DETECTION_FRACTIONS, VerifyReport, detection_probability


def format_result(result: ReplayResult) -> str:
    verdict = "PASS" if result.ok else "FAIL"
    return f"  seq {result.seq:<8d} {verdict}  {result.where}  {result.message}"


def format_header(report: VerifyReport, log_path: str) -> list[str]:
    lines = [
        f"audit log: {log_path} ({report.num_entries} entries, {report.num_requests} requests)"
    ]
    for problem in report.read_problems:
        label = "warning" if problem.kind == "torn" else "FAIL"
        lines.append(f"{label}: line {problem.line_no} of {problem.segment}: {problem.message}")
    for fingerprint, count in report.other_machine.items():
        lines.append(
            f"note: {count} entries were served under fingerprint {fingerprint} (another "
            f"machine) with this deployment's numerics id {report.local_numerics_id}"
        )
    if report.chain_issues:
        lines.append(f"chain: FAIL ({len(report.chain_issues)} problems)")
        lines.extend(f"  {issue}" for issue in report.chain_issues)
    else:
        lines.append("chain: OK")
    return lines


def format_refusal(report: VerifyReport) -> list[str]:
    lines = [
        "refusing to verify: the log was produced by a different deployment than this one",
        f"  local fingerprint: {report.local_fingerprint}",
    ]
    if report.local_numerics_id:
        lines.append(f"  local numerics id: {report.local_numerics_id}")
    for fingerprint, count in report.foreign_fingerprints.items():
        lines.append(f"  log fingerprint:   {fingerprint} ({count} entries)")
    lines.append(
        "  (entries whose numerics id equals the local one are accepted from another machine; "
        "these have another or none)"
    )
    lines.append("  run `samebits verify` with the model and kernel plan the log was served with")
    return lines


def format_summary(report: VerifyReport) -> list[str]:
    k = len(report.results)
    failed = len(report.failed_results)
    verdict = "PASS" if report.exit_code == 0 else "FAIL"
    lines = [
        f"replayed {k} of {report.num_requests} request entries (sample seed {report.sample_seed}): "
        f"{k - failed} passed, {failed} failed",
        f"chain problems: {len(report.chain_issues)}, corrupt lines: {len(report.corrupt_lines)}",
        f"result: {verdict}",
        f"probability of catching a provider that falsifies a fraction f of outputs, "
        f"1 - (1 - f)^k with k = {k}:",
    ]
    for f in DETECTION_FRACTIONS:
        lines.append(f"  f = {f:>4.0%}: {detection_probability(f, k):.6f}")
    return lines

"""Appending each finished or aborted choice to the audit log (off the engine thread).

The engine thread never writes: the event loop hands records to the `AuditLogWriter`
thread, which group-commits them with fsync. A response is sent only once its entry is
durable; a choice whose client vanished is recorded with finish_reason "abort" without
waiting. If the entry cannot be written, the request fails with HTTP 500.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from samebits.audit.record import ServedRequest, request_record
from samebits.audit.writer import AuditLogWriter
from samebits.server.errors import APIError
from samebits.server.generation import Choice
from samebits.server.metrics import ServerMetrics

logger = logging.getLogger("samebits.server")


@dataclass(frozen=True)
class CallInfo:
    """Per API call facts that go into each of its entries."""

    endpoint: str
    user: str | None
    received_at: float


class AuditRecorder:
    """Writes one `request` entry per choice; a no-op when `writer` is None."""

    def __init__(
        self, writer: AuditLogWriter | None, fingerprint: str, model: str, metrics: ServerMetrics,
        numerics_id: str | None = None,
    ) -> None:  # fmt: skip
        self.writer = writer
        self.fingerprint = fingerprint
        self.numerics_id = numerics_id
        self.model = model
        self.metrics = metrics

    async def record(self, choice: Choice, call: CallInfo) -> dict[str, Any] | None:
        """Append `choice` and wait until it is durable; `{"seq", "entry_hash"}` or None."""
        if self.writer is None or choice.recorded:
            return None
        choice.recorded = True
        try:
            result = await asyncio.wrap_future(self.writer.append(self._record(choice, call)))
        except Exception as exc:
            self.metrics.on_audit(False)
            logger.exception("audit entry for %s could not be written", choice.request_id)
            raise APIError(500, f"could not write the audit log entry: {exc}") from exc
        self.metrics.on_audit(True)
        return {"seq": result.seq, "entry_hash": result.entry_hash}

    def record_nowait(self, choice: Choice, call: CallInfo) -> None:
        """Append `choice` without waiting (client gone, request failed)."""
        if self.writer is None or choice.recorded or not choice.accepted:
            return
        choice.recorded = True
        future = self.writer.append(self._record(choice, call))
        future.add_done_callback(lambda f: self.metrics.on_audit(f.exception() is None))

    def _record(self, choice: Choice, call: CallInfo) -> dict[str, Any]:
        served = ServedRequest(
            request_id=choice.request_id,
            endpoint=call.endpoint,
            user=call.user,
            received_at=call.received_at,
            finished_at=time.time(),
            prompt_token_ids=choice.prompt.token_ids,
            sampling_params=choice.params.to_dict(),
            output_token_ids=choice.token_ids,
            logits_digests=choice.logits_digests,
            finish_reason=choice.finish_reason or "abort",
            tools=None if choice.tools is None else choice.tools.audit_fields(),
        )
        return request_record(served, self.fingerprint, self.model, self.numerics_id)

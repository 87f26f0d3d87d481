"""ModelRunner: SchedulerOutput -> flat tensors -> one forward pass -> logits rows.

The only engine module that touches torch. One forward pass per step covers every scheduled
token of every request (prefill chunks and decode tokens alike); logits are computed only for
the rows that are sampled, and for every row of a chunk scheduled with `all_rows` (prompt
logprobs). The final norm and the LM head are row-invariant, so asking for more rows never
changes a row's bits.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import torch

from samebits.engine.scheduler import PLACEHOLDER_TOKEN, ScheduledRequest
from samebits.engine.step_result import ReadyStep, StepLogits, StepResult
from samebits.graphs.policy import GraphConfig
from samebits.graphs.runner import DecodeGraphRunner
from samebits.kernels.metadata import FlatBatch, to_device_aligned

# a step scheduled ahead: (the previous step's tokens on the device, row of each request)
FedTokens = tuple[torch.Tensor, np.ndarray]


def build_flat_batch(
    scheduled, block_size: int, device: torch.device | str = "cpu", fed: FedTokens | None = None
) -> FlatBatch:
    """Flatten scheduled requests (see docs/architecture.md, scheduler -> runner contract).
    The tensors the model reads are put on `device` in one host-to-device copy. `fed`: a step
    of one placeholder token per request, whose input ids are `tokens[gather]`."""
    counts = [len(s.token_ids) for s in scheduled]
    starts = np.array([s.start_position for s in scheduled], dtype=np.int64)
    query_req = np.repeat(np.arange(len(scheduled), dtype=np.int64), counts)
    query_start_loc = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    positions = np.arange(query_start_loc[-1], dtype=np.int64) - query_start_loc[query_req]
    positions += starts[query_req]
    width = max(len(s.block_table) for s in scheduled)
    tables = np.zeros((len(scheduled), width), dtype=np.int64)
    for i, s in enumerate(scheduled):
        tables[i, : len(s.block_table)] = s.block_table
    slots = tables[query_req, positions // block_size] * block_size + positions % block_size
    last_rows = logits_rows(scheduled, query_start_loc)
    if fed is None:
        ids = np.fromiter((t for s in scheduled for t in s.token_ids), np.int64, len(positions))
    else:
        ids = fed[1]
    ids_t, slots_t, rows_t, pos_t = _to_device(
        device, ids, slots, np.array(last_rows, dtype=np.int64), positions
    )
    if fed is not None:
        ids_t = fed[0].index_select(0, ids_t)
    return FlatBatch(
        input_ids=ids_t,
        positions=positions,
        query_req=query_req,
        query_start_loc=query_start_loc,
        seq_lens=starts + np.array(counts, dtype=np.int64),
        slot_mapping=slots_t,
        block_tables=tables,
        block_size=block_size,
        logits_indices=rows_t,
        position_ids=None if pos_t.device.type == "cpu" else pos_t,
    )


def logits_rows(scheduled, query_start_loc: np.ndarray) -> list[int]:
    """Flat rows whose logits a step computes, in batch order: every row of an `all_rows`
    chunk, else the last row of a `sample` chunk."""
    rows: list[int] = []
    for i, s in enumerate(scheduled):
        end = int(query_start_loc[i + 1])
        if s.all_rows:
            rows.extend(range(int(query_start_loc[i]), end))
        elif s.sample:
            rows.append(end - 1)
    return rows


def _to_device(device, *arrays: np.ndarray) -> list[torch.Tensor]:
    """int64 host arrays -> tensors on `device`, packed into one copy with every view 16-byte
    aligned (`metadata.to_device_aligned`: a view's alignment must not follow the parity of a
    step's token or row count); zero-copy on CPU."""
    if torch.device(device).type == "cpu":
        return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    return to_device_aligned(arrays, np.int64, device)


def kv_bytes_per_block(model, block_size: int) -> int:
    """Bytes one KV-cache block takes over all layers (K and V) in the model's cache dtype."""
    cfg = model.cfg
    elem = torch.empty((), dtype=model.ops.act_dtype).element_size()
    return 2 * cfg.num_hidden_layers * block_size * cfg.num_key_value_heads * cfg.head_dim * elem


def kv_blocks_for_device(model, block_size: int, utilization: float) -> int:
    """KV-cache blocks for a GPU model from the device's free memory now (weights loaded).
    Memory torch's caching allocator holds but no live tensor uses (an engine built and
    dropped earlier in this process: its KV cache, its graph pools) counts as free: this
    process reuses it. Unreachable engines are collected first (frozen ones too)."""
    from samebits.config import kv_blocks_for_memory
    from samebits.engine.heap import collect_all

    collect_all()
    device = model.ops.device
    free, total = torch.cuda.mem_get_info(device)
    reusable = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    per_block = kv_bytes_per_block(model, block_size)
    return kv_blocks_for_memory(total, free + reusable, utilization, per_block)


class ModelRunner:
    """Owns the paged KV cache (num_blocks * block_size slots per layer) and runs the model.

    With `graphs` enabled, pure decode steps replay a captured graph per batch bucket
    (`samebits.graphs.runner`); the cache then has one block more, the padding rows' sink, which the
    block pool (blocks 0 .. num_blocks - 1) never hands out."""

    def __init__(
        self, model, block_size: int, num_blocks: int, graphs: GraphConfig | None = None,
        max_model_len: int | None = None,
    ) -> None:  # fmt: skip
        self.model = model
        self.block_size = block_size
        self.device = model.ops.device
        graphs = graphs or GraphConfig()
        sink = 1 if graphs.enabled else 0
        self.kv_cache = model.new_kv_cache((num_blocks + sink) * block_size)
        # on a GPU the rows' SHA-256 can be computed on the device (kernels/triton/sha256.py),
        # for the steps whose launch asks for it (the engine: those with no streamed output)
        self.hashes_on_device = self.device.type == "cuda"
        if self.hashes_on_device:
            from samebits.kernels.triton.sha256 import warm_up

            warm_up(self.device)  # a step never waits for the SHA-256 kernel's compiler
        self.graphs: DecodeGraphRunner | None = None
        if graphs.enabled:
            if max_model_len is None:
                raise ValueError("decode graphs need max_model_len (the block table width)")
            self.graphs = DecodeGraphRunner(
                model, self.kv_cache, graphs, block_size, num_blocks, max_model_len
            )
            if graphs.capture_at_start:
                self.graphs.capture_all()

    def execute(self, sched_out) -> StepLogits:
        """One float32 logits row per scheduled request with `sample=True`, and every row of
        each `all_rows` chunk in `chunk_rows` (see StepLogits)."""
        return self.launch(sched_out).rows()

    feeds_tokens = True  # `launch` takes `feed=` (a step scheduled ahead)
    num_device_digest_steps = 0  # steps launched with device digests

    def launch(
        self, sched_out, feed: StepResult | None = None, copy_rows: bool = True,
        device_digests: bool = False,
    ) -> StepResult:  # fmt: skip
        """Start the step and return (see `step_result`): on a GPU the forward is queued on
        the stream and this returns before it ends; on the CPU it has run. `feed`: the
        previous step, for a step scheduled ahead (`Scheduler.schedule_ahead`: one
        PLACEHOLDER_TOKEN per request), whose input tokens are then `feed.tokens()`, gathered
        on the device in the stream's order (after the previous step's argmax). `copy_rows`
        False: the rows cross to the host only if `rows()` asks (a hint; any value is
        correct). On a GPU with `device_digests`, `digests()` come from the device."""
        hints = StepHints(copy_rows, device_digests and self.hashes_on_device)
        scheduled = sched_out.scheduled
        if not scheduled:
            return ReadyStep(StepLogits())
        self.num_device_digest_steps += hints.device_digests
        fed = self._fed(scheduled, feed) if feed is not None else None
        rows = self.graphs.run(scheduled, fed) if self.graphs is not None else None
        if rows is not None:  # one row per request, in batch order; overwritten by a replay
            layout: Layout = ({s.request_id: i for i, s in enumerate(scheduled) if s.sample}, {})
            return _started(rows, layout, True, hints)
        batch = build_flat_batch(scheduled, self.block_size, self.device, fed)
        logits = self.model.forward(batch, self.kv_cache)
        return _started(logits, row_layout(scheduled), False, hints)

    def _fed(self, scheduled, feed: StepResult) -> FedTokens:
        """(previous step's tokens on this device, the row of each scheduled request)."""
        bad = [s.request_id for s in scheduled if s.token_ids != (PLACEHOLDER_TOKEN,)]
        if bad:
            raise ValueError(f"feed= needs a step scheduled ahead; {bad[0]!r} has known tokens")
        tokens, row_of = feed.tokens()
        gather = np.array([row_of[s.request_id] for s in scheduled], dtype=np.int64)
        return torch.as_tensor(tokens, device=self.device), gather

    def stats(self) -> dict[str, int]:
        """Graph replays and eager steps (empty without graphs)."""
        return self.graphs.stats() if self.graphs is not None else {}


Layout = tuple[dict[str, int], dict[str, tuple[int, slice]]]


@dataclasses.dataclass(frozen=True)
class StepHints:
    """How a GPU step hands its rows back: `copy_rows` at launch (else on demand), digests
    on the device. Hints only: no value depends on them."""

    copy_rows: bool = True
    device_digests: bool = False


def row_layout(scheduled) -> Layout:
    """Where an eager step's rows (`logits_rows` order) belong: each sampling request's row
    index, and each `all_rows` chunk's (start position, rows)."""
    sampled: dict[str, int] = {}
    chunks: dict[str, tuple[int, slice]] = {}
    at = 0
    for s in scheduled:
        if s.all_rows:
            chunks[s.request_id] = (s.start_position, slice(at, at + len(s.token_ids)))
            at += len(s.token_ids)
            if s.sample:
                sampled[s.request_id] = at - 1
        elif s.sample:
            sampled[s.request_id] = at
            at += 1
    return sampled, chunks


def _split(logits: np.ndarray, layout: Layout) -> StepLogits:
    sampled, chunks = layout
    return StepLogits(
        {rid: logits[i] for rid, i in sampled.items()},
        {rid: (start, logits[rows]) for rid, (start, rows) in chunks.items()},
    )


def _started(logits: torch.Tensor, layout: Layout, reused: bool, hints: StepHints) -> StepResult:
    """The result of a step whose logits are `logits` (`reused`: a buffer the next step
    overwrites, a graph's output)."""
    if logits.device.type == "cpu":
        host = logits.numpy()  # the tensor's own memory; a reused buffer is copied
        return ReadyStep(_split(host.copy() if reused else host, layout))
    return DeviceStep(logits, layout, reused, hints.copy_rows, hints.device_digests)


class DeviceStep:
    """A step queued on a GPU stream. At launch it queues, on the compute stream, each row's
    max and argmax (torch documents the first index of the maximum; a NaN is the maximum)
    and their copy to pinned host memory; then, each on its own side stream so the next
    step's forward does not wait for them: the rows' copy to pinned host memory (512 KB per
    row; from a device copy when the buffer is a graph's output; at launch with `copy_rows`,
    else on the first `rows()`), and with `digests` each row's SHA-256 (`kernels/triton/
    sha256.py`: the hex digest `logits_digest` gives the host row, 32 bytes per row back)."""

    def __init__(
        self, logits: torch.Tensor, layout: Layout, reused: bool, copy_rows: bool = True,
        digests: bool = False,
    ) -> None:  # fmt: skip
        self._layout = layout
        self._rows: StepLogits | None = None
        self._host: torch.Tensor | None = None
        stream = torch.cuda.current_stream(logits.device)
        values, indices = logits.max(dim=-1)
        self._tokens = indices  # read by a step scheduled ahead, later on this stream
        self._top = (_to_pinned(indices), _to_pinned(values))
        self._top_ready = torch.cuda.Event()
        self._top_ready.record(stream)
        source = logits.clone() if reused else logits
        self._ready = torch.cuda.Event()
        self._ready.record(stream)
        self._digests = _DeviceDigests(source, self._ready) if digests else None
        # kept only for a copy on demand
        self._source: torch.Tensor | None = None if copy_rows else source
        if copy_rows:
            self._copy_rows(source)

    def _copy_rows(self, source: torch.Tensor) -> None:
        """Queue the rows' copy to pinned memory on the copy stream (once)."""
        side = _side_stream(source.device, "copy")
        side.wait_event(self._ready)
        with torch.cuda.stream(side):
            self._host = _to_pinned(source)
            self._rows_ready = torch.cuda.Event()
            self._rows_ready.record(side)
        source.record_stream(side)  # the allocator keeps it until the copy is done
        self._source = None

    def greedy(self) -> dict[str, tuple[int, float]]:
        self._top_ready.synchronize()
        index, value = self._top[0].tolist(), self._top[1].tolist()
        return {rid: (index[i], value[i]) for rid, i in self._layout[0].items()}

    def tokens(self) -> tuple[torch.Tensor, dict[str, int]]:
        return self._tokens, self._layout[0]

    def digests(self) -> dict[str, _RowDigest] | None:
        if self._digests is None:
            return None
        return {rid: _RowDigest(self._digests, i) for rid, i in self._layout[0].items()}

    def rows(self) -> StepLogits:
        if self._rows is None:
            if self._host is None:
                assert self._source is not None, "rows not copied at launch: source kept"
                self._copy_rows(self._source)
            self._rows_ready.synchronize()
            assert self._host is not None
            self._rows = _split(self._host.numpy(), self._layout)
        return self._rows


# Steps whose device digests run side by side, one stream each in turn: a lane hashes its row
# serially (about 20 ms for a 128k-vocab row on the H200, three decode steps), so the digests
# of consecutive steps must overlap each other, not queue on one stream.
DIGEST_STREAMS = 8
_DIGEST_LAUNCHES = itertools.count()


class _DeviceDigests:
    """The SHA-256 of every row of a step, computed on a digest stream and copied back."""

    def __init__(self, source: torch.Tensor, ready: torch.cuda.Event) -> None:
        from samebits.kernels.triton.sha256 import sha256_rows

        side = _side_stream(source.device, f"digest{next(_DIGEST_LAUNCHES) % DIGEST_STREAMS}")
        side.wait_event(ready)
        with torch.cuda.stream(side):
            self._words = _to_pinned(sha256_rows(source))
            self._done = torch.cuda.Event()
            self._done.record(side)
        source.record_stream(side)
        self._hex: list[str] | None = None

    def done(self) -> bool:
        if self._hex is None and self._done.query():
            self.hex()  # done: convert once, so later checks never query the event again
        return self._hex is not None

    def hex(self) -> list[str]:
        if self._hex is None:
            from samebits.kernels.triton.sha256 import hex_digests

            self._done.synchronize()
            self._hex = hex_digests(self._words.numpy())
        return self._hex


class _RowDigest:
    """One row's digest, future-like (`result()`), as the engine's host digests are. Once
    known, the hex string is kept on the row (a final output reads every row's digest)."""

    __slots__ = ("_index", "_step", "_value")

    def __init__(self, step: _DeviceDigests, index: int) -> None:
        self._step, self._index = step, index
        self._value: str | None = None

    def result(self) -> str:
        value = self._value
        if value is None:
            value = self._value = self._step.hex()[self._index]
        return value

    def done(self) -> bool:
        return self._value is not None or self._step.done()


def _to_pinned(tensor: torch.Tensor) -> torch.Tensor:
    """An asynchronous copy of a device tensor into fresh pinned host memory (torch's
    caching host allocator), queued on the current stream."""
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    return host


_SIDE_STREAMS: dict[tuple[torch.device, str], torch.cuda.Stream] = {}


def _side_stream(device: torch.device, role: str) -> torch.cuda.Stream:
    """One side stream per device and role: "copy" (rows to the host), "digest0" .."""
    key = (device, role)
    if key not in _SIDE_STREAMS:
        _SIDE_STREAMS[key] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[key]


COLD_BLOCK = 16  # the page size of the Ref forward's fresh cache (any size gives the same bits)


def cold_logits(deployment, token_ids, all_rows: bool = False):
    """Cold, batch-of-one, no-cache forward over `token_ids` (the spec's Ref).

    Returns the float32 logits of the last position as a numpy row, or of every position
    ([len, vocab]) with `all_rows`. Uses a fresh KV cache with an identity block table.
    """
    n = len(token_ids)
    block = COLD_BLOCK
    num_blocks = -(-n // block)
    ids = tuple(int(t) for t in token_ids)
    req = ScheduledRequest("ref", ids, 0, tuple(range(num_blocks)), sample=True)
    device = deployment.model.ops.device
    batch = build_flat_batch([req], block, device)
    if all_rows:
        batch = dataclasses.replace(batch, logits_indices=torch.arange(n, device=device))
    kv = deployment.model.new_kv_cache(num_blocks * block)
    logits = deployment.model.forward(batch, kv).cpu().numpy()
    return logits if all_rows else logits[-1]

"""Static inputs of the decode graphs: fixed tensors every captured forward reads, refilled
before each replay.

Layout: two staging buffers on the host (pinned on a GPU), used in turn, mirrored by one on
the device; a step writes its values into a host one and moves them with a single copy, then
spreads its compact block table into the fixed-width device table (one device-side copy). A
host buffer is rewritten only after its previous copy has run (an event per buffer), so a step
may be filled while the one before it is still queued (a step scheduled ahead). Such a step's
input ids are gathered on the device from the previous step's tokens (`fill(..., fed)`). Every tensor a
graph reads is a fixed view of these buffers or a constant, so the pointers recorded at capture
stay valid for every replay. Views start on 16-byte boundaries, as `attention_meta` lays out
its own (the attention kernel then runs the binary an eager decode step runs; Triton
specializes pointers on that alignment only, which never changes a value).

Padding invariant (what makes padding rows harmless): rows past a step's requests are token 0
at position 0 of a request whose block table is `[sink, sink, ...]`, so their only KV write is
slot `sink * block_size` and their attention reads only that slot. `sink` is a block the block
pool never hands out (the runner allocates the KV cache with one block more than the pool
has), so no real request's K/V is ever written or read by a padding row, and a real row's bits
do not depend on the padding rows (every op of an invariant plan is row-local).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from samebits.kernels.attention_check import check_positions
from samebits.kernels.interface import ATTENTION_SPAN
from samebits.kernels.metadata import VIEW_ALIGN_BYTES, FlatBatch

_INT64 = ("ids", "positions", "slots", "seq_lens", "feed")
_INT32 = ("positions32", "table")


def _layout(max_batch: int, width: int) -> tuple[dict[str, tuple[int, int]], int]:
    """name -> (byte offset, element count) of each segment; the total bytes. The compact
    table is last: a step copies only the bytes up to the end of its own table."""
    sizes = {name: max_batch for name in _INT64 + _INT32}
    sizes["table"] = max_batch * width
    offsets, at = {}, 0
    for name in _INT64 + _INT32:
        offsets[name] = (at, sizes[name])
        item = 8 if name in _INT64 else 4
        at += -(-sizes[name] * item // VIEW_ALIGN_BYTES) * VIEW_ALIGN_BYTES
    return offsets, at


class DecodeBuffers:
    """Static buffers for pure-decode steps of up to `max_batch` requests whose block tables
    have at most `width` entries (ceil(max_model_len / block_size))."""

    def __init__(
        self, max_batch: int, width: int, block_size: int, sink_block: int,
        device: torch.device, attention_group: int | None = None, attention_span: int = ATTENTION_SPAN,
    ) -> None:  # fmt: skip
        """`attention_group` / `attention_span`: GQA group and key span of the GPU attention
        kernel, whose program map is built once per bucket (None: the op set plans attention
        from the host arrays)."""
        self.max_batch, self.width, self.block_size = max_batch, width, block_size
        self.sink_block = sink_block
        self.device = device
        self.group, self.span = attention_group, attention_span
        self._offsets, nbytes = _layout(max_batch, width)
        pin = device.type == "cuda"
        self.hosts = [torch.zeros(nbytes, dtype=torch.uint8, pin_memory=pin) for _ in range(2)]
        self._copied: list = [None, None]  # per host buffer: event after its last copy (GPU)
        self._turn = 0  # the host buffer the next fill writes
        self.host = self.hosts[0]  # the host buffer filled last
        self.dev = torch.zeros(nbytes, dtype=torch.uint8, device=device)
        self.table = torch.full((max_batch, width), sink_block, dtype=torch.int32, device=device)
        self.arange = torch.arange(max_batch + 1, device=device)
        self.arange32 = self.arange.to(torch.int32)
        self.query_end32 = (self.arange32[1:] + 0).contiguous()  # own, aligned storage
        self._np_arange = np.arange(max_batch + 1, dtype=np.int64)
        self._host_nps = [
            {n: self._view(h, n).numpy() for n in _INT64 + _INT32} for h in self.hosts
        ]

    def _view(self, buf: torch.Tensor, name: str) -> torch.Tensor:
        offset, count = self._offsets[name]
        dtype = torch.int64 if name in _INT64 else torch.int32
        item = 8 if name in _INT64 else 4
        return buf[offset : offset + count * item].view(dtype)

    @property
    def sink_slot(self) -> int:
        return self.sink_block * self.block_size

    def fill(self, scheduled: Sequence, bucket: int, fed=None) -> None:
        """Write one decode step (one token per request) padded to `bucket` rows into the
        device buffers: one host-to-device copy, one device copy of the block table. An
        empty step fills every row with padding (what graphs are captured on). `fed`:
        (tokens on the device, row per request): the step's input ids are `tokens[rows]`,
        gathered on the device after the copy (a step scheduled ahead).

        On a GPU the copy is asynchronous from pinned memory, from the host buffer whose
        previous copy has run (`_take_host`)."""
        n, h = len(scheduled), self._take_host()
        width = max((len(s.block_table) for s in scheduled), default=1)
        if n > bucket or bucket > self.max_batch or width > self.width:
            raise ValueError(f"step of {n} requests, {width} blocks does not fit bucket {bucket}")
        pos = h["positions"][:bucket]
        pos[:n] = [s.start_position for s in scheduled]
        pos[n:] = 0
        # the attention certificates' metadata precondition (the program map of a graphed
        # decode step, program r = request r's token, is fixed by construction)
        check_positions(
            pos[:n], np.array([len(s.block_table) for s in scheduled]) * self.block_size
        )
        h["ids"][:n] = 0 if fed is not None else [s.token_ids[0] for s in scheduled]
        h["ids"][n:bucket] = 0
        if fed is not None:
            h["feed"][:n] = fed[1]
        table = h["table"][: bucket * width].reshape(bucket, width)
        table.fill(self.sink_block)
        for i, s in enumerate(scheduled):
            table[i, : len(s.block_table)] = s.block_table
        rows = np.arange(bucket)
        h["slots"][:bucket] = table[rows, pos // self.block_size] * self.block_size
        h["slots"][:bucket] += pos % self.block_size
        h["seq_lens"][:bucket] = pos + 1
        h["positions32"][:bucket] = pos
        self._upload(bucket, width)
        if fed is not None:
            ids = self._view(self.dev, "ids")[:n]
            torch.index_select(fed[0], 0, self._view(self.dev, "feed")[:n], out=ids)

    def _take_host(self) -> dict[str, np.ndarray]:
        """The next host buffer's arrays, once its previous copy to the device has run."""
        turn = self._turn
        if self._copied[turn] is not None:
            self._copied[turn].synchronize()
        self.host = self.hosts[turn]
        return self._host_nps[turn]

    def _upload(self, bucket: int, width: int) -> None:
        end = self._offsets["table"][0] + bucket * width * 4
        self.dev[:end].copy_(self.host[:end], non_blocking=True)
        if self.dev.device.type == "cuda":
            event = self._copied[self._turn] = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.dev.device))
        self._turn ^= 1
        compact = self._view(self.dev, "table")[: bucket * width].view(bucket, width)
        self.table[:bucket, :width].copy_(compact)

    def batch(self, bucket: int, long: bool = False) -> FlatBatch:
        """The flat batch a graph of `bucket` rows reads: fixed views of the static buffers
        (host arrays: views of the device buffers on the CPU, of the staging buffer on a GPU,
        where no op of a graphed step reads them). `long`: the attention may split the KV
        (positions up to the table width); else it runs spans in sequence."""
        b, dev = bucket, self.dev
        hosted = dev if dev.device.type == "cpu" else self.host
        table = self.table.numpy() if dev.device.type == "cpu" else np.zeros((b, 0), np.int32)
        return FlatBatch(
            input_ids=self._view(dev, "ids")[:b],
            positions=self._view(hosted, "positions")[:b].numpy(),
            query_req=self._np_arange[:b],
            query_start_loc=self._np_arange[: b + 1],
            seq_lens=self._view(hosted, "seq_lens")[:b].numpy(),
            slot_mapping=self._view(dev, "slots")[:b],
            block_tables=table[:b],
            block_size=self.block_size,
            logits_indices=self.arange[:b],
            position_ids=self._view(dev, "positions")[:b],
            attn=self._attention_meta(b, long),
        )

    def _attention_meta(self, b: int, long: bool):
        """The GPU attention's program map of a decode step: program r holds request r's one
        token (as `attention_metadata` plans it for one-token requests: `block_m` from
        `default_block_m(1, group)`, the default warps); positions are bounded by the table
        width (`long`) or by the first span (spans in sequence; the kernel still reads every
        span of a row), so the launch is fixed per graph."""
        if self.group is None:
            return None
        from samebits.kernels.triton import attention_meta as am

        return am.AttentionMeta(
            positions=self._view(self.dev, "positions32")[:b], prog_req=self.arange32[:b],
            prog_row0=self.arange32[:b], query_end=self.query_end32[:b],
            block_tables=self.table[:b], num_programs=b, block_size=self.block_size,
            group=self.group, block_m=am.default_block_m(1, self.group),
            num_warps=am.ATTENTION_WARPS, span=self.span, one_token_each=True,
            max_position=self.width * self.block_size - 1 if long else self.span - 1,
        )  # fmt: skip

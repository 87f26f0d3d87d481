"""Which part of each weight a rank holds (pure tensor slicing: no arithmetic).

Column-parallel (q/k/v, gate/up, their biases): output rows, by attention head / KV head /
intermediate unit. Row-parallel (o, down): input columns, the contiguous block
[r*K/t, (r+1)*K/t), i.e. the split plan's ranges r*S/t .. (r+1)*S/t - 1 when t divides S.
Vocab-parallel LM head: rows [r*V_l, (r+1)*V_l) with V_l = ceil(V / t), the last rank's block
padded with zero rows (their logits are cut off after the gather). Everything else
(embedding, norms, q/k norms, RoPE) is replicated.
"""

from __future__ import annotations

import dataclasses

import torch

from samebits.kernels.quantized import QuantizedTensor

ROW_PARALLEL = ("self_attn.o_proj", "mlp.down_proj")
COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
# Bytes of one unit of K in a stored row, and the k per unit: GGUF blocks of 32, 16-bit values.
STORED_UNITS = {"Q4_1": (20, 32), "Q8_0": (34, 32), "BF16": (2, 1), "F16": (2, 1)}


def check_shardable(cfg, degree: int) -> None:
    """ValueError naming what does not divide (heads, KV heads, intermediate size), or a
    mixture-of-experts model (its experts are not sharded yet)."""
    if getattr(cfg, "moe", None) is not None:
        raise ValueError("tensor parallelism does not shard mixture-of-experts models yet")
    sizes = {
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "intermediate_size": cfg.intermediate_size,
    }
    for name, size in sizes.items():
        if size % degree:
            raise ValueError(
                f"tensor_parallel_size {degree} does not divide {name} ({size}); KV heads "
                "are never replicated across ranks"
            )


def local_config(cfg, degree: int):
    """The model config of one rank's shard: heads, KV heads and intermediate size / degree."""
    return dataclasses.replace(
        cfg, num_attention_heads=cfg.num_attention_heads // degree,
        num_key_value_heads=cfg.num_key_value_heads // degree,
        intermediate_size=cfg.intermediate_size // degree,
    )  # fmt: skip


def vocab_rows(vocab: int, degree: int) -> int:
    """Rows of the LM head each rank holds (the last block zero-padded)."""
    return -(-vocab // degree)


def shard_weights(weights: dict[str, torch.Tensor], cfg, rank: int, degree: int) -> dict:
    """Rank `rank`'s weights by name (views where possible; `lm_head.weight` always present,
    a tied model's cut from the embedding)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in weights.items():
        out[name] = _shard_one(name, t, cfg, rank, degree)
    head = weights.get("lm_head.weight", weights["model.embed_tokens.weight"])
    out["lm_head.weight"] = _vocab_block(head, rank, degree)
    return out


def _block(t: torch.Tensor, dim: int, rank: int, degree: int) -> torch.Tensor:
    size = t.shape[dim] // degree
    return t.narrow(dim, rank * size, size).contiguous()


def _shard_one(name: str, t: torch.Tensor, cfg, rank: int, degree: int) -> torch.Tensor:
    if any(f".{p}." in name for p in ROW_PARALLEL) and name.endswith(".weight"):
        return _block(t, 1, rank, degree)
    for p in COLUMN_PARALLEL:
        if f".{p}." in name:  # weight rows or bias entries, whole heads per block
            return _block(t, 0, rank, degree)
    return t


def _vocab_block(head: torch.Tensor, rank: int, degree: int) -> torch.Tensor:
    rows = vocab_rows(head.shape[0], degree)
    block = torch.zeros((rows, head.shape[1]), dtype=head.dtype, device=head.device)
    lo, hi = rank * rows, min(head.shape[0], (rank + 1) * rows)
    if hi > lo:
        block[: hi - lo] = head[lo:hi]
    return block


def shard_stored(stored: dict, weights: dict, rank: int, degree: int) -> dict:
    """The stored forms (`LoadedModel.quantized`) of rank `rank`'s blocks, cut like
    `shard_weights` (whole GGUF blocks; a form whose block would split one is left out:
    the kernel then reads the float32 block, the same bits)."""
    out: dict[str, QuantizedTensor] = {}
    for name, q in stored.items():
        cut = _stored_one(name, q, rank, degree)
        if cut is not None:
            out[name] = cut
    head = "lm_head.weight" if "lm_head.weight" in weights else "model.embed_tokens.weight"
    if head in stored:
        out["lm_head.weight"] = _stored_vocab(stored[head], rank, degree)
    return out


def _stored_one(name: str, q: QuantizedTensor, rank: int, degree: int):
    n, k = q.shape
    if any(f".{p}." in name for p in ROW_PARALLEL):
        unit_bytes, unit_k = STORED_UNITS.get(q.qtype, (0, 0))
        if not unit_bytes or (k // degree) % unit_k or k % degree:
            return None
        width = k // degree // unit_k * unit_bytes
        data = q.data.narrow(1, rank * width, width).contiguous()
        return QuantizedTensor(q.qtype, (n, k // degree), data)
    if any(f".{p}." in name for p in COLUMN_PARALLEL):
        rows = n // degree
        return QuantizedTensor(q.qtype, (rows, k), q.data.narrow(0, rank * rows, rows).contiguous())
    return q


def _stored_vocab(q: QuantizedTensor, rank: int, degree: int) -> QuantizedTensor:
    """The LM head's vocab block; padding rows are zero bytes (they widen to 0.0 in every
    stored format, as the float32 block's zero rows)."""
    rows = vocab_rows(q.shape[0], degree)
    data = torch.zeros((rows, q.data.shape[1]), dtype=q.data.dtype)
    lo, hi = rank * rows, min(q.shape[0], (rank + 1) * rows)
    if hi > lo:
        data[: hi - lo] = q.data[lo:hi]
    return QuantizedTensor(q.qtype, (rows, q.shape[1]), data)

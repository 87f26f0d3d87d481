"""Parameter placement, KV-cache allocation and the op-by-op defaults shared by the op sets that
keep their tensors in torch memory (the CPU op sets and the Triton one): data movement only."""

from __future__ import annotations

import torch

from samebits.kernels.interface import KVCache
from samebits.kernels.metadata import FlatBatch


class TorchPlacement:
    """Parameter placement, KV cache allocation and KV store shared by the torch-memory op
    sets: tensors on `device`, activations and KV cache in `act_dtype` (data movement only)."""

    device = torch.device("cpu")
    act_dtype = torch.float32

    def weight(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(device=self.device, dtype=torch.float32).contiguous()

    def embedding(self, table: torch.Tensor) -> torch.Tensor:
        return table.to(device=self.device, dtype=self.act_dtype).contiguous()

    def new_kv_cache(self, layers: int, slots: int, kv_heads: int, head_dim: int) -> KVCache:
        def make() -> torch.Tensor:
            return torch.zeros(
                (slots, kv_heads, head_dim), dtype=self.act_dtype, device=self.device
            )

        return KVCache([make() for _ in range(layers)], [make() for _ in range(layers)])

    def store_kv(self, kv: KVCache, layer: int, batch: FlatBatch, k, v) -> None:
        kv.k[layer].index_copy_(0, batch.slot_mapping, k)
        kv.v[layer].index_copy_(0, batch.slot_mapping, v)

    def qkv_rope_store(
        self, qkv: torch.Tensor, batch: FlatBatch, cos, sin, kv: KVCache, layer: int,
        heads: int, kv_heads: int, head_dim: int, norms: tuple | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """Op by op: split, [``head_rms_norm`` of q and k,] ``rope`` of contiguous q and k,
        ``store_kv`` (the reference a fused override must match bit for bit)."""
        q, k, v = split_qkv(qkv, heads, kv_heads, head_dim)
        if norms is not None:
            q_norm, k_norm, eps = norms
            self.head_rms_norm(q, q_norm, eps)
            self.head_rms_norm(k, k_norm, eps)
        self.rope(q, batch, cos, sin)
        self.rope(k, batch, cos, sin)
        self.store_kv(kv, layer, batch, k, v)
        return q

    def linear_add_rms_norm(self, linear, x, residual, w, eps):
        """Op by op: ``linear(x)``, then ``add_rms_norm`` (the reference of a fused override)."""
        return self.add_rms_norm(linear(x), residual, w, eps)

    def prepare_batch(self, batch: FlatBatch) -> FlatBatch:
        return batch


def split_qkv(
    qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``qkv [n, (heads + 2 * kv_heads) * head_dim]`` -> q, k (contiguous copies, to be
    rotated in place) and v (a view) as ``[n, heads or kv_heads, head_dim]``."""
    n, hd, kvd = qkv.shape[0], heads * head_dim, kv_heads * head_dim
    q = qkv[:, :hd].reshape(n, heads, head_dim).contiguous()
    k = qkv[:, hd : hd + kvd].reshape(n, kv_heads, head_dim).contiguous()
    v = qkv[:, hd + kvd :].reshape(n, kv_heads, head_dim)
    return q, k, v

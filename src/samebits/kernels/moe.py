"""Mixture-of-experts ops: routing (softmax over experts, top-k, renormalization) and the
experts' combine, for every op set (DESIGN.md §2b, "MoE follows it too").

`InvariantMoe` (the CPU and GPU invariant op sets) is row-local and deterministic by
construction, from torch data movement and IEEE-rounded elementwise float32 operations only
(add, subtract, multiply, divide, round, compare, select; no FMA contraction, no
transcendental library call, no reduction whose order a library chooses):

- **Router logits** come from the op set's linear with role "router" (a row-invariant linear
  with a float32 output), computed by the caller.
- **Softmax** over the E experts of a row: `m = max(l)` (exact in any order), `x = l - m`,
  `p = exp(x)` by `portable_exp` (Cody-Waite reduction and a fixed polynomial: the same bits
  on every device and at every position of the tensor), the sum `s` of p in a fixed binary
  tree (`fixed_tree_sum`: p padded with +0.0 to a power of two P, then
  `s[j] = s[j] + s[j + P/2]`, halving until one column is left), `p / s`.
- **Top-k**: k passes; pass r takes the largest remaining logit (exact max) and, among equal
  ones, the lowest expert id (`min` of the ids where the logit equals the max: integer, exact),
  then masks it with -inf. So ties go to the lower expert id, explicitly (`torch.topk`'s tie
  order is unspecified). Selecting on the logits picks a valid top-k of the probabilities
  (exp is monotone).
- **Weights**: `w_r = p[id_r]`; with renormalization (`norm_topk_prob`, and always for
  mixtral, as transformers does) `w_r / (((w_0 + w_1) + w_2) + ...)` in rank order.
- **Experts**: token t's output of expert e is `down_e(silu_mul(gate_up_e(x[t])))` with the
  op set's own linears (their split plan; every linear is row-invariant), applied to the rows
  gathered for e (any count: none, some, all tokens). The rows of the (token, rank) pairs are
  written once each by a copy (`index_copy_`, or a select in the dense path): no token
  dropping, no capacity, no atomics, no accumulation in memory.
- **Combine**: `y_t = ((w_0 * o_0 + w_1 * o_1) + ...) + w_{k-1} * o_{k-1}` in float32, added
  in top-k rank order (each product and sum rounded separately), then cast to the activation
  dtype.

So a token's MoE output is a function of its own row only: the same bits whatever the batch,
the number of tokens routed to each expert, or the order in which experts run. Evidence class:
test (`tests/kernels/test_moe_ops.py`, the MoE determinism matrices).

`FastMoe` (the fast plans, the negative control) is transformers' math in stock torch:
`torch.softmax`, `torch.topk`, looped experts accumulated with `index_add_` in expert order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from samebits.kernels.interface import Expert

INVARIANT_MOE_OPS = {
    "moe_router": "router linear (role 'router', float32 out); softmax by a portable exp "
    "(Cody-Waite + fixed polynomial) and a fixed-tree sum; top-k by k exact max passes, ties "
    "to the lower expert id; renormalized in rank order (norm_topk_prob)",
    "moe_experts": "tokens gathered per expert, each expert's gate_up / silu_mul / down on its "
    "rows (the plan's linears); outputs combined in top-k rank order in float32 (no atomics, "
    "no capacity)",
}
FAST_MOE_OPS = {
    "moe_router": "torch.softmax + torch.topk (+ renormalization)",
    "moe_experts": "looped experts, index_add_ in expert order (shape-dependent linears)",
}

# portable_exp: exp(x) = 2^n * e^r, n = round(x / ln 2), r = x - n ln 2 (Cody-Waite in two
# steps: LN2_HI has 9 significant bits, so n * LN2_HI is exact for |n| < 2^15); e^r by
# Cephes' expf polynomial (|r| <= ln2 / 2, about 1 ulp). Below EXP_FLOOR the result is 0:
# e^-80 ~ 1.8e-35 is below any weight that matters, and 2^n stays a normal number.
LOG2E = 1.44269504088896341
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
            1.6666665459e-1, 5.0000001201e-1)  # fmt: skip
EXP_FLOOR = -80.0


def portable_exp(x: torch.Tensor) -> torch.Tensor:
    """exp(x) for float32 x <= 0 from IEEE-rounded elementwise ops only, so every element's
    bits are a function of its value alone (any device, any tensor size or position).
    x < EXP_FLOOR (and -inf) gives +0.0; NaN stays NaN."""
    if x.dtype != torch.float32:
        raise TypeError(f"portable_exp needs float32, got {x.dtype}")
    clamped = torch.clamp(x, min=EXP_FLOOR)
    n = torch.round(torch.mul(clamped, LOG2E))
    r = torch.sub(torch.sub(clamped, torch.mul(n, LN2_HI)), torch.mul(n, LN2_LO))
    poly = torch.full_like(r, EXP_POLY[0])
    for c in EXP_POLY[1:]:
        poly = torch.add(torch.mul(poly, r), c)
    e_r = torch.add(torch.add(torch.mul(poly, torch.mul(r, r)), r), 1.0)
    scale = torch.bitwise_left_shift(n.to(torch.int32) + 127, 23).view(torch.float32)
    out = torch.mul(e_r, scale)
    return torch.where(x < EXP_FLOOR, torch.zeros_like(out), out)


def fixed_tree_sum(p: torch.Tensor) -> torch.Tensor:
    """Row sums of p [n, E] in a fixed binary tree over the columns (a function of E only):
    pad with +0.0 to a power of two, then add the upper half onto the lower half until one
    column is left. Returns [n, 1]."""
    width = 1 << max(0, (p.shape[1] - 1).bit_length())
    s = torch.nn.functional.pad(p, (0, width - p.shape[1])) if width != p.shape[1] else p
    while s.shape[1] > 1:
        half = s.shape[1] // 2
        s = torch.add(s[:, :half], s[:, half:])
    return s


def softmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """Row-local softmax of float32 logits [n, E]: max-subtract, `portable_exp`,
    `fixed_tree_sum`, divide."""
    x = torch.sub(logits, logits.amax(dim=1, keepdim=True))
    p = portable_exp(x)
    return torch.div(p, fixed_tree_sum(p))


def top_k_lowest_id(values: torch.Tensor, k: int) -> torch.Tensor:
    """The ids [n, k] of each row's k largest values, largest first; equal values go to the
    lower id first. k passes of an exact max and an integer min, no sort."""
    n, width = values.shape
    ids = torch.arange(width, device=values.device).expand(n, width)
    remaining = values.clone()
    chosen = []
    for _ in range(k):
        top = remaining.amax(dim=1, keepdim=True)
        pick = torch.where(remaining == top, ids, width).amin(dim=1, keepdim=True)
        pick = pick.clamp_(max=width - 1)  # a NaN row: a fixed, valid id
        chosen.append(pick)
        remaining.scatter_(1, pick, float("-inf"))
    return torch.cat(chosen, dim=1)


def rank_order_sum(w: torch.Tensor) -> torch.Tensor:
    """Row sums of w [n, k] added left to right (rank order). Returns [n, 1]."""
    total = w[:, :1]
    for r in range(1, w.shape[1]):
        total = torch.add(total, w[:, r : r + 1])
    return total


def route(logits: torch.Tensor, top_k: int, normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(expert ids int64 [n, k], float32 weights [n, k]) from float32 router logits [n, E];
    see the module docstring for the definition."""
    if logits.dtype != torch.float32:
        raise TypeError(f"router logits must be float32, got {logits.dtype}")
    probs = softmax_rows(logits)
    ids = top_k_lowest_id(logits, top_k)
    weights = torch.gather(probs, 1, ids)
    if normalize:
        weights = torch.div(weights, rank_order_sum(weights))
    return ids, weights


def expert_outputs(
    x: torch.Tensor, ids: torch.Tensor, experts: Sequence[Expert], silu_mul, dense: bool = False
) -> torch.Tensor:
    """[n, k, H]: row (t, r) is expert ids[t, r]'s output on x[t] (the activation dtype).

    Sparse (default): the (token, rank) pairs sorted by expert (stable), each expert run on its
    gathered rows, its outputs copied to their pairs; experts with no token are skipped (the
    per-expert counts come to the host). Dense (`dense=True`, and while a CUDA graph is being
    captured: no host sync): every expert on every row, each pair's row selected from its
    expert's output. Both give the same bits, every linear being row-invariant."""
    n, k = ids.shape
    if n == 0:
        return x.new_empty((0, k, x.shape[1]))
    if dense or _capturing(x):
        return _dense_outputs(x, ids, experts, silu_mul)
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=len(experts)).tolist()
    out = None
    start = 0
    for e, count in enumerate(counts):
        if count == 0:
            continue
        pairs = order[start : start + count]
        start += count
        y = _expert(experts[e], x.index_select(0, torch.div(pairs, k, rounding_mode="floor")),
                    silu_mul)  # fmt: skip
        if out is None:
            out = y.new_empty((n * k, y.shape[1]))
        out.index_copy_(0, pairs, y)
    return out.view(n, k, -1)


def _dense_outputs(x, ids, experts: Sequence[Expert], silu_mul) -> torch.Tensor:
    out = None
    for e, expert in enumerate(experts):
        y = _expert(expert, x, silu_mul)[:, None, :]
        if out is None:
            out = y.new_zeros((ids.shape[0], ids.shape[1], y.shape[2]))
        out = torch.where((ids == e)[:, :, None], y, out)
    return out


def _expert(expert: Expert, rows: torch.Tensor, silu_mul) -> torch.Tensor:
    gate_up, down = expert
    return down(silu_mul(gate_up(rows)))


def _capturing(x: torch.Tensor) -> bool:
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def combine(outputs: torch.Tensor, weights: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """``sum_r weights[:, r] * outputs[:, r]`` [n, H]: float32, added in rank order, cast."""
    acc = torch.mul(outputs[:, 0].float(), weights[:, :1])
    for r in range(1, outputs.shape[1]):
        acc = torch.add(acc, torch.mul(outputs[:, r].float(), weights[:, r : r + 1]))
    return acc.to(out_dtype)


class InvariantMoe:
    """The MoE ops of the invariant op sets (see the module docstring), a mixin: the op set
    brings `silu_mul` and `act_dtype`."""

    act_dtype: torch.dtype
    silu_mul: Callable[[torch.Tensor], torch.Tensor]

    def moe_route(
        self, logits: torch.Tensor, top_k: int, normalize: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return route(logits, top_k, normalize)

    def moe_group(self, experts: Sequence[Expert]) -> Sequence[Expert]:
        """The experts as `moe_experts` takes them (here: as they are)."""
        return list(experts)

    def moe_experts(
        self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
        experts: Sequence[Expert],
    ) -> torch.Tensor:  # fmt: skip
        outputs = expert_outputs(x, ids, experts, self.silu_mul)
        return combine(outputs, weights, self.act_dtype)


class FastMoe:
    """transformers' MoE math in stock torch (the negative control: shape-dependent), a mixin
    like `InvariantMoe`."""

    act_dtype: torch.dtype
    silu_mul: Callable[[torch.Tensor], torch.Tensor]

    def moe_route(
        self, logits: torch.Tensor, top_k: int, normalize: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(logits.float(), dim=-1)
        weights, ids = torch.topk(probs, top_k, dim=-1)
        if normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return ids, weights

    def moe_group(self, experts: Sequence[Expert]) -> Sequence[Expert]:
        return list(experts)

    def moe_experts(self, x, ids, weights, experts: Sequence[Expert]) -> torch.Tensor:
        """Experts with tokens in id order, each on its tokens, accumulated by `index_add_`;
        while a CUDA graph is captured (no host sync), every expert on every row, weighted
        by the row's weight for it (0 if not chosen)."""
        out = torch.zeros((x.shape[0], x.shape[1]), dtype=torch.float32, device=x.device)
        if _capturing(x):
            for e, expert in enumerate(experts):
                w_e = torch.where(ids == e, weights, 0.0).sum(dim=-1, keepdim=True)
                out.add_(_expert(expert, x, self.silu_mul).float() * w_e)
            return out.to(self.act_dtype)
        for e in torch.unique(ids).tolist():
            token, rank = torch.where(ids == e)
            y = _expert(experts[e], x[token], self.silu_mul).float()
            out.index_add_(0, token, y * weights[token, rank, None])
        return out.to(self.act_dtype)

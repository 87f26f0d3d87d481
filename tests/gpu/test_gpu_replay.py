"""The GPU plan's split-plan linear equals its CPU replay (samebits.kernels.replay), as bits, on
every MMA input class (signed zeros, subnormals, inf/NaN, cancellations, near-max: the replay's
chosen NaN and overflow rules for the fp32 sums and the bf16 cast meet the GPU here) and every
launch of the table in both forms (the long run on random weights is
benchmarks/replay_linear_check.py)."""

from __future__ import annotations

import numpy as np
import pytest

from samebits.kernels.cpu import mma_cases

pytestmark = pytest.mark.gpu

SHAPES = [  # (role, n, k, bias)
    ("o", 256, 1024, False),  # S = 4
    ("qkv", 192, 256, True),  # S = 1, bias
    ("qkv", 128, 64, True),  # one step per range, bias
    ("lm_head", 320, 64, False),  # fp32 output
]


def _bits(t) -> np.ndarray:
    import torch

    view = {torch.bfloat16: torch.int16, torch.float32: torch.int32}[t.dtype]
    out = t.cpu().contiguous().view(view).numpy()
    return out.view(np.uint16 if view == torch.int16 else np.uint32)


@pytest.mark.parametrize(("role", "n", "k", "has_bias"), SHAPES)
def test_linear_equals_replay_on_every_class(cuda, gpu_record, role, n, k, has_bias):
    import torch

    from samebits.kernels.replay import ReplayLinear
    from samebits.kernels.splitplan import split_plan
    from samebits.kernels.triton.launches import table_launches
    from samebits.kernels.triton.linear import linear

    plan = split_plan(n, k, role)
    out_dtype = torch.float32 if role == "lm_head" else torch.bfloat16
    bad: dict[str, int] = {}
    for i, kind in enumerate(sorted(mma_cases.KINDS)):
        x, w, _ = mma_cases.make_case(kind, 130, n, k, np.random.default_rng([n, k, i]))
        bias = np.random.default_rng(i).standard_normal(n).astype(np.float32) if has_bias else None
        replay = ReplayLinear(w, bias, plan, str(out_dtype).removeprefix("torch."))
        xt = torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
        wt = torch.from_numpy(w.view(np.int16)).cuda().view(torch.bfloat16)
        bt = None if bias is None else torch.from_numpy(bias).cuda()
        for m in (1, 17, 130):
            want = replay(x[:m])
            for launch in table_launches(plan):
                y = linear(xt[:m].contiguous(), wt, bt, plan, out_dtype, launch=launch)
                key = f"{kind} M={m} {launch.kind} {launch.block_m}x{launch.block_n}"
                bad[key] = int((_bits(y) != want).sum())
    wrong = {key: v for key, v in bad.items() if v}
    gpu_record(f"replay linear {role} {n}x{k} bias={has_bias}: launches x classes x M, "
               f"mismatching", f"{len(wrong)} of {len(bad)}: {dict(list(wrong.items())[:12])}")  # fmt: skip
    assert not wrong, wrong

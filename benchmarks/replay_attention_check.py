"""The shipped attention kernels (`kernels/triton/_attention_kernel.py`, soft exp2, no fp
fusion) on the GPU: their bits against the CPU replay (`kernels/replay/attention.py`), and
their time against a baseline kernel file (``--baseline``: the kernels before the exp change,
``git show 2d34e4f:src/samebits/kernels/triton/_attention_kernel.py``, launched as they were,
with fp fusion).

Cases: a prefill of one request (spans in sequence, full and sliding window) and a decode
step of a few requests at long positions (split-span + merge launches), each through
`kernels/triton/attention.py`'s launches, once with the real bf16 output and once with an
fp32 output (the rows before the cast). A sample of (token, head) rows is replayed on the
CPU; the JSON reports how many match bit for bit in fp32 and in bf16 (`verdict`: all).

    python benchmarks/replay_attention_check.py --baseline old_attention.py --out check.json
GPU (the H200). On a CPU, `TRITON_INTERPRET=1 ... --device cpu --small` runs the same code
with the interpreter given the GPU's semantics (`kernels/replay/interpret.py`), no timing.
Evidence class: measurement.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from samebits.kernels.interface import ATTENTION_SPAN  # noqa: E402
from samebits.kernels.replay import attention as ra  # noqa: E402
from samebits.kernels.triton import attention as ta  # noqa: E402

KERNELS = ("paged_attention_kernel", "split_span_kernel", "merge_spans_kernel")
SHIPPED = {name: getattr(ta, name) for name in KERNELS}
PAGE = 16


def use(kernels: dict, fp_fusion: bool) -> None:
    for name, kernel in kernels.items():
        setattr(ta, name, kernel)
    ta.FP_FUSION = fp_fusion


def load_baseline(path: str) -> dict:
    """The kernels of an older `_attention_kernel.py` (a file path), by name."""
    spec = importlib.util.spec_from_file_location("baseline_attention_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernels = {name: getattr(module, name) for name in KERNELS}
    merge = kernels["merge_spans_kernel"]
    if "UNROLL" not in merge.arg_names:
        kernels["merge_spans_kernel"] = _DropArgs(merge, ("UNROLL",))
    return kernels


class _DropArgs:
    """A kernel from before an argument existed, launched as `kernel[grid](...)` by today's
    launcher: the arguments it does not know are dropped (an older loop shape, not a new one)."""

    def __init__(self, kernel, names: tuple[str, ...]) -> None:
        self.kernel, self.names = kernel, names

    def __getitem__(self, grid):
        launch = self.kernel[grid]
        return lambda *args, **kw: launch(
            *args, **{k: v for k, v in kw.items() if k not in self.names}
        )


def make_case(lengths, query_lens, hkv, group, d, device, seed, span):
    """Requests of `lengths` keys whose last `query_lens` tokens are queried, paged."""
    g = torch.Generator().manual_seed(seed)
    pages = [-(-n // PAGE) for n in lengths]
    order = np.random.default_rng(seed).permutation(sum(pages) + 4)
    tables = np.zeros((len(lengths), max(pages)), np.int32)
    kc = torch.zeros(((sum(pages) + 4) * PAGE, hkv, d), dtype=torch.bfloat16)
    vc = kc.clone()
    ks, vs, qs, positions, start = [], [], [], [], 0
    for r, (n, nq) in enumerate(zip(lengths, query_lens, strict=True)):
        tables[r, : pages[r]] = order[start : start + pages[r]]
        start += pages[r]
        k = torch.randn((n, hkv, d), generator=g).to(torch.bfloat16)
        v = torch.randn((n, hkv, d), generator=g).to(torch.bfloat16)
        pos = np.arange(n)
        slots = torch.from_numpy(tables[r, pos // PAGE] * PAGE + pos % PAGE)
        kc[slots], vc[slots] = k, v
        ks.append(k)
        vs.append(v)
        qs.append((torch.randn((nq, hkv * group, d), generator=g) * 2).to(torch.bfloat16))
        positions.append(np.arange(n - nq, n))
    qsl = np.cumsum([0] + list(query_lens))
    meta = ta.attention_metadata(np.concatenate(positions), qsl, tables, PAGE, group, device,
                                 span=span)  # fmt: skip
    q = torch.cat(qs).to(device)
    return dict(q=q, kc=kc.to(device), vc=vc.to(device), meta=meta, ks=ks, vs=vs,
                positions=positions, qsl=qsl)  # fmt: skip


def launch(case, scale, window, out_dtype):
    q, kc, vc, meta = case["q"], case["kc"], case["vc"], case["meta"]
    return ta.paged_attention(q, kc, vc, meta, scale, window, out_dtype=out_dtype)


def bits(t: torch.Tensor) -> np.ndarray:
    view = torch.int16 if t.dtype == torch.bfloat16 else torch.int32
    u = np.uint16 if t.dtype == torch.bfloat16 else np.uint32
    return t.detach().cpu().contiguous().view(view).numpy().view(u)


def sampled_rows(case, count: int, seed: int) -> list[tuple[int, int, int, int]]:
    """(request, row in q, token's position, head) of `count` random (token, head) rows."""
    heads = case["q"].shape[1]
    rows = [(r, int(case["qsl"][r]) + i, int(p), h)
            for r, pos in enumerate(case["positions"]) for i, p in enumerate(pos)
            for h in range(heads)]  # fmt: skip
    rng = np.random.default_rng(seed)
    return [rows[i] for i in sorted(rng.choice(len(rows), min(count, len(rows)), replace=False))]


def check(case, scale, window, group, rows) -> dict:
    out16, out32 = (bits(launch(case, scale, window, dt)) for dt in (torch.bfloat16, torch.float32))
    lau = ra.Launch(ta.KEY_BLOCK, case["meta"].span, scale * ta.LOG2E)
    match32 = match16 = 0
    for r, qi, pos, h in rows:
        hk = h // group
        k = bits(case["ks"][r])[:, hk]
        v = bits(case["vs"][r])[:, hk]
        row_bits = ra.attend_row(bits(case["q"][qi, h]), k, v, pos, window, lau).view(np.uint32)
        match32 += bool(np.array_equal(out32[qi, h], row_bits))
        match16 += bool(np.array_equal(out16[qi, h], ra.fp32_to_bf16_bits(row_bits)))
    return {"fp32": match32, "bf16": match16}


def timed(case, scale, window, device) -> float | None:
    if device != "cuda":
        return None
    import triton

    return float(triton.testing.do_bench(lambda: launch(case, scale, window, torch.bfloat16)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."),
                                                 "replay_attention_check.json"))  # fmt: skip
    p.add_argument("--device", default="cuda")
    p.add_argument("--baseline", help="an older _attention_kernel.py to time against (its "
                   "split_span_kernel must take the grid (KV heads, S, requests): a file before "
                   "2026-12-07 session 24 takes (requests, S, KV heads))")  # fmt: skip
    p.add_argument("--small", action="store_true", help="small shapes (interpreter runs)")
    p.add_argument("--rows", type=int, default=256, help="sampled rows replayed per case")
    a = p.parse_args()
    if a.device == "cpu":
        from samebits.kernels.replay import interpret

        interpret.gpu_semantics()
        interpret.numpy2_index()
    baseline = load_baseline(a.baseline) if a.baseline else None
    hkv, group, d = (2, 2, 16) if a.small else (8, 4, 128)
    prefill = ([150], [150]) if a.small else ([1500], [1500])
    decode = ([300, 200], [1, 1]) if a.small else ([4000, 9000, 1200, 20000], [1, 1, 1, 1])
    cases = {"prefill": (prefill, 0), "prefill_window": (prefill, 40 if a.small else 700),
             "decode": (decode, 0)}  # fmt: skip
    scale = d**-0.5
    report: dict = {"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
                    "hkv": hkv, "group": group, "head_dim": d, "baseline": a.baseline,
                    "cases": {}}  # fmt: skip
    for name, ((lengths, qlens), window) in cases.items():
        span = 128 if a.small else ATTENTION_SPAN
        case = make_case(lengths, qlens, hkv, group, d, a.device, seed=len(name), span=span)
        rows = sampled_rows(case, a.rows, seed=1)
        t0 = time.perf_counter()
        matches = check(case, scale, window, group, rows)
        shipped_ms = timed(case, scale, window, a.device)
        baseline_ms = None
        if baseline is not None:
            use(baseline, fp_fusion=True)
            baseline_ms = timed(case, scale, window, a.device)
            use(SHIPPED, fp_fusion=False)
        report["cases"][name] = {
            "lengths": lengths, "query_lens": qlens, "window": window, "rows": len(rows),
            "decode_splits": ta.decode_splits(case["meta"], hkv), "matches": matches,
            "shipped_ms": shipped_ms, "baseline_ms": baseline_ms,
            "check_s": round(time.perf_counter() - t0, 2),
        }  # fmt: skip
        print(name, json.dumps(report["cases"][name]), flush=True)
    exact = all(c["matches"]["fp32"] == c["rows"] == c["matches"]["bf16"]
                for c in report["cases"].values())  # fmt: skip
    report["verdict"] = ("every sampled row equal to the replay in fp32 and bf16" if exact
                         else "MISMATCH: the replay is not the kernel")  # fmt: skip
    Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    print(report["verdict"])


if __name__ == "__main__":
    main()

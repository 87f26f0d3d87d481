"""The proposed soft-exp2 attention kernels (`proposals/attention_softexp2.py`) on the GPU:
their bits against the CPU replay (`kernels/replay/attention.py`), and their time against the
shipped kernels (`kernels/triton/_attention_kernel.py`, `tl.exp2`).

Cases: a prefill of one request (spans in sequence, full and sliding window) and a decode
step of a few requests at long positions (split-span + merge launches). Both kernels run
through `kernels/triton/attention.py`'s launches (the proposal's kernels swapped in), once
with the real bf16 output and once with an fp32 output buffer (the rows before the cast).
A sample of (token, head) rows is replayed on the CPU under each `Contractions` setting (the
fma contractions the compiler may add to the tile update); the JSON reports, per setting,
how many sampled rows match bit for bit in fp32 and in bf16. The replay's claim holds if one
setting matches every sampled row (`verdict`).

    python benchmarks/replay_attention_check.py --out replay_attention_check.json
GPU (the H200). On a CPU, `TRITON_INTERPRET=1 ... --device cpu --small` runs the same code
with the interpreter given the GPU's semantics (MMA chain, exact fma: as
tests/kernels/triton/test_proposal_attention_softexp2.py), no timing. Evidence class:
measurement.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "proposals"))

import attention_softexp2 as proposal  # noqa: E402

from samebits.kernels.interface import ATTENTION_SPAN  # noqa: E402
from samebits.kernels.replay import attention as ra  # noqa: E402
from samebits.kernels.triton import attention as ta  # noqa: E402

KERNELS = ("paged_attention_kernel", "split_span_kernel", "merge_spans_kernel")
SHIPPED = {name: getattr(ta, name) for name in KERNELS}
PAGE = 16


def use(kernels: dict) -> None:
    for name, kernel in kernels.items():
        setattr(ta, name, kernel)


def interpreter_gpu_semantics() -> None:
    """The interpreter computes what the replay assumes of the GPU (see the test)."""
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.interpreter import TensorHandle

    from samebits.kernels.cpu import mma_emu
    from samebits.kernels.replay.linear import fp32_to_bf16_bits
    from samebits.kernels.replay.softexp import fma_f32

    builder = interpreter.InterpreterBuilder
    real_trunc = builder.create_fp_trunc

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        acc = np.ascontiguousarray(d.data.astype(np.float32)).view(np.uint32)
        out = mma_emu.chain_bits(a.data, np.ascontiguousarray(b.data.T), acc)
        return TensorHandle(out.view(np.float32), d.dtype.scalar)

    def create_fp_trunc(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            bits = np.ascontiguousarray(src.data, np.float32).view(np.uint32)
            return TensorHandle(fp32_to_bf16_bits(bits), tl.bfloat16)
        return real_trunc(self, src, dst_type)

    def get_bf16(self, value):
        fp32 = np.array([value], np.float32).view(np.uint32)
        return TensorHandle(fp32_to_bf16_bits(fp32), tl.bfloat16)

    stock_patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope) -> None:  # numpy 2.x: 1-element loop bounds
        stock_patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patch_lang_tensor
    builder.create_dot = create_dot
    builder.create_fp_trunc = create_fp_trunc
    builder.get_bf16 = get_bf16
    builder.create_fma = lambda self, x, y, z: TensorHandle(
        fma_f32(x.data, y.data, z.data), z.dtype.scalar
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
    """`attention.paged_attention`'s launches with an output of `out_dtype`."""
    q, kc, vc, meta = case["q"], case["kc"], case["vc"], case["meta"]
    if out_dtype == torch.bfloat16:
        return ta.paged_attention(q, kc, vc, meta, scale, window)
    out = torch.empty(q.shape, dtype=out_dtype, device=q.device)
    kernel_window = window or ta.FULL_WINDOW
    hkv, d = kc.shape[1], kc.shape[2]
    splits = ta.decode_splits(meta, hkv)
    if splits:
        ta._split_decode(q, kc, vc, meta, scale, splits, out, kernel_window)
        return out
    ta.paged_attention_kernel[(meta.num_programs, hkv)](
        q, kc, vc, out, meta.positions, meta.prog_req, meta.prog_row0, meta.query_end,
        meta.block_tables, meta.block_tables.shape[1], scale * ta.LOG2E, kernel_window,
        HKV=hkv, GROUP=meta.group, D=d, PAGE=meta.block_size, BLOCK_M=meta.block_m,
        BLOCK_N=ta.KEY_BLOCK, SPAN=meta.span, num_warps=meta.num_warps,
    )  # fmt: skip
    return out


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
    result = {}
    for l_fma, acc_fma in itertools.product((False, True), repeat=2):
        fuse = ra.Contractions(l_update=l_fma, acc_update=acc_fma)
        match32 = match16 = 0
        for r, qi, pos, h in rows:
            hk = h // group
            k = bits(case["ks"][r])[:, hk]
            v = bits(case["vs"][r])[:, hk]
            row = ra.attend_row(bits(case["q"][qi, h]), k, v, pos, window, lau, fuse)
            row_bits = row.view(np.uint32)
            match32 += bool(np.array_equal(out32[qi, h], row_bits))
            match16 += bool(np.array_equal(out16[qi, h], ra.fp32_to_bf16_bits(row_bits)))
        result[f"l_fma={l_fma},acc_fma={acc_fma}"] = {"fp32": match32, "bf16": match16}
    return result


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
    p.add_argument("--small", action="store_true", help="small shapes (interpreter runs)")
    p.add_argument("--rows", type=int, default=256, help="sampled rows replayed per case")
    a = p.parse_args()
    if a.device == "cpu":
        interpreter_gpu_semantics()
    hkv, group, d = (2, 2, 16) if a.small else (8, 4, 128)
    prefill = ([150], [150]) if a.small else ([1500], [1500])
    decode = ([300, 200], [1, 1]) if a.small else ([4000, 9000, 1200, 20000], [1, 1, 1, 1])
    cases = {"prefill": (prefill, 0), "prefill_window": (prefill, 40 if a.small else 700),
             "decode": (decode, 0)}  # fmt: skip
    scale = d**-0.5
    report: dict = {"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
                    "hkv": hkv, "group": group, "head_dim": d, "cases": {}}  # fmt: skip
    for name, ((lengths, qlens), window) in cases.items():
        span = 128 if a.small else ATTENTION_SPAN
        case = make_case(lengths, qlens, hkv, group, d, a.device, seed=len(name), span=span)
        rows = sampled_rows(case, a.rows, seed=1)
        t0 = time.perf_counter()
        use({n: getattr(proposal, n) for n in KERNELS})
        matches = check(case, scale, window, group, rows)
        proposed_ms = timed(case, scale, window, a.device)
        use(SHIPPED)
        shipped_ms = timed(case, scale, window, a.device)
        full = [k for k, m in matches.items() if m["fp32"] == len(rows)]
        report["cases"][name] = {
            "lengths": lengths, "query_lens": qlens, "window": window, "rows": len(rows),
            "decode_splits": ta.decode_splits(case["meta"], hkv), "matches": matches,
            "settings_matching_every_row_fp32": full, "proposed_ms": proposed_ms,
            "shipped_ms": shipped_ms, "check_s": round(time.perf_counter() - t0, 2),
        }  # fmt: skip
        print(name, json.dumps(report["cases"][name]), flush=True)
    common = set.intersection(*(set(c["settings_matching_every_row_fp32"])
                                for c in report["cases"].values()))  # fmt: skip
    report["verdict"] = (
        ("replay matches with " + ", ".join(sorted(common)))
        if common
        else ("no Contractions setting matches every sampled row: the replay is not the kernel")
    )
    Path(a.out).write_text(json.dumps(report, indent=2) + "\n")
    print(report["verdict"])


if __name__ == "__main__":
    main()

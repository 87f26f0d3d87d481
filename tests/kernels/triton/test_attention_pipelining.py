"""The split-KV decode launch of few programs (batch 1 at 4k: 64) keeps a key tile's loads in
flight while the previous one is computed: compiled ahead of time for sm_90 on the CPU
(Triton's own compiler, no GPU), its page-indirect K and V tile loads get at least two
shared-memory buffers. (At Triton 3.6's
default of 3 stages they got one: each tile waited for its own loads, `SPLIT_STAGES`.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

COMPILE = r"""
import json, re
from samebits.kernels.triton import aot, attention
from samebits.kernels.triton._attention_kernel import split_span_kernel as fn

consts = dict(HKV=8, GROUP=4, D=128, PAGE=16, BLOCK_M=attention.DECODE_BLOCK_M,
              BLOCK_N=attention.KEY_BLOCK, SPAN=512)
ptrs = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "pos_ptr": "*i32", "bt_ptr": "*i32"}
opts = {"enable_fp_fusion": attention.FP_FUSION, **attention.split_options(64)}
k = aot.compile_sm90(fn, aot.signature(fn, ptrs, consts, ["qk_scale"]), consts, opts)
kv = re.findall(r"local_alloc : \(\) -> !ttg.memdesc<(\d+)x64x128xbf16", k.asm["ttgir"])
print(json.dumps({"stages": opts["num_stages"], "kv_buffers": [int(n) for n in kv]}))
"""


def test_split_decode_launch_double_buffers_its_key_tiles():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # the K and V buffers of the three tile loops (masked head, interior, masked tail)
    assert len(got["kv_buffers"]) == 6, got
    assert min(got["kv_buffers"]) >= 2, got

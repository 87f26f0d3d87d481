"""Joining a `torchrun` env:// rendezvous (two CPU processes, gloo): rank 1 serves inside its
`LLM(...)` call and exits when rank 0 closes; rank 0's outputs equal TP = 1's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from samebits.kernels.cpu import native
from samebits.parallel.comm import free_port

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the native C kernels")

SCRIPT = """
import os, sys
from samebits import LLM
from samebits.sampling import SamplingParams
path, prompts = sys.argv[1], ["hello", "the quick brown fox"]
params = SamplingParams(max_tokens=5, temperature=0.8, seed=2)
tp = LLM(path, num_threads=1, tensor_parallel_size=2)  # a rank > 0 serves here, then exits
assert os.environ["RANK"] == "0", "only rank 0 returns from LLM(...)"
got = tp.generate(prompts, params)
topology = tp.engine.deployment.components["topology"]
tp.close()
ref = LLM(path, num_threads=1).generate(prompts, params)
views = lambda outs: [(o.outputs[0].token_ids, o.outputs[0].logits_digests) for o in outs]
print("TOPOLOGY", topology["launcher"], topology["tensor_parallel_size"])
print("SAME", views(got) == views(ref))
"""


def test_torchrun_ranks(tiny_tp_llama_dir, tmp_path):
    script = tmp_path / "tp_script.py"
    script.write_text(SCRIPT)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--master-port", str(free_port()), str(script), str(tiny_tp_llama_dir),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TOPOLOGY torchrun 2" in proc.stdout
    assert "SAME True" in proc.stdout

"""How much the device SHA-256 digests slow the decode step they run beside (issue 13: on
workload (a) device digests cost 29% of throughput). On the H200: the invariant plan's decode
graph of a batch bucket, replayed back to back as the engine's steps are, alone and with one
digest kernel per replay of that bucket's rows (each on the next of the digest streams, as
`DeviceStep` launches them), timed with CUDA events on the compute stream.

`python benchmarks/gpu_serving.py`'s model: random-weight Llama-3-8B in bf16.
Run: `python benchmarks/digest_interference.py` (one JSON object on stdout).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import torch  # noqa: E402
from gpu_serving import build_llm  # noqa: E402

from samebits.kernels.triton.sha256 import sha256_rows  # noqa: E402
from samebits.model.random_init import random_model  # noqa: E402

REPLAYS = 24
STREAMS = 8


def replay_ms(graphs, bucket: int, digest_rows: torch.Tensor | None, per_program) -> float:
    """Mean GPU ms per replay of the `bucket` graph, with a digest of `digest_rows` launched
    on a side stream before each replay (None: no digests)."""
    graphs.buffers.fill((), bucket)
    graph = graphs.graphs[bucket, False]
    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(REPLAYS):
        if digest_rows is not None:
            side = streams[i % STREAMS]
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                sha256_rows(digest_rows, per_program)
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / REPLAYS


def main() -> int:
    loaded = random_model("llama-3-8b", seed=0, device="cuda", dtype=torch.bfloat16)
    llm, _ = build_llm(loaded, "invariant", "cuda")
    graphs = llm.engine.runner.graphs
    vocab = loaded.config.vocab_size
    out: dict = {"replays": REPLAYS}
    for bucket in (64, 256):
        rows = torch.randn((bucket, vocab), device="cuda")
        sha256_rows(rows), sha256_rows(rows, 128)  # compile
        torch.cuda.synchronize()
        out[f"b{bucket}"] = {
            "alone_ms": replay_ms(graphs, bucket, None, 32),
            "with_digests_ms": replay_ms(graphs, bucket, rows, 32),
            "with_digests_4_warps_ms": replay_ms(graphs, bucket, rows, 128),
            "alone_again_ms": replay_ms(graphs, bucket, None, 32),
        }
        print(bucket, json.dumps(out[f"b{bucket}"]), file=sys.stderr, flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The ranks other than 0: started by samebits (`Workers.spawn`: one `python -m
samebits.parallel.worker` process per rank on this host, so no caller needs a
`__main__` guard) or by torchrun; each runs `serve`, the loop that executes rank 0's
commands on its shard until rank 0 says stop."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from samebits.parallel.comm import Group
from samebits.parallel.model import unpack_batch
from samebits.parallel.topology import TensorParallelError, Topology, backend_for


class Workers:
    """The processes of ranks 1 .. t-1 that samebits started, and their error reports (each
    rank writes its traceback to a file in `workdir` when it fails)."""

    def __init__(self, procs: list[subprocess.Popen], workdir: tempfile.TemporaryDirectory):
        self.procs, self.workdir = procs, workdir

    @classmethod
    def spawn(cls, config, degree: int, port: int, source: tuple | None = None) -> Workers:
        """`source`: how a rank loads the model (`model_source`; None: the config's)."""
        workdir = tempfile.TemporaryDirectory(prefix="samebits-tp-")
        spec = Path(workdir.name) / "config.pickle"
        spec.write_bytes(pickle.dumps((config, source)))
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "samebits.parallel.worker",
                    str(rank),
                    str(degree),
                    str(port),
                    str(spec),
                    str(Path(workdir.name) / f"rank{rank}.err"),
                ]
            )  # fmt: skip
            for rank in range(1, degree)
        ]
        return cls(procs, workdir)

    def check(self, state, wait_s: float = 0.0) -> None:
        """Raise TensorParallelError (kept in `state.failure`) if a rank has exited; with
        `wait_s`, wait that long for one to exit first (after a failed collective)."""
        deadline = time.monotonic() + wait_s
        while True:
            dead = [(r, p) for r, p in enumerate(self.procs, 1) if p.poll() is not None]
            if dead or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if dead:
            rank, proc = dead[0]
            state.failure = TensorParallelError(
                f"tensor-parallel rank {rank} exited (code {proc.returncode}){self._report(rank)}"
            )
            raise state.failure

    def _report(self, rank: int) -> str:
        path = Path(self.workdir.name) / f"rank{rank}.err"
        return f":\n{path.read_text()}" if path.is_file() else ""

    def join(self, timeout_s: float = 30.0) -> None:
        """Wait for every rank to exit; kill one that does not within `timeout_s`."""
        for p in self.procs:
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5.0)
        self.workdir.cleanup()


def spawned_rank(
    rank: int, world: int, port: int, config, error_file: str, source: tuple | None = None
) -> None:
    """A started rank: join the group, serve; on failure write the traceback for rank 0."""
    try:
        device = config.model_config.device
        if device == "cuda":
            torch.cuda.set_device(rank)
        topology = Topology(rank, world, backend_for(device), "spawn")
        group = Group(topology, f"tcp://127.0.0.1:{port}")
        serve(group, config, load_source(source, config))
    except BaseException:
        Path(error_file).write_text(traceback.format_exc()[-4000:])
        raise SystemExit(1) from None


def serve(group: Group, config, loaded) -> None:
    """Build this rank's shard (`deploy.prepare_rank`, the same steps as rank 0), then run
    rank 0's commands until "stop": allocate / free KV caches, run forwards."""
    from samebits.parallel.deploy import prepare_rank

    model = prepare_rank(loaded, config, group)[0]
    caches: dict[int, object] = {}
    while True:
        message, freed = group.broadcast()
        for cache_id in freed:
            caches.pop(cache_id, None)
        if message[0] == "stop":
            break
        if message[0] == "kv":
            caches[message[1]] = model.new_kv_cache(message[2])
        elif message[0] == "forward":
            model.forward(unpack_batch(message[2], model.ops.device), caches[message[1]])
        else:
            raise TensorParallelError(f"unknown command from rank 0: {message[0]!r}")
    group.destroy()


def model_source(loaded) -> tuple | None:
    """How another rank gets rank 0's model: ("random", preset, seed, layers, dtype) for a
    preset's random weights (`model.random_init`), else None (the config's model path)."""
    parts = str(getattr(loaded, "name", "")).split(":")
    if len(parts) == 3 and parts[0] == "random" and parts[1] != "custom":
        dtype = str(next(iter(loaded.weights.values())).dtype).removeprefix("torch.")
        seed = int(parts[2].removeprefix("seed"))
        return ("random", parts[1], seed, loaded.config.num_hidden_layers, dtype)
    return None


def load_source(source: tuple | None, config):
    """The model `model_source` describes, on this rank's device; None: the config's model,
    as rank 0 loaded it (`engine/assembly.load`'s steps). Rank 0 checks every rank's
    weights digest against its own."""
    from samebits.model.loader import is_random_spec

    mc = config.model_config
    if source is not None and not is_random_spec(mc.model):  # a spec: drawn as rank 0 did
        from samebits.model.random_init import random_model

        _, preset, seed, layers, dtype = source
        device = "cuda" if mc.device == "cuda" else "cpu"
        return random_model(preset, seed, device, getattr(torch, dtype), num_layers=layers)
    from samebits.model import load_model, weights_target

    return load_model(mc.model, weights_to=weights_target(mc.device, mc.dtype, mc.kernel_plan))


def main(argv: list[str]) -> None:
    rank, world, port, spec, error_file = argv
    config, source = pickle.loads(Path(spec).read_bytes())
    os.environ.setdefault("SAMEBITS_TP_RANK", rank)
    spawned_rank(int(rank), int(world), int(port), config, error_file, source)


if __name__ == "__main__":
    main(sys.argv[1:])

"""`samebits certify --covers MODEL`: no GPU, no proving; exit 0 when the certificates cover
every unit the model's GPU deployment gates on (the gate's own check), else 1 naming them."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from samebits.analysis import certify_cli
from samebits.analysis.published_shapes import LARGER, LLAMA_3_2_3B, PUBLISHED
from samebits.kernels.triton.certified import gate
from samebits.kernels.triton.certified import units as U
from samebits.model.config import model_config_from_hf


def _write(tmp_path, raw: dict, name: str = "config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return path


def test_covers_a_shipped_model(capsys, monkeypatch):
    monkeypatch.delenv(gate.ENV_DIR, raising=False)
    assert certify_cli.main(["--covers", "llama-3-8b"]) == 0
    assert "llama-3-8b: covered" in capsys.readouterr().out


def test_covers_names_what_is_missing(tmp_path, capsys, monkeypatch):
    """An empty certificate directory covers nothing: every unit is named, exit 1."""
    monkeypatch.setenv(gate.ENV_DIR, str(tmp_path / "empty"))
    cfg = _write(tmp_path, LLAMA_3_2_3B)
    assert certify_cli.main(["--covers", str(cfg)]) == 1
    out = capsys.readouterr().out
    units = U.units_for(U.dims_of(model_config_from_hf(LLAMA_3_2_3B)))
    for u in units:
        assert f"NOT COVERED {u['key']}: missing" in out
    assert f"NOT covered ({len(units)} units)" in out


def test_covers_reports_a_stale_certificate(tmp_path, capsys, monkeypatch):
    """The gate's validity check, not only presence: a certificate of another kernel source."""
    certs = tmp_path / "certs"
    certs.mkdir()
    units = certify_cli.units_of(["tiny-llama"])
    for u in units:  # each unit's own certificate, else its class's (head classes: rope, ...)
        own = gate.SHIPPED_DIR / f"{u['key']}.json"
        src = own if own.exists() else gate.SHIPPED_DIR / f"{U.symbolic_unit(u)['key']}.json"
        (certs / src.name).write_bytes(src.read_bytes())
    monkeypatch.setenv(gate.ENV_DIR, str(certs))
    assert certify_cli.main(["--covers", "tiny-llama"]) == 0
    victim = next(u for u in units if u["kind"] == "linear")
    rec = json.loads((certs / f"{victim['key']}.json").read_text())
    rec["kernel_source_sha256"] = "0" * 64
    (certs / f"{victim['key']}.json").write_text(json.dumps(rec))
    capsys.readouterr()
    assert certify_cli.main(["--covers", "tiny-llama"]) == 1
    out = capsys.readouterr().out
    assert f"NOT COVERED {victim['key']}: stale: _linear_kernels.py changed" in out


def test_covers_an_hf_folder_and_rejects_an_unknown_name(tmp_path, monkeypatch):
    monkeypatch.setenv(gate.ENV_DIR, str(tmp_path / "empty"))
    _write(tmp_path, LLAMA_3_2_3B)
    assert certify_cli.main(["--covers", str(tmp_path)]) == 1  # the folder's config.json
    with pytest.raises(ValueError, match="not a preset"):
        certify_cli.main(["--covers", "no-such-model"])


def test_covers_cli_is_fast_and_needs_no_solver(tmp_path):
    """The subprocess imports neither z3 nor the prover; seconds, not a proof run."""
    code = ("import sys; from samebits.analysis.certify_cli import main; rc = main(['--covers', "
            "'llama-3-8b']); bad = [m for m in sys.modules if m == 'z3' or "
            "m.startswith('samebits.analysis.kernel_prover')]; print('BAD', bad); "
            "sys.exit(rc)")  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert "BAD []" in out.stdout and after.ru_utime - before.ru_utime < 60


# --- published shapes against the shipped set (class certificates) -------------------------

# covered by the shipped set: the linear K classes (N and K symbolic, the k loop folded)
# and the fused units per shape; Llama-3.2-3B's (h24 kv8) and Qwen2.5-7B's (h28 kv4) attention per shape
COVERED = ("qwen3-4b", "llama-3.2-3b", "mistral-nemo-12b", "qwen2.5-7b")


def _covers(tmp_path, raw: dict) -> tuple[int, str, float]:
    """Exit code, output and CPU seconds (user + sys) of `samebits certify --covers` on
    ``raw`` in a subprocess (CPU time: the shared dev machine's wall time follows its load)."""
    cfg = _write(tmp_path, raw)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "samebits.cli", "certify", "--covers", str(cfg)],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out.returncode, out.stdout + out.stderr, cpu


@pytest.mark.parametrize("name", COVERED)
def test_published_shape_is_covered_by_the_shipped_set(tmp_path, monkeypatch, name):
    """No per-model proving: the class certificates cover the shape's linears (any N of the
    class), row widths, and its padded vocabularies; in seconds (limit: one minute)."""
    monkeypatch.delenv(gate.ENV_DIR, raising=False)
    raw = PUBLISHED[name]
    for pad in (0, 1, 4096 - raw["vocab_size"] % 4096, 100_000):
        rc, out, cpu = _covers(tmp_path, {**raw, "vocab_size": raw["vocab_size"] + pad})
        assert rc == 0 and "NOT COVERED" not in out, out
        assert cpu < 60, cpu


@pytest.mark.parametrize("name", sorted(LARGER))
def test_larger_published_shapes_are_covered_with_fused_launches_op_by_op(tmp_path, monkeypatch,
                                                                          name):  # fmt: skip
    """Shapes past the shipped per-shape units (head counts 33-64, hidden 5120-8192): every
    unit is covered by a class certificate, except fused launches, which run op by op (their
    op-by-op path is covered); in seconds."""
    monkeypatch.delenv(gate.ENV_DIR, raising=False)
    rc, out, cpu = _covers(tmp_path, LARGER[name])
    assert rc == 0 and "NOT COVERED" not in out, out
    op_by_op = [line.split()[3].rstrip(":") for line in out.splitlines()
                if line.startswith("OP BY OP")]  # fmt: skip
    assert op_by_op and all(k.startswith(("fused.", "rows.qkv_rope_store.")) for k in op_by_op)
    assert f"({len(op_by_op)} fused units run op by op)" in out
    assert cpu < 60, cpu


def test_gemma_3_12b_is_covered(capsys, monkeypatch):
    """The windowed-attention d256 head shape (h16 kv8) and the GeGLU rows are shipped."""
    monkeypatch.delenv(gate.ENV_DIR, raising=False)
    assert certify_cli.main(["--covers", "gemma-3-12b"]) == 0
    assert "gemma-3-12b: covered" in capsys.readouterr().out


def test_tied_embeddings_and_qkv_bias_are_in_the_units():
    """Qwen3-4B ties its embeddings (lm_head is the embedding: still a launched linear);
    Qwen2.5-7B's qkv has a bias (its own class key)."""
    keys = {u["key"] for u in certify_cli.units_of(["published:qwen3-4b"])}
    assert PUBLISHED["qwen3-4b"]["tie_word_embeddings"] and "linear.lm_head.151936x2560" in keys
    sym = U.symbolic_unit(next(u for u in certify_cli.units_of(["published:qwen2.5-7b"])
                               if u["role"] == "qkv" if u["kind"] == "linear"))  # fmt: skip
    assert sym["key"].endswith(".bias") and sym["bias"]


# published attention head shapes that no shipped model has: covered by the head classes
# (KV heads symbolic at each group 1..8 and head dim 64 / 128 / 256), with no per-shape proof
UNSHIPPED_HEADS = {
    "qwen2.5-14b / 32b": (40, 8, 128), "qwen2.5-0.5b": (14, 2, 64), "qwen2.5-1.5b": (12, 2, 128),
    "qwen2.5-3b": (16, 2, 128), "llama-3.1-70b": (64, 8, 128), "llama-3.2-1b": (32, 8, 64),
    "gemma-3-1b": (4, 1, 256), "gemma-3-4b": (8, 4, 256), "smollm2-360m": (15, 5, 64),
    "smollm2-1.7b (MHA)": (32, 32, 64), "qwen3-0.6b": (16, 8, 128),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(UNSHIPPED_HEADS))
def test_unshipped_attention_head_shapes_are_covered_by_the_head_classes(monkeypatch, name):
    monkeypatch.delenv(gate.ENV_DIR, raising=False)
    h, kv, d = UNSHIPPED_HEADS[name]
    dims = U.dims_of(
        {
            "hidden_size": h * d,
            "intermediate_size": 4 * h * d,
            "head_dim": d,
            "num_attention_heads": h,
            "num_key_value_heads": kv,
            "vocab_size": 32000,
        }
    )
    units = [u for u in U.units_for(dims) if u["kind"] == "attention"]  # fmt: skip
    assert len(units) == 2
    assert not any((gate.SHIPPED_DIR / f"{u['key']}.json").exists() for u in units)
    res = gate.check(units)
    assert all(p is None for p in res["units"].values()), res["units"]

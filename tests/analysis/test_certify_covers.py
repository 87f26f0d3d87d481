"""`samebits certify --covers MODEL`: no GPU, no proving; exit 0 when the certificates cover
every unit the model's GPU deployment gates on (the gate's own check), else 1 naming them."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from samebits.analysis import certify_cli
from samebits.analysis.published_shapes import LLAMA_3_2_3B
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
    for u in units:
        (certs / f"{u['key']}.json").write_bytes(
            (gate.SHIPPED_DIR / f"{u['key']}.json").read_bytes()
        )
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
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "BAD []" in out.stdout and time.perf_counter() - t0 < 60

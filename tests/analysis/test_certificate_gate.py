"""Fail-closed gating of the GPU plan on kernel certificates, on the CPU (no GPU, no solver for
the gate itself): a missing or stale certificate refuses, a valid set passes and its digest
goes into the fingerprint, SAMEBITS_ALLOW_UNCERTIFIED=1 deploys and records "uncertified"."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from samebits.analysis import certify_cli
from samebits.deployment import _certificates, build_deployment
from samebits.kernels import fingerprint as F
from samebits.kernels.plan import build_plan
from samebits.kernels.triton.certified import gate
from samebits.kernels.triton.certified import units as U
from samebits.model.random_init import random_model


@pytest.fixture(scope="module")
def loaded():
    return random_model("tiny-llama", seed=0)


@pytest.fixture
def cuda_plan(loaded):
    cfg = loaded.config
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    return build_plan("invariant", None, head_dim=cfg.head_dim, group=group, device="cuda",
                      dtype="bfloat16")  # fmt: skip


@pytest.fixture
def certdir(tmp_path, monkeypatch):
    monkeypatch.setenv(gate.ENV_DIR, str(tmp_path))
    monkeypatch.delenv(gate.ENV_ALLOW, raising=False)
    return tmp_path


def _units(loaded):
    return U.units_for(U.dims_of(loaded.config))


def _write_valid(directory, unit):
    """A certificate record as `samebits certify` writes it (the proofs themselves are
    exercised by test_cli_certify_and_check below)."""
    rec = {
        "unit": unit,
        "kernel_file": U.kernel_file(unit).name,
        "kernel_source_sha256": U.source_sha256(U.kernel_file(unit)),
        **({U.ALSO_RECORD: U.also_sources(U.also_files(unit))} if U.also_files(unit) else {}),
        "specialization": U.specialization(unit),
        "specs": [f"{unit['key']}.x"],
        "results": {f"{unit['key']}.x": "proved"},
        "proved": True,
        "certificates": [{"result": {"status": "proved"}}],
    }
    (directory / f"{unit['key']}.json").write_text(json.dumps(rec))


def test_missing_certificate_refuses_before_touching_the_gpu(loaded, certdir):
    with pytest.raises(gate.UncertifiedKernelError) as e:
        build_deployment(loaded, "invariant", device="cuda")
    msg = str(e.value)
    assert "missing" in msg and "samebits certify --model" in msg and gate.ENV_ALLOW in msg
    for unit in _units(loaded):
        assert unit["key"] in msg


def test_stale_certificate_refuses(loaded, cuda_plan, certdir):
    units = _units(loaded)
    for u in units:
        _write_valid(certdir, u)
    assert _certificates(cuda_plan, loaded)["status"] == "certified"
    victim = next(u for u in units if u["kind"] == "attention")
    path = certdir / f"{victim['key']}.json"
    rec = json.loads(path.read_text())
    rec["kernel_source_sha256"] = "0" * 64  # proved against another kernel source
    path.write_text(json.dumps(rec))
    with pytest.raises(gate.UncertifiedKernelError, match="stale: _attention_kernel.py changed"):
        _certificates(cuda_plan, loaded)
    rec = json.loads(path.read_text())
    rec["kernel_source_sha256"] = U.source_sha256(U.kernel_file(victim))
    rec["specialization"]["key_block"] = 32  # the launch code changed
    path.write_text(json.dumps(rec))
    with pytest.raises(gate.UncertifiedKernelError, match="launches / constexprs"):
        _certificates(cuda_plan, loaded)
    rec["specialization"] = U.specialization(victim)
    rec["results"] = {"x": "refuted"}
    rec["proved"] = False
    path.write_text(json.dumps(rec))
    with pytest.raises(gate.UncertifiedKernelError, match="not proved"):
        _certificates(cuda_plan, loaded)


def test_valid_certificates_pass_and_enter_the_fingerprint(loaded, cuda_plan, certdir, monkeypatch):
    for u in _units(loaded):
        _write_valid(certdir, u)
    comp = _certificates(cuda_plan, loaded)
    assert comp["status"] == "certified" and len(comp["digest"]) == 64
    assert comp["units"] == sorted(u["key"] for u in _units(loaded))
    monkeypatch.setattr(F, "gpu", lambda: {"name": "test"})
    c1 = F.fingerprint_components(cuda_plan, loaded.config, "w", {}, [], comp)
    assert c1["certificates"] == comp
    # another certificate set (one file changed) gives another fingerprint
    key = comp["units"][0]
    path = certdir / f"{key}.json"
    path.write_text(path.read_text().replace('"proved": true', '"proved": true ', 1))
    comp2 = _certificates(cuda_plan, loaded)
    assert comp2["status"] == "certified" and comp2["digest"] != comp["digest"]
    c2 = F.fingerprint_components(cuda_plan, loaded.config, "w", {}, [], comp2)
    assert F.fingerprint(c1) != F.fingerprint(c2)
    lines = gate.certificate_lines(type("D", (), {"components": c1})())
    assert lines[0].startswith("kernel certificates: certified")
    assert all(line.endswith(": proved") for line in lines[1:])


def test_missing_fused_certificate_runs_op_by_op(loaded, cuda_plan, certdir, capsys):
    """tiny-llama's o_proj (256x256) splits K: its deployment launches the fused split-K sum +
    residual add + RMSNorm where that unit has a valid certificate; without one (missing or
    stale) the plan runs its op-by-op path (the linear and add_rms_norm, both certified),
    announced and listed in the component; without the op-by-op path's too, it is refused."""
    units = _units(loaded)
    fused = [u for u in units if u["kind"] == "fused"]
    assert [u["key"] for u in fused] == ["fused.linear_add_rms_norm.o.256x256",
                                         "fused.linear_add_rms_norm.down.256x768"]  # fmt: skip
    for u in units:
        if u["kind"] != "fused":
            _write_valid(certdir, u)
    comp = _certificates(cuda_plan, loaded)
    assert comp["status"] == "certified" and comp["op_by_op"] == sorted(u["key"] for u in fused)
    err = capsys.readouterr().err
    assert "2 fused launch(es) without a valid certificate run op by op" in err
    assert all(f"{u['key']}: missing" in err for u in fused)
    plan = cuda_plan.with_op_by_op(comp)
    assert plan.op_by_op == tuple(comp["op_by_op"]) and plan.to_dict() == cuda_plan.to_dict()
    assert "run op by op" in plan.describe()
    lines = gate.certificate_lines(type("D", (), {"components": {"certificates": comp}})())
    assert sum("runs op by op" in line for line in lines) == 2
    for u in fused:
        _write_valid(certdir, u)
    assert "op_by_op" not in _certificates(cuda_plan, loaded)
    path = certdir / f"{fused[0]['key']}.json"
    rec = json.loads(path.read_text())
    rec[U.ALSO_RECORD]["_linear_kernels.py"] = "0" * 64  # proved against another ordered sum
    path.write_text(json.dumps(rec))
    assert _certificates(cuda_plan, loaded)["op_by_op"] == [fused[0]["key"]]
    assert "stale: _linear_kernels.py changed" in capsys.readouterr().err
    (certdir / f"rows.add_rms_norm.{loaded.config.hidden_size}.json").unlink()
    with pytest.raises(gate.UncertifiedKernelError) as e:
        _certificates(cuda_plan, loaded)
    assert f"{fused[0]['key']}: stale" in str(e.value) and "rows.add_rms_norm" in str(e.value)


def test_fused_qkv_without_certificate_runs_op_by_op_when_rope_is_certified(
    loaded, cuda_plan, certdir
):
    units = _units(loaded)
    qkv = next(u for u in units if u.get("op") == "qkv_rope_store")
    assert U.op_by_op_units(qkv) == [f"rows.rope.h{h}.d{qkv['head_dim']}"
                                     for h in sorted({qkv["heads"], qkv["kv_heads"]})]  # fmt: skip
    for u in units:
        if u is not qkv:
            _write_valid(certdir, u)
    assert _certificates(cuda_plan, loaded)["op_by_op"] == [qkv["key"]]
    (certdir / f"{U.op_by_op_units(qkv)[-1]}.json").unlink()
    with pytest.raises(gate.UncertifiedKernelError, match=qkv["key"]):
        _certificates(cuda_plan, loaded)


def test_opt_out_is_loud_and_recorded(loaded, cuda_plan, certdir, monkeypatch, capsys):
    monkeypatch.setenv(gate.ENV_ALLOW, "1")
    comp = _certificates(cuda_plan, loaded)
    err = capsys.readouterr().err
    assert "WITHOUT valid kernel certificates" in err and "uncertified" in err
    assert comp["status"] == "uncertified"
    assert set(comp["problems"]) == {u["key"] for u in _units(loaded)}
    lines = gate.certificate_lines(type("D", (), {"components": {"certificates": comp}})())
    assert "uncertified" in lines[0] and any(line.endswith(": missing") for line in lines)


def test_cpu_plans_are_not_gated(loaded, certdir):
    dep = build_deployment(loaded, "invariant", device="cpu")
    assert "certificates" not in dep.components
    assert gate.certificate_lines(dep) == []


def test_cli_certify_and_check(tmp_path):
    pytest.importorskip("z3")
    unit = dict(key="rows.silu_mul.128", kind="rows", op="silu_mul", inner=128)
    from samebits.analysis.kernel_prover.certify import certify_units

    (rec,) = certify_units([unit], tmp_path)
    assert rec["proved"] and rec["results"] == {"rows.silu_mul.128.batch": "proved"}
    out = subprocess.run([sys.executable, "-m", "samebits.cli", "certify", "--check", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1/1 valid" in out.stdout
    path = tmp_path / "rows.silu_mul.128.json"
    data = json.loads(path.read_text())
    data["kernel_source_sha256"] = "f" * 64
    path.write_text(json.dumps(data))
    assert certify_cli.main(["--check", str(tmp_path)]) == 1


def test_shipped_certificates_cover_the_shipped_models():
    """The package's certificate set is valid for the kernels in this tree. When this fails
    after a kernel or launch change, run `samebits certify --shipped` (CPU, minutes)."""
    units = certify_cli.units_of(certify_cli.SHIPPED_MODELS)
    res = gate.check(units, gate.SHIPPED_DIR)
    bad = {k: p for k, p in res["units"].items() if p is not None}
    assert not bad, f"run `samebits certify --shipped`: {bad}"


def test_the_embedded_model_is_in_the_shipped_set(smollm2_model):
    """`--device cuda` on the README's default model deploys without an opt-out: every unit
    its deployment gates on is shipped (and the test above checks they are valid)."""
    from samebits.kernels.triton.certified.units import dims_of, units_for

    needed = {u["key"] for u in units_for(dims_of(smollm2_model.config))}
    shipped = {u["key"] for u in certify_cli.units_of(certify_cli.SHIPPED_MODELS)}
    assert needed and needed <= shipped, sorted(needed - shipped)


def test_block_size_outside_the_certified_pages_refuses(monkeypatch, capsys):
    class Deployment:  # a certified GPU deployment as the engine sees it
        components = {"certificates": {"status": "certified", "units": [], "digest": "0"}}

    monkeypatch.delenv(gate.ENV_ALLOW, raising=False)
    for size in U.ATTENTION_PAGES:
        gate.check_block_size(Deployment(), size)
    with pytest.raises(gate.UncertifiedKernelError, match="KV block size 64"):
        gate.check_block_size(Deployment(), 64)
    monkeypatch.setenv(gate.ENV_ALLOW, "1")
    gate.check_block_size(Deployment(), 64)
    assert "running uncertified" in capsys.readouterr().err

    class CpuDeployment:
        components: dict = {}

    monkeypatch.delenv(gate.ENV_ALLOW)
    gate.check_block_size(CpuDeployment(), 64)  # no certificate component: not gated


def test_certify_reuses_only_proofs_of_the_same_specialization(tmp_path):
    """A second certification keeps the certificates whose kernel source, launches and goal
    are unchanged, and proves again one whose recorded launch differs (as after a launch-table
    change); `reuse=False` proves everything."""
    pytest.importorskip("z3")
    from samebits.analysis.kernel_prover.certify import certify_units

    unit = dict(key="rows.silu_mul.128", kind="rows", op="silu_mul", inner=128)
    (first,) = certify_units([unit], tmp_path)
    assert first["reused"] == []
    (again,) = certify_units([unit], tmp_path)
    assert again["reused"] == again["specs"] and again["proved"]
    assert again["certificates"] == first["certificates"]
    path = tmp_path / "rows.silu_mul.128.json"
    data = json.loads(path.read_text())
    data["certificates"][0]["right_launch"][0]["grid"] = [999]
    path.write_text(json.dumps(data))
    (redone,) = certify_units([unit], tmp_path)
    assert redone["reused"] == [] and redone["proved"]
    assert redone["certificates"][0]["right_launch"] == first["certificates"][0]["right_launch"]
    (forced,) = certify_units([unit], tmp_path, reuse=False)
    assert forced["reused"] == []


def test_reference_path_change_makes_the_fused_unit_stale(tmp_path, monkeypatch):
    """A fused kernel's certificate rests on the op-by-op path's text (reference.py): when
    that text changes, the gate calls the unit stale (other units are unaffected)."""
    from samebits.kernels.triton.certified import reference

    unit = dict(key="rows.qkv_rope_store.h4.kv2.d16", kind="rows", op="qkv_rope_store",
                heads=4, kv_heads=2, head_dim=16)  # fmt: skip
    key = U.symbolic_unit(unit)["key"]  # its head class's certificate (h3-4.kv2.d16)
    src = gate.SHIPPED_DIR / f"{key}.json"
    (tmp_path / src.name).write_bytes(src.read_bytes())
    assert gate.check_unit(unit, tmp_path)[0] is None
    monkeypatch.setattr(reference, "SOURCE", reference.SOURCE + "\n# changed\n")
    problem = gate.check_unit(unit, tmp_path)[0]
    assert problem is not None and "reference.py" in problem


# what the certified runtime (samebits.kernels.triton.certified) may never import
FORBIDDEN = ("z3", "samebits.analysis", "samebits.testing", "samebits.server", "samebits.audit",
             "samebits.engine")  # fmt: skip


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def test_certified_runtime_imports_no_solver_and_no_analysis():
    """The gate runs at every GPU deployment: the package it lives in imports no solver and
    nothing of analysis / testing / server / audit / engine, at module level or inside a
    function (read from the source), and checking the shipped set in a fresh process loads no
    solver, analysis, testing, server, audit or engine module."""
    import ast

    sources = sorted(Path(gate.__file__).parent.glob("*.py"))
    assert {p.name for p in sources} >= {"__init__.py", "gate.py", "units.py", "reference.py"}
    bad = []
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                bad += [f"{path.name}: {a.name}" for a in node.names if _forbidden(a.name)]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path.name}: relative import"
                if _forbidden(node.module):
                    bad.append(f"{path.name}: {node.module}")
    assert not bad, bad
    loaded = FORBIDDEN
    code = (
        "import json, sys\n"
        "from samebits.kernels.triton.certified import gate, units, reference\n"
        "files = sorted(gate.SHIPPED_DIR.glob('*.json'))\n"
        "res = gate.check([json.loads(f.read_text())['unit'] for f in files], gate.SHIPPED_DIR)\n"
        "assert files and all(p is None for p in res['units'].values()), res\n"
        "gate.certificate_lines(type('D', (), {'components': {}})())\n"
        f"bad = [m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in {loaded!r})]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)

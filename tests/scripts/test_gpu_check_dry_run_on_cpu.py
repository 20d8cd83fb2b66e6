"""The GPU kit (scripts/gpu_check.sh) on the CPU: its pieces with real subprocesses and pip, and the whole --dry-run.

The full dry run (every check on CPU/gloo with tiny sizes, Ray and vLLM blocked as on the bare GPU machine) is slow
(~3 min on 2 loaded cores); the pieces are fast.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from gpu_check.__main__ import CHECKS, parse_args  # noqa: E402
from gpu_check.environment import install_missing, missing_modules, wheels_for  # noqa: E402
from gpu_check.flops import DecoderShape, bf16_dense_peak, forward_flops, training_flops  # noqa: E402
from gpu_check.orchestrate import CheckSpec, run_checks, write_report  # noqa: E402

# ----------------------------------------------------------------------------- FLOPs and peaks


def test_flop_count_hand_computed():
    shape = DecoderShape(hidden=4, q_dim=4, kv_dim=2, intermediate=8, layers=2, vocab=10)
    # per layer: h·q 16 + 2·h·kv 16 + q·h 16 + 3·h·i 96 = 144; N = 2·144 + V·h 40 = 328
    assert shape.matmul_parameters() == 328
    # lengths 3 and 5: T = 8, Σs² = 9 + 25 = 34; forward = 2·328·8 + 4·2·4·34 = 5248 + 1088 = 6336
    assert forward_flops(shape, [3, 5]) == 6336
    assert training_flops(shape, [3, 5]) == 3 * 6336


def test_matmul_parameters_equal_the_linear_weights_of_a_real_qwen2():
    """N counts every nn.Linear weight of the HF model (the lm_head included, biases and norms not)."""
    import torch
    from transformers import AutoModelForCausalLM

    from hybridrl.models.tiny import TinyModelSpec, build_model_config

    spec = TinyModelSpec(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2)  # fmt: skip
    config = build_model_config(spec, vocab_size=300, eos_id=1, pad_id=2)
    model = AutoModelForCausalLM.from_config(config)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert DecoderShape.from_hf_config(config).matmul_parameters() == linear


def test_bf16_dense_peaks_by_device_name():
    assert bf16_dense_peak("NVIDIA H200")[0] == pytest.approx(989.5)  # 1,979 with sparsity / 2
    assert "H200 datasheet" in bf16_dense_peak("NVIDIA H200")[1]
    assert bf16_dense_peak("NVIDIA H100 80GB HBM3")[0] == pytest.approx(989.5)
    assert bf16_dense_peak("NVIDIA A100-SXM4-80GB")[0] == pytest.approx(312.0)
    assert bf16_dense_peak("NVIDIA H200 NVL") is None  # other board, other clocks: --peak-tflops
    assert bf16_dense_peak("Tesla T4") is None


# ----------------------------------------------------------------------------- orchestration


FAKE_CHECKS = {
    "fake_ok": "def run(context):\n    return Outcome('PASS', 'fine ' + context['mode'], {'x': 1})\n",
    "fake_sleep": "import time\ndef run(context):\n    time.sleep(60)\n",
    "fake_raise": "def run(context):\n    raise ValueError('broken on purpose')\n",
    "fake_exit": "import os\ndef run(context):\n    os._exit(3)\n",
}


@pytest.fixture
def fake_check_env(tmp_path):
    """Fake check modules on the children's PYTHONPATH (real subprocesses run them)."""
    for name, body in FAKE_CHECKS.items():
        (tmp_path / f"{name}.py").write_text("from gpu_check.outcome import Outcome\n" + body)
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(SCRIPTS), str(ROOT)]))


def test_each_check_runs_apart_and_failures_do_not_stop_the_others(tmp_path, fake_check_env, capsys):
    specs = [CheckSpec("a", "fake_ok", 30), CheckSpec("b", "fake_sleep", 3), CheckSpec("c", "fake_raise", 30),
             CheckSpec("d", "fake_exit", 30), CheckSpec("e", "fake_ok", 30)]  # fmt: skip
    start = time.monotonic()
    results = run_checks(specs, {"mode": "dry-run"}, tmp_path / "work", 300, fake_check_env)
    assert time.monotonic() - start < 45  # the sleeper was killed at its 3 s timeout
    assert [r.status for r in results] == ["PASS", "FAIL", "FAIL", "FAIL", "PASS"]
    assert results[0].detail == "fine dry-run" and results[0].figures["x"] == 1
    assert "gpu_check" not in results[0].figures["third_party_modules"]  # the child adds what it imported
    assert results[1].detail == "timeout after 3 s"
    assert results[2].detail.startswith("ValueError: broken on purpose (at ")
    assert results[3].detail.startswith("exit code 3")
    assert "ValueError: broken on purpose" in (tmp_path / "work" / "logs" / "c.log").read_text()  # traceback kept
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "PASS a fine dry-run" and lines[1] == "FAIL b timeout after 3 s"


def test_budget_left_under_the_minimum_skips_the_rest(tmp_path, fake_check_env):
    results = run_checks([CheckSpec("a", "fake_ok", 30)], {"mode": "gpu"}, tmp_path, 5, fake_check_env)
    assert results[0].status == "SKIP" and results[0].detail.startswith("budget exhausted")


def test_report_json_counts_and_figures(tmp_path, fake_check_env):
    results = run_checks([CheckSpec("a", "fake_ok", 30), CheckSpec("c", "fake_raise", 30)], {"mode": "gpu"},
                         tmp_path, 120, fake_check_env)  # fmt: skip
    report = write_report(results, tmp_path / "r.json", {"mode": "gpu"})
    assert json.loads((tmp_path / "r.json").read_text()) == report
    assert report["summary"] == {"PASS": 1, "FAIL": 1, "SKIP": 0}
    assert report["checks"]["a"]["figures"]["x"] == 1 and report["checks"]["a"]["seconds"] > 0


def test_command_line():
    args = parse_args(["--dry-run", "--only", "sft,mfu", "--budget-s", "100"])
    assert args.dry_run and args.only == "sft,mfu" and args.budget_s == 100
    assert parse_args([]).budget_s == 480  # 8 minutes
    assert [spec.name for spec in CHECKS] == ["environment", "attention", "sft", "worker", "rollout", "offload", "mfu"]
    with pytest.raises(SystemExit):
        parse_args(["--only", "sft,nope"])


def test_blocked_imports_fail_like_a_missing_package():
    code = textwrap.dedent(
        """
        from gpu_check.bare_machine import block_imports
        block_imports(["json"])
        try:
            import json.decoder
        except ModuleNotFoundError as error:
            print("blocked", error.name)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(SCRIPTS))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.stdout.strip() == "blocked json", proc.stderr  # the top-level package is refused first


# ----------------------------------------------------------------------------- wheels


def _write_wheel(folder: Path, dist: str, module: str, version: str = "0.1") -> Path:
    """A minimal pure-Python wheel (a zip with the module and its dist-info) that pip can install."""
    wheel = folder / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
    info = f"{dist.replace('-', '_')}-{version}.dist-info"
    files = {
        f"{module}.py": "ANSWER = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)
    return wheel


def test_missing_packages_install_from_the_wheel_folder(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _write_wheel(wheels, "gpu-check-fake-dist", "gpu_check_fake_module")
    _write_wheel(wheels, "unused-dist", "unused_module")
    modules = {"gpu_check_fake_module": "gpu-check-fake-dist", "json": "json", "absent_module_x": "absent-dist"}
    assert missing_modules(modules) == {"gpu_check_fake_module": "gpu-check-fake-dist", "absent_module_x": "absent-dist"}
    found, absent = wheels_for(["gpu-check-fake-dist", "absent-dist"], wheels)
    assert [w.name for w in found] == ["gpu_check_fake_dist-0.1-py3-none-any.whl"] and absent == ["absent-dist"]
    report = install_missing(wheels, tmp_path / "site", modules)
    assert report["pip_returncode"] == 0, report
    assert report["installed"] == ["gpu_check_fake_dist-0.1-py3-none-any.whl"]
    assert report["no_wheel"] == ["absent-dist"]
    assert (tmp_path / "site" / "gpu_check_fake_module.py").read_text() == "ANSWER = 42\n"
    assert not (tmp_path / "site" / "unused_module.py").exists()  # only what was missing


# ----------------------------------------------------------------------------- the whole dry run


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    env = dict(os.environ, PYTHON=sys.executable)
    env.pop("OUT", None)
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(SCRIPTS / "gpu_check.sh"), "--dry-run", "--workdir", str(out / "work"), "--json",
         str(out / "gpu_check.json")],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    return proc, out, time.monotonic() - start


@pytest.mark.slow
def test_dry_run_prints_one_line_per_check(dry_run):
    proc, out, seconds = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.split(" ")[0] in ("PASS", "FAIL", "SKIP")]
    assert [line.split(" ")[:2] for line in lines] == [
        ["PASS", "environment"], ["SKIP", "attention"], ["PASS", "sft"], ["PASS", "worker"], ["PASS", "rollout"], ["SKIP", "offload"],
        ["SKIP", "mfu"],
    ]  # fmt: skip
    assert seconds < 480


@pytest.mark.slow
def test_dry_run_json_has_the_figures(dry_run):
    _, out, _ = dry_run
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["mode"] == "dry-run" and report["summary"] == {"PASS": 4, "FAIL": 0, "SKIP": 3}
    assert report["blocked_imports"] == ["ray", "vllm", "sglang"]
    checks = {name: check["figures"] for name, check in report["checks"].items()}
    assert checks["environment"]["cuda_available"] is False
    assert checks["attention"]["nonfinite_grads_configured"] == {"64": 0, "128": 0, "192": 0}
    assert all(not state.startswith("MISSING") for state in checks["environment"]["packages"].values())
    assert len(checks["sft"]["losses"]) == 2 and all(math.isfinite(loss) for loss in checks["sft"]["losses"])
    assert math.isfinite(checks["worker"]["grad_norm"]) and checks["worker"]["log_prob_max_change_after_update"] > 0
    assert checks["rollout"]["sequences"] == 4 and checks["rollout"]["log_prob_diff_mean"] < 0.1
    assert len(checks["offload"]["grad_norms_offloaded"]) == 2
    # the tiny Qwen2: 2 layers of (64·64 + 2·64·32 + 64·64 + 3·64·128) = 36864, plus the lm_head 512·64 = 32768
    assert checks["mfu"]["matmul_parameters"] == 2 * 36864 + 32768
    assert checks["mfu"]["update_flops"] > 0 and checks["mfu"]["update_tflops"] > 0
    assert (out / "gpu_check.log").read_text().count("=====") == 2 * 7  # every check's log, collected
    for name, figures in checks.items():  # what the bare GPU machine lacks was never imported
        assert {"ray", "vllm", "sglang"}.isdisjoint(figures["third_party_modules"]), name
    assert "tensordict" in checks["worker"]["third_party_modules"]  # the list is real

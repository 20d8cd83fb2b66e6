import glob
import json

import pytest

from hybridrl.utils.progress import StepProgress
from hybridrl.utils.timer import simple_timer
from hybridrl.utils.tracking import Tracking, format_console_line


def test_console_line_is_verls_format(capsys):
    Tracking("p", "e", default_backend="console").log({"actor/pg_loss": 0.12345, "training/global_step": 3}, step=3)
    out = capsys.readouterr().out.strip()
    assert out == "step:3 - actor/pg_loss:0.123 - training/global_step:3.000"  # verl formats every number .3f


def test_console_line_skips_non_numbers():
    assert format_console_line({"a": "text", "b": 1.0, "c": True}, 1) == "step:1 - b:1.000 - c:1.000"


def test_unknown_backend_names_the_key():
    with pytest.raises(ValueError, match="trainer.logger.*nope"):
        Tracking("p", "e", default_backend=["console", "nope"])


def test_tensorboard_writes_real_event_files(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    tracking = Tracking("p", "e", default_backend=["tensorboard"])
    for step in (1, 2):
        tracking.log({"critic/score/mean": 0.5 * step}, step=step)
    tracking.finish()
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("critic/score/mean")] == [(1, 0.5), (2, 1.0)]


def test_file_backend_jsonl(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path))
    tracking = Tracking("proj", "exp", default_backend="file")
    tracking.log({"x": 1.5}, step=7)
    tracking.finish()
    rows = [json.loads(line) for line in open(tmp_path / "proj" / "exp.jsonl")]
    assert rows == [{"step": 7, "data": {"x": 1.5}}]


def test_wandb_without_key_goes_offline(tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    tracking = Tracking("proj", "exp", default_backend=["wandb"])
    tracking.log({"actor/lr": 1e-6}, step=1)
    tracking.finish()
    assert "logging offline" in capsys.readouterr().out
    assert glob.glob(str(tmp_path / "wandb" / "offline-run-*"))


def test_mlflow_local_store(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tracking = Tracking("proj", "exp", default_backend=["mlflow"], config={"trainer": {"total_epochs": 1}})
    run_id = tracking.logger["mlflow"].run.info.run_id
    tracking.log({"val-core/arithmetic/reward/mean@1": 0.25}, step=2)
    tracking.finish()
    history = mlflow.tracking.MlflowClient(uri).get_metric_history(run_id, "val-core/arithmetic/reward/mean_at_1")
    assert [(m.step, m.value) for m in history] == [(2, 0.25)]


def test_simple_timer_accumulates():
    timing = {}
    with simple_timer("gen", timing):
        pass
    with simple_timer("gen", timing):
        pass
    assert set(timing) == {"gen"} and timing["gen"] >= 0.0


def test_progress_line_has_eta():
    line = StepProgress(total_steps=10, start_step=0).line(5, {"critic/score/mean": 0.5})
    assert line.startswith("[progress] step 5/10 (50%)") and "ETA" in line and "critic/score/mean=0.500" in line

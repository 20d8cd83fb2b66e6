"""The quickstart keeps its trained model (issue 21, finding 6): the actor's last-step ``hf_model`` checkpoint, found
through the tracker, is a Hugging Face folder with the trained weights, and export_model.py prints its path and a
``python -m hybridrl.serve`` line whose config checks. Tiny model, one gloo rank, the real checkpoint manager."""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path

import pytest
import torch
from config_testlib import compose_section

from hybridrl.utils.checkpoint import write_checkpoint_tracker
from tests.workers.engine.engine_testlib import build_training_setup, single_rank_group, token_batch

ROOT = Path(__file__).resolve().parents[2]
EXPORT_SCRIPT = ROOT / "examples" / "quickstart" / "export_model.py"


def _export_module():
    spec = importlib.util.spec_from_file_location("quickstart_export_model", EXPORT_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def trained_checkpoint(tiny_model_dir, tmp_path):
    """The run script's save: ``save_contents=[hf_model]`` at the last step (3), tracker written by the trainer."""
    from hybridrl.workers.engine import FSDPCheckpointManager, get_full_state_dict

    with single_rank_group():
        module, optimizer, scheduler, tokenizer = build_training_setup(tiny_model_dir)
        with torch.no_grad():  # "training": weights that differ from the initial model
            for param in module.parameters():
                param.add_(0.01)
        config = compose_section("actor_rollout_ref.actor.checkpoint", save_contents=["hf_model"])
        manager = FSDPCheckpointManager(module, optimizer, scheduler, tokenizer, checkpoint_config=config)
        root = tmp_path / "checkpoints" / "exp"
        manager.save_checkpoint(str(root / "global_step_3" / "actor"), global_step=3)
        write_checkpoint_tracker(str(root), 3)
        trained = {name: value.clone() for name, value in get_full_state_dict(module).items()}
    return root, trained


def test_export_prints_a_loadable_hf_folder_with_the_trained_weights(trained_checkpoint, tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    root, trained = trained_checkpoint
    link = tmp_path / "models" / "exp"
    assert _export_module().main(["--checkpoint_dir", str(root), "--link", str(link)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"[quickstart] trained model (Hugging Face folder): {link}"
    assert link.resolve() == (root / "global_step_3" / "actor" / "huggingface").resolve()
    assert not list((root / "global_step_3" / "actor").glob("*_rank_0.pt"))  # no shards, no optimizer state
    model = AutoModelForCausalLM.from_pretrained(str(link), dtype=torch.float32)
    for name, value in model.state_dict().items():
        if name in trained:  # lm_head is tied to the embedding (written once)
            torch.testing.assert_close(value, trained[name].float(), rtol=0, atol=0)
    output = model.generate(token_batch(0, batch=1, length=4), max_new_tokens=3, do_sample=False)
    assert output.shape == (1, 7)
    # the printed command: hybridrl.serve's own config check accepts it
    command = lines[1].removeprefix("[quickstart] try it: ")
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "hybridrl.serve"] and f"model.path={link}" in words
    from hybridrl.config import compose_config
    from hybridrl.serve import check_serve_config

    check_serve_config(compose_config("serve", words[3:]))


def test_export_without_a_checkpoint_says_so(tmp_path, capsys):
    assert _export_module().main(["--checkpoint_dir", str(tmp_path / "none")]) == 1
    assert "no checkpoint under" in capsys.readouterr().err

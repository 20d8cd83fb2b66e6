"""The engine's small utilities: device selection, tokenizer pad rule, atomic folder writes, model loading."""

import pytest
import torch

from hybridrl.utils import device, fs
from hybridrl.utils.tokenizer import hf_tokenizer, set_pad_token_id
from hybridrl.workers.engine import load_hf_model


def test_device_from_env(monkeypatch):
    monkeypatch.setenv(device.DEVICE_ENV_VAR, "cpu")
    assert device.get_device_name() == "cpu"
    assert device.get_dist_backend() == "gloo" and device.get_dist_backend("cuda") == "nccl"
    assert device.current_device() == torch.device("cpu")
    monkeypatch.setenv(device.DEVICE_ENV_VAR, "tpu")
    with pytest.raises(ValueError, match="HYBRIDRL_DEVICE"):
        device.get_device_name()
    if not torch.cuda.is_available():
        monkeypatch.setenv(device.DEVICE_ENV_VAR, "cuda")
        with pytest.raises(RuntimeError, match="trainer.device=cpu"):
            device.get_device_name()
        monkeypatch.delenv(device.DEVICE_ENV_VAR)
        assert device.get_device_name() == "cpu"


def test_tokenizer_pad_defaults_to_eos_and_custom_template(tiny_model_dir):
    tokenizer = hf_tokenizer(tiny_model_dir, custom_chat_template="{{ messages[0]['content'] }}!")
    assert tokenizer.pad_token == "<|pad|>"  # an existing pad token is kept
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "hi!"
    tokenizer.pad_token = None
    set_pad_token_id(tokenizer)
    assert tokenizer.pad_token_id == tokenizer.eos_token_id is not None


def test_atomic_dir_renames_on_success_and_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out"
    with fs.atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("1")
        assert not target.exists()  # invisible until complete
    assert (target / "a.txt").read_text() == "1"
    with pytest.raises(RuntimeError):
        with fs.atomic_dir(target) as tmp:
            (tmp / "a.txt").write_text("2")
            raise RuntimeError("crash")
    assert (target / "a.txt").read_text() == "1"  # old content intact
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # temp folder cleaned up
    with fs.atomic_dir(target) as tmp:
        (tmp / "b.txt").write_text("3")
    assert [p.name for p in target.iterdir()] == ["b.txt"]  # replaced as a whole


def test_atomic_write_text_and_paths(tmp_path):
    fs.atomic_write_text(tmp_path / "t.txt", "12")
    assert (tmp_path / "t.txt").read_text() == "12" and len(list(tmp_path.iterdir())) == 1
    assert fs.copy_to_local(f"file://{tmp_path}") == str(tmp_path)
    assert fs.copy_to_local(str(tmp_path)) == str(tmp_path)
    with pytest.raises(NotImplementedError, match="local folder"):
        fs.copy_to_local("hdfs://namenode/model")
    assert fs.local_mkdir_safe(tmp_path / "a" / "b") == str(tmp_path / "a" / "b")
    assert fs.is_temp_dir(fs.temp_sibling(tmp_path / "x"))


def test_load_hf_model_override_config_and_dtype(tiny_model_dir):
    module, config = load_hf_model(
        tiny_model_dir,
        torch_dtype=torch.bfloat16,
        override_config={"attn_implementation": "eager", "rms_norm_eps": 1e-5},
    )
    assert config.rms_norm_eps == 1e-5
    assert config._attn_implementation == "eager"
    assert all(p.dtype == torch.bfloat16 for p in module.parameters())
    with pytest.raises(ValueError, match="kind"):
        load_hf_model(tiny_model_dir, kind="seq2seq")

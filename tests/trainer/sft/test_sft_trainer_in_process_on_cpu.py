"""FSDPSFTTrainer in this process on one gloo rank: multi-turn data, loss falls, the HF export is the model."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.distributed as dist
from config_testlib import compose_config

from hybridrl.trainer.sft.config import validate_sft_config


@pytest.fixture
def single_rank_group(monkeypatch):
    """A one-process gloo group (torchrun's env vars set by hand); destroyed afterwards."""
    from hybridrl.utils.distributed import init_distributed
    from hybridrl.utils.ports import free_port

    if dist.is_initialized():
        pytest.skip("a process group already exists in this test process")
    for key, value in {
        "WORLD_SIZE": "1",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "HYBRIDRL_DEVICE": "cpu",
    }.items():
        monkeypatch.setenv(key, value)
    init_distributed("cpu")
    yield
    dist.destroy_process_group()


def _chat_rows(count: int) -> list[dict]:
    rows = []
    for i in range(count):
        a, b = i % 10, (3 * i) % 10
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"What is {a} + {b}?"},
                    {"role": "assistant", "content": str(a + b)},
                    {"role": "user", "content": "Double it."},
                    {"role": "assistant", "content": str(2 * (a + b))},
                ]
            }
        )
    return rows


@pytest.mark.slow
def test_multiturn_sft_learns_and_exports_the_trained_model(single_rank_group, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from hybridrl.trainer.sft.trainer import FSDPSFTTrainer

    pq.write_table(pa.Table.from_pylist(_chat_rows(32)), tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(_chat_rows(8)), tmp_path / "val.parquet")
    config = compose_config(
        "sft_trainer",
        [
            f"data.train_files={tmp_path}/train.parquet",
            f"data.val_files={tmp_path}/val.parquet",
            "data.multiturn.enable=True",
            "data.max_length=48",
            "data.train_batch_size=8",
            "data.micro_batch_size_per_gpu=4",
            f"model.partial_pretrain={tiny_model_dir}",
            "optim.lr=2e-3",
            "trainer.total_training_steps=8",
            "trainer.test_freq=4",
            "trainer.device=cpu",
            f"trainer.default_local_dir={tmp_path}/ckpt",
            "model.enable_gradient_checkpointing=True",
        ],
    )
    validate_sft_config(config)
    trainer = FSDPSFTTrainer(config, "cpu")
    losses = []

    class Recorder:
        def log(self, data, step):
            losses.append((step, dict(data)))

    trainer.fit(Recorder())
    assert [step for step, _ in losses] == list(range(1, 9))
    assert losses[-1][1]["train/loss"] < losses[0][1]["train/loss"] - 0.5  # lr 2e-3: ~6.2 -> well below 5.7
    assert losses[-1][1]["val/loss"] < losses[3][1]["val/loss"]

    export = tmp_path / "ckpt" / "global_step_8" / "huggingface"
    reloaded = AutoModelForCausalLM.from_pretrained(str(export), dtype=torch.float32).eval()
    input_ids = trainer.val_dataset[0]["input_ids"][None, :20]
    trainer.model.eval()
    with torch.no_grad():
        expected = trainer.model(input_ids=input_ids, use_cache=False).logits
        torch.testing.assert_close(reloaded(input_ids=input_ids).logits, expected, atol=1e-6, rtol=1e-6)
    assert os.path.isfile(tmp_path / "ckpt" / "global_step_8" / "model_world_size_1_rank_0.pt")


@pytest.mark.slow
def test_lora_sft_trains_only_adapters_and_exports_a_merged_model(single_rank_group, tiny_llama_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from hybridrl.trainer.sft.trainer import FSDPSFTTrainer

    pq.write_table(pa.Table.from_pylist(_chat_rows(32)), tmp_path / "train.parquet")
    pq.write_table(pa.Table.from_pylist(_chat_rows(8)), tmp_path / "val.parquet")
    config = compose_config("sft_trainer", [
        f"data.train_files={tmp_path}/train.parquet", f"data.val_files={tmp_path}/val.parquet",
        "data.multiturn.enable=True", "data.max_length=48", "data.train_batch_size=8",
        "data.micro_batch_size_per_gpu=4", f"model.partial_pretrain={tiny_llama_dir}", "optim.lr=2e-2",
        "model.lora_rank=8", "model.lora_alpha=16", "model.target_modules=[q_proj,v_proj,lm_head]",
        "trainer.total_training_steps=6", "trainer.test_freq=-1", "trainer.device=cpu",
        f"trainer.default_local_dir={tmp_path}/ckpt",
    ])
    validate_sft_config(config)
    trainer = FSDPSFTTrainer(config, "cpu")
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)  # only adapters train
    frozen_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    losses = []

    class Recorder:
        def log(self, data, step):
            losses.append(data["train/loss"])

    trainer.fit(Recorder())
    assert losses[-1] < losses[0]
    for name, param in trainer.model.named_parameters():
        if name in frozen_before:
            assert torch.equal(param.detach().full_tensor() if hasattr(param, "full_tensor") else param.detach(),
                               frozen_before[name].full_tensor() if hasattr(frozen_before[name], "full_tensor")
                               else frozen_before[name]), name
    export = tmp_path / "ckpt" / "global_step_6" / "huggingface"
    reloaded = AutoModelForCausalLM.from_pretrained(str(export), dtype=torch.float32).eval()
    input_ids = trainer.val_dataset[0]["input_ids"][None, :20]
    trainer.model.eval()
    with torch.no_grad():  # the export holds W + scale·B·A: same logits as the adapted model
        expected = trainer.model(input_ids=input_ids, use_cache=False).logits
        torch.testing.assert_close(reloaded(input_ids=input_ids).logits, expected, atol=1e-5, rtol=1e-5)

"""data.sampler.class_path/class_name: a curriculum sampler from a user file orders the train dataloader
and is updated with every trained batch (verl 0.5's experimental hook), with fake worker groups."""

from __future__ import annotations

import torch

from hybridrl.config import compose_config
from hybridrl.experimental.dataset.sampler import AbstractCurriculumSampler
from hybridrl.trainer.ppo.ray_trainer import RayPPOTrainer
from tests.recipes.fakes import R as RESPONSE_LENGTH
from tests.recipes.fakes import make_trainer
from tests.utils.dataset.test_create_rl_sampler_on_cpu import SAMPLER_FILE  # ReversedCurriculum: last prompt first


def test_curriculum_sampler_orders_the_prompts_and_sees_every_trained_batch(
    tiny_model_dir, arithmetic_data_dir, tmp_path
):
    sampler_path = tmp_path / "curriculum.py"
    sampler_path.write_text(SAMPLER_FILE)
    overrides = {
        "algorithm.adv_estimator": "grpo", "data.train_files": f"{arithmetic_data_dir}/train.parquet",
        "data.val_files": f"{arithmetic_data_dir}/test.parquet", "data.train_batch_size": 4,
        "data.max_prompt_length": 64, "data.max_response_length": RESPONSE_LENGTH, "data.dataloader_num_workers": 0,
        "data.sampler.class_path": str(sampler_path), "data.sampler.class_name": "ReversedCurriculum",
        "actor_rollout_ref.model.path": tiny_model_dir, "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2, "trainer.total_training_steps": 2,
        "trainer.device": "cpu", "trainer.test_freq": -1, "trainer.save_freq": -1, "trainer.logger": "[console]",
        "trainer.default_local_dir": str(tmp_path / "ckpt"), "trainer.val_before_train": False,
        "trainer.balance_batch": False,
    }  # fmt: skip
    trainer = make_trainer(RayPPOTrainer, compose_config("ppo_trainer", [f"{k}={v}" for k, v in overrides.items()]))
    sampler = trainer.train_dataloader.sampler
    assert isinstance(sampler, AbstractCurriculumSampler) and type(sampler).__name__ == "ReversedCurriculum"

    trainer.fit()

    dataset = trainer.train_dataloader.dataset
    first_prompts = trainer.actor_rollout_wg.generated[0].batch["input_ids"]
    last = len(dataset) - 1
    # the first step's prompts are the dataset's last four, backwards; rollout.n = 2 repeats each one
    for row, index in enumerate([last, last, last - 1, last - 1]):
        assert torch.equal(first_prompts[row], dataset[index]["input_ids"])
    assert len(sampler.updates) == 2  # one update per trained step, with that step's scored batch
    assert all("token_level_rewards" in batch.batch.keys() and len(batch) == 8 for batch in sampler.updates)

"""RayDAPOTrainer.fit with fake worker groups: dynamic sampling through the real trainer loop, no Ray.

The fake rollout answers every prompt with responses of different lengths; ``parity_reward.py`` scores every
response of an even-answer prompt 1.0 (a zero-variance group, dropped) and an odd-answer prompt by length
(kept). So a step's batch must hold exactly ``data.train_batch_size`` odd-answer prompts, collected from as many
generation batches as it takes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from hybridrl.protocol import DataProto
from hybridrl.recipes.config import DAPO_CONFIG_DIR, compose_recipe_config
from hybridrl.recipes.dapo.dapo_ray_trainer import RayDAPOTrainer
from hybridrl.trainer.ppo.ray_trainer import Role
from hybridrl.trainer.ppo.reward import load_reward_manager
from hybridrl.utils.dataset.rl_dataset import collate_fn, create_rl_dataset, create_rl_sampler
from hybridrl.utils.tokenizer import hf_tokenizer

R = 4  # response length
ASSETS = Path(__file__).resolve().parents[1] / "assets"


class FakeActorRolloutWG:
    """Row r of a generation call answers with r % R + 1 tokens (the last one EOS); log-probs are zero."""

    world_size = 2

    def __init__(self, eos_id: int, pad_id: int):
        self.eos_id, self.pad_id = eos_id, pad_id
        self.generated: list[torch.Tensor] = []  # prompt ids of every generation call
        self.updates: list[DataProto] = []

    def generate_sequences(self, gen_batch: DataProto) -> DataProto:
        prompts = gen_batch.batch["input_ids"]
        self.generated.append(prompts)
        responses = torch.full((len(prompts), R), self.pad_id)
        response_mask = torch.zeros(len(prompts), R, dtype=torch.long)
        for row in range(len(prompts)):
            length = row % R + 1
            responses[row, : length - 1] = 7
            responses[row, length - 1] = self.eos_id
            response_mask[row, :length] = 1
        attention_mask = torch.cat([gen_batch.batch["attention_mask"], response_mask], dim=1)
        return DataProto.from_dict({
            "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask, "position_ids": (torch.cumsum(attention_mask, 1) - 1).clamp(min=0),
        })

    def compute_log_prob(self, batch: DataProto) -> DataProto:
        return DataProto.from_dict({"old_log_probs": torch.zeros(len(batch), R)})

    def update_actor(self, batch: DataProto) -> DataProto:
        self.updates.append(batch)
        return DataProto(meta_info={"metrics": {"actor/pg_loss": [0.0]}})


class FakeResourcePoolManager:
    def get_n_gpus(self) -> int:
        return 2


def make_trainer(model_dir: str, data_dir: str, tmp_path, **overrides) -> RayDAPOTrainer:
    args = {
        "data.train_files": f"{data_dir}/train.parquet", "data.val_files": f"{data_dir}/test.parquet",
        "data.train_batch_size": 2, "data.gen_batch_size": 4, "data.max_prompt_length": 64,
        "data.max_response_length": R, "data.dataloader_num_workers": 0,
        "custom_reward_function.path": str(ASSETS / "parity_reward.py"),
        "actor_rollout_ref.model.path": model_dir, "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 2, "trainer.total_training_steps": 3,
        "trainer.device": "cpu", "trainer.test_freq": -1, "trainer.save_freq": -1,
        "trainer.logger": "[file]", "trainer.val_before_train": False,
        "trainer.default_local_dir": str(tmp_path / "ckpt"),
    }
    config = compose_recipe_config(DAPO_CONFIG_DIR, "dapo_trainer", [f"{k}={v}" for k, v in {**args, **overrides}.items()])
    tokenizer = hf_tokenizer(model_dir)
    train = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    val = create_rl_dataset(config.data.val_files, config.data, tokenizer, None)
    trainer = RayDAPOTrainer(
        config=config, tokenizer=tokenizer, role_worker_mapping={Role.ActorRollout: object},
        resource_pool_manager=FakeResourcePoolManager(), reward_fn=load_reward_manager(config, tokenizer, 0),
        val_reward_fn=None, train_dataset=train, val_dataset=val, collate_fn=collate_fn,
        train_sampler=create_rl_sampler(config.data, train),
    )
    trainer.actor_rollout_wg = FakeActorRolloutWG(tokenizer.eos_token_id, tokenizer.pad_token_id)
    return trainer


def odd_answers(tokenizer, prompt_ids: torch.Tensor) -> int:
    """How many of the prompts 'What is a + b?' in a generation call have an odd a + b."""
    count = 0
    for text in tokenizer.batch_decode(prompt_ids, skip_special_tokens=True):
        a, b = re.search(r"What is (\d+) \+ (\d+)\?", text).groups()
        count += (int(a) + int(b)) % 2
    return count


def test_fit_trains_only_on_varying_groups_and_counts_generation_batches(
    tiny_model_dir, recipe_data_dir, tmp_path, monkeypatch
):
    metrics_file = tmp_path / "metrics.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(metrics_file))
    trainer = make_trainer(tiny_model_dir, recipe_data_dir, tmp_path)
    trainer.fit()
    wg = trainer.actor_rollout_wg
    steps = [json.loads(line)["data"] for line in metrics_file.read_text().splitlines()]
    assert len(wg.updates) == len(steps) == 3
    num_gen_batches = [int(m["train/num_gen_batches"]) for m in steps]
    assert sum(num_gen_batches) == len(wg.generated)  # every generation batch is accounted to one step
    start = 0
    for step, used in zip(wg.updates, num_gen_batches, strict=True):
        # 2 prompts × n=2 responses, 2 responses per uid, every ground truth odd (even-answer groups are constant)
        assert len(step) == 4
        uids = step.non_tensor_batch["uid"].tolist()
        assert sorted(uids.count(u) for u in set(uids)) == [2, 2]
        assert all(int(rm["ground_truth"]) % 2 == 1 for rm in step.non_tensor_batch["reward_model"])
        # accumulation stops at the first generation batch that brings the kept prompts to train_batch_size
        odd = [odd_answers(trainer.tokenizer, ids[::2]) for ids in wg.generated[start : start + used]]  # 1 row/prompt
        assert sum(odd) >= 2 and sum(odd[:-1]) < 2, odd
        assert step.meta_info["global_token_num"] == step.batch["attention_mask"].sum(-1).tolist()
        start += used
    assert all("timing_s/gen" in m and m["timing_s/step"] >= m["timing_s/gen"] for m in steps)


def test_fit_raises_when_max_num_gen_batches_cannot_fill_a_step(tiny_model_dir, recipe_data_dir, tmp_path):
    # 2 prompts per generation batch can never keep 4 prompts within 1 generation batch
    trainer = make_trainer(tiny_model_dir, recipe_data_dir, tmp_path, **{
        "data.train_batch_size": 4, "data.gen_batch_size": 2, "algorithm.filter_groups.max_num_gen_batches": 1,
    })
    with pytest.raises(Exception, match=r"algorithm.filter_groups.max_num_gen_batches=1\) kept only [0-2] of "
                                        r"data.train_batch_size=4") as error:
        trainer.fit()
    assert "raise algorithm.filter_groups.max_num_gen_batches (0 = no limit)" in str(error.value)
    assert trainer.actor_rollout_wg.updates == []

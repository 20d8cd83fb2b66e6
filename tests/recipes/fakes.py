"""Fake worker groups for trainer-level tests (no Ray, no model): the real ones run in the CLI tests.

Used by the recipe trainer tests (tests/recipes/) and RayPPOTrainer's knob tests (tests/trainer/ppo/).
"""

from __future__ import annotations

import torch

from hybridrl.protocol import DataProto
from hybridrl.trainer.ppo.ray_trainer import Role
from hybridrl.trainer.ppo.reward import load_reward_manager
from hybridrl.utils.dataset.rl_dataset import collate_fn, create_rl_dataset, create_rl_sampler
from hybridrl.utils.tokenizer import hf_tokenizer

R = 4  # response length


class FakeActorRolloutWG:
    """Sampling: row r of a call answers with r % R + 1 tokens (the last one EOS). Greedy (``do_sample=False``):
    every row answers with ``GREEDY_LENGTH`` tokens. Log-probs are zero. Every call is recorded in ``calls`` as
    ``(method name, rows)``; generation inputs in ``generated``, update batches in ``updates``."""

    world_size = 2
    GREEDY_LENGTH = 3

    def __init__(self, eos_id: int, pad_id: int, token_id: int = 7):
        self.eos_id, self.pad_id, self.token_id = eos_id, pad_id, token_id
        self.calls: list[tuple[str, int]] = []
        self.generated: list[DataProto] = []  # every generation call's input
        self.updates: list[DataProto] = []

    def generate_sequences(self, gen_batch: DataProto) -> DataProto:
        self.calls.append(("generate_sequences", len(gen_batch)))
        self.generated.append(gen_batch)
        prompts = gen_batch.batch["input_ids"]
        greedy = not gen_batch.meta_info.get("do_sample", True)
        responses = torch.full((len(prompts), R), self.pad_id)
        response_mask = torch.zeros(len(prompts), R, dtype=torch.long)
        for row in range(len(prompts)):
            length = self.GREEDY_LENGTH if greedy else row % R + 1
            responses[row, : length - 1] = self.token_id
            responses[row, length - 1] = self.eos_id
            response_mask[row, :length] = 1
        attention_mask = torch.cat([gen_batch.batch["attention_mask"], response_mask], dim=1)
        return DataProto.from_dict({
            "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask, "position_ids": (torch.cumsum(attention_mask, 1) - 1).clamp(min=0),
        })

    def compute_log_prob(self, batch: DataProto) -> DataProto:
        self.calls.append(("compute_log_prob", len(batch)))
        return DataProto.from_dict({"old_log_probs": torch.zeros(len(batch), R)})

    def compute_ref_log_prob(self, batch: DataProto) -> DataProto:
        self.calls.append(("compute_ref_log_prob", len(batch)))
        return DataProto.from_dict({"ref_log_prob": torch.zeros(len(batch), R)})

    def update_actor(self, batch: DataProto) -> DataProto:
        self.calls.append(("update_actor", len(batch)))
        self.updates.append(batch)
        return DataProto(meta_info={"metrics": {"actor/pg_loss": [0.0]}})

    def save_checkpoint(self, *args, **kwargs) -> None:
        self.calls.append(("save_checkpoint", 0))


class FakeResourcePoolManager:
    def get_n_gpus(self) -> int:
        return 2


def common_overrides(model_dir: str, data_dir: str, tmp_path) -> dict[str, object]:
    """A 2-prompt, n=2 CPU config for fake worker groups (no validation, no checkpoints)."""
    return {
        "data.train_files": f"{data_dir}/train.parquet", "data.val_files": f"{data_dir}/test.parquet",
        "data.train_batch_size": 2, "data.max_prompt_length": 64, "data.max_response_length": R,
        "data.dataloader_num_workers": 0, "actor_rollout_ref.model.path": model_dir,
        "actor_rollout_ref.rollout.n": 2, "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
        "trainer.total_training_steps": 3, "trainer.device": "cpu", "trainer.test_freq": -1,
        "trainer.save_freq": -1, "trainer.logger": "[file]", "trainer.val_before_train": False,
        "trainer.default_local_dir": str(tmp_path / "ckpt"),
    }


def make_trainer(trainer_cls: type, config, use_ref: bool = False, **trainer_kwargs):
    """``trainer_cls`` built as TaskRunner builds it (plus ``trainer_kwargs``: parts such as ``batch_collector``),
    with :class:`FakeActorRolloutWG` as actor (and ref)."""
    tokenizer = hf_tokenizer(config.actor_rollout_ref.model.path)
    train = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    val = create_rl_dataset(config.data.val_files, config.data, tokenizer, None)
    mapping = {Role.ActorRollout: object} | ({Role.RefPolicy: object} if use_ref else {})
    trainer = trainer_cls(
        config=config, tokenizer=tokenizer, role_worker_mapping=mapping,
        resource_pool_manager=FakeResourcePoolManager(), reward_fn=load_reward_manager(config, tokenizer, 0),
        val_reward_fn=None, train_dataset=train, val_dataset=val, collate_fn=collate_fn,
        train_sampler=create_rl_sampler(config.data, train), **trainer_kwargs,
    )
    trainer.actor_rollout_wg = FakeActorRolloutWG(tokenizer.eos_token_id, tokenizer.pad_token_id)
    if use_ref:
        trainer.ref_policy_wg = trainer.actor_rollout_wg
    return trainer

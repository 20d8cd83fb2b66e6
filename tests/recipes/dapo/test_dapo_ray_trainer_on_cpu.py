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

from hybridrl.recipes.config import DAPO_CONFIG_DIR, compose_recipe_config
from hybridrl.recipes.dapo.dapo_ray_trainer import RayDAPOTrainer
from tests.recipes.fakes import common_overrides, make_trainer

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def make_dapo_trainer(model_dir: str, data_dir: str, tmp_path, **overrides) -> RayDAPOTrainer:
    args = {**common_overrides(model_dir, data_dir, tmp_path), "data.gen_batch_size": 4,
            "custom_reward_function.path": str(ASSETS / "parity_reward.py"), **overrides}
    config = compose_recipe_config(DAPO_CONFIG_DIR, "dapo_trainer", [f"{k}={v}" for k, v in args.items()])
    return make_trainer(RayDAPOTrainer, config)


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
    trainer = make_dapo_trainer(tiny_model_dir, recipe_data_dir, tmp_path)
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
        odd = [odd_answers(trainer.tokenizer, gen.batch["input_ids"][::2]) for gen in wg.generated[start : start + used]]  # 1 row/prompt
        assert sum(odd) >= 2 and sum(odd[:-1]) < 2, odd
        assert step.meta_info["global_token_num"] == step.batch["attention_mask"].sum(-1).tolist()
        start += used
    assert all("timing_s/filter_groups" in m and m["timing_s/step"] >= m["timing_s/gen"] for m in steps)


def test_fit_raises_when_max_num_gen_batches_cannot_fill_a_step(tiny_model_dir, recipe_data_dir, tmp_path):
    # 2 prompts per generation batch can never keep 4 prompts within 1 generation batch
    trainer = make_dapo_trainer(tiny_model_dir, recipe_data_dir, tmp_path, **{
        "data.train_batch_size": 4, "data.gen_batch_size": 2, "algorithm.filter_groups.max_num_gen_batches": 1,
    })
    with pytest.raises(Exception, match=r"algorithm.filter_groups.max_num_gen_batches=1\) kept only [0-2] of "
                                        r"data.train_batch_size=4") as error:
        trainer.fit()
    assert "raise algorithm.filter_groups.max_num_gen_batches (0 = no limit)" in str(error.value)
    assert "training step 1 failed in stage 'filter_groups'" in str(error.value)
    assert trainer.actor_rollout_wg.updates == []

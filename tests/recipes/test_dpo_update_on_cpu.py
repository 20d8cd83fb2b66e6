"""Online DPO's update stage (the part the recipe passes to RayPPOTrainer) with a fake DPO worker group:
pairs → reference log-probs → DPO update, the reference refresh every trainer.ref_update_freq steps and after a
resume, and SPIN's pair builder in the same stage. The real workers run in test_dpo_recipes_e2e_on_cpu.py."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hybridrl.protocol import DataProto
from hybridrl.recipes.online_dpo.dpo_actor import DPOHyperParams
from hybridrl.recipes.online_dpo.dpo_update import BestWorstPairs, DPOUpdate
from hybridrl.recipes.online_dpo.pairs import PAIR_WEIGHT_KEY
from hybridrl.recipes.spin.spin_trainer import SPINPairs
from hybridrl.trainer.ppo.worker_groups import WorkerGroups

RECIPES = Path(__file__).resolve().parents[2] / "hybridrl" / "recipes"
P, R = 2, 3
HYPER = DPOHyperParams(beta=0.1, loss_type="sigmoid", label_smoothing=0.0)


class _FakeDPOActor:
    """actor + rollout + reference in one group (the DPO worker); records every call."""

    world_size = 2

    def __init__(self):
        self.calls: list[str] = []
        self.updates: list[DataProto] = []

    def compute_ref_log_prob(self, batch: DataProto) -> DataProto:
        self.calls.append("compute_ref_log_prob")
        return DataProto.from_dict({"ref_log_prob": torch.zeros(len(batch), R)})

    def update_actor_dpo(self, batch: DataProto) -> DataProto:
        self.calls.append("update_actor_dpo")
        self.updates.append(batch)
        return DataProto(meta_info={"metrics": {"actor/dpo_loss": [0.69]}})

    def sync_ref_from_actor(self) -> None:
        self.calls.append("sync_ref_from_actor")


def _scored_batch(scores: list[float], uids: list[str]) -> DataProto:
    """Rows with PAIR_BATCH_KEYS, a uid per prompt and a sequence score on the last response token."""
    rows = len(scores)
    response_mask = torch.ones(rows, R, dtype=torch.long)
    token_scores = torch.zeros(rows, R)
    token_scores[:, -1] = torch.tensor(scores)
    responses = torch.arange(rows * R).reshape(rows, R) + 10
    prompts = torch.full((rows, P), 5)
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], -1),
                 "attention_mask": torch.ones(rows, P + R, dtype=torch.long),
                 "position_ids": torch.arange(P + R).expand(rows, -1), "response_mask": response_mask,
                 "token_level_scores": token_scores},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


def test_dpo_update_trains_on_best_vs_worst_pairs_and_refreshes_the_reference():
    actor = _FakeDPOActor()
    workers = WorkerGroups(actor_rollout=actor, ref=actor)
    update = DPOUpdate(BestWorstPairs(), HYPER, temperature=0.7, ref_update_freq=2)
    # prompt a: scores 0.2, 0.9 → one pair; prompt b: a tie → none
    batch = _scored_batch([0.2, 0.9, 1.0, 1.0], ["a", "a", "b", "b"])
    out, metrics = update.run(batch, workers, global_steps=1)
    assert out is batch and actor.calls == ["compute_ref_log_prob", "update_actor_dpo"]
    sent = actor.updates[0]
    assert len(sent) == 4 and sent.batch[PAIR_WEIGHT_KEY].tolist() == [1.0, 1.0, 0.0, 0.0]  # padded to 2 ranks
    assert sent.meta_info["dpo_beta"] == 0.1 and sent.meta_info["temperature"] == 0.7
    assert metrics["dpo/num_pairs"] == 1.0 and metrics["dpo/pair_ratio"] == 0.5
    assert metrics["dpo/chosen_score/mean"] == pytest.approx(0.9) and metrics["actor/dpo_loss"] == pytest.approx(0.69)
    assert {"timing_s/ref", "timing_s/update_actor"} <= set(metrics)

    _, metrics = update.run(batch, workers, global_steps=2)  # step 2: the reference becomes the actor
    assert actor.calls[-1] == "sync_ref_from_actor" and "timing_s/update_ref" in metrics
    assert "critic/score/mean" in update.data_metrics(batch, workers)


def test_dpo_update_without_pairs_skips_the_update_and_resume_resyncs_the_reference():
    actor = _FakeDPOActor()
    workers = WorkerGroups(actor_rollout=actor, ref=actor)
    update = DPOUpdate(BestWorstPairs(), HYPER, temperature=1.0, ref_update_freq=4)
    _, metrics = update.run(_scored_batch([1.0, 1.0], ["a", "a"]), workers, global_steps=1)
    assert actor.calls == [] and metrics["dpo/num_pairs"] == 0.0
    update.after_resume(workers, global_steps=0)  # from scratch: nothing to re-derive
    assert actor.calls == []
    update.after_resume(workers, global_steps=6)
    assert actor.calls == ["sync_ref_from_actor"]


def test_spin_pairs_plug_into_the_same_update_stage():
    class _Tokenizer:
        eos_token_id, pad_token_id = 2, 0

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [int(t) for t in text.split()]}

    actor = _FakeDPOActor()
    batch = _scored_batch([0.0, 0.0], ["a", "b"])
    # row 0's target equals its generation (10 11 12 → identical, skipped); row 1's differs
    batch.non_tensor_batch["extra_info"] = np.array([{"response": "10 11"}, {"response": "7"}], dtype=object)
    batch.batch["responses"][0] = torch.tensor([10, 11, 2])
    update = DPOUpdate(SPINPairs(_Tokenizer(), "response"), HYPER, temperature=1.0, ref_update_freq=-1)
    _, metrics = update.run(batch, WorkerGroups(actor_rollout=actor, ref=actor), global_steps=1)
    assert metrics["dpo/num_pairs"] == 1.0 and metrics["spin/identical_ratio"] == 0.5
    assert actor.calls == ["compute_ref_log_prob", "update_actor_dpo"]
    chosen = actor.updates[0].batch["responses"][0]
    assert chosen.tolist() == [7, 2, 0]  # the SFT target + EOS, padded


@pytest.mark.parametrize(("trainer_name", "pairs_cls"), [("online_dpo", BestWorstPairs), ("spin", SPINPairs)])
def test_recipe_trainers_pass_their_update_stage(trainer_name, pairs_cls, tiny_model_dir, recipe_data_dir, tmp_path,
                                                 monkeypatch):
    import tests.recipes.fakes as fakes
    from hybridrl.recipes.config import compose_recipe_config
    from hybridrl.recipes.online_dpo.dpo_trainer import RayOnlineDPOTrainer
    from hybridrl.recipes.spin.spin_trainer import RaySPINTrainer
    from hybridrl.trainer.ppo.roles import Role

    trainer_cls = {"online_dpo": RayOnlineDPOTrainer, "spin": RaySPINTrainer}[trainer_name]
    overrides = [f"{k}={v}" for k, v in fakes.common_overrides(tiny_model_dir, recipe_data_dir, tmp_path).items()]
    config = compose_recipe_config(RECIPES / trainer_name / "config", f"{trainer_name}_trainer", overrides)
    # the DPO trainers rewrite the role → pool mapping of the resource pool manager
    manager = SimpleNamespace(mapping={Role.ActorRollout: "global_pool"}, get_n_gpus=lambda: 2)
    monkeypatch.setattr(fakes, "FakeResourcePoolManager", lambda: manager)
    trainer = fakes.make_trainer(trainer_cls, config)
    assert isinstance(trainer.update_stage, DPOUpdate) and isinstance(trainer.update_stage.make_pairs, pairs_cls)
    assert list(trainer.role_worker_mapping) == [Role.ActorRolloutRef] and trainer.use_reference_policy

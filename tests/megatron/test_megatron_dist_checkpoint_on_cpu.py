"""``megatron.use_dist_checkpointing``: the tiny HF model → a megatron-core dist checkpoint (the converter CLI, one
process, TP=1) → the Megatron policy worker at TP=2 (2 gloo ranks) loads its actor from it.

The worker's reference is built from the HF folder (``ref.megatron.use_dist_checkpointing=False``), so the two
models of one worker compare the two load paths: parameters and log-probs equal (measured 0.0; tolerance 0), and
both within 1e-5 of the HF model's log-probs. Refusals name the key; planted pickles are never unpickled. The
converter's checkpoint is ``dist_ckpt_dir`` (tests/megatron/conftest.py, shared with the main_ppo run that loads
every role from it: test_main_ppo_megatron_e2e_on_cpu.py).
"""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from megatron_testlib import hf_response_log_probs, policy_batch, policy_config, run_ranks

from hybridrl.workers.megatron.dist_checkpoint import DistCheckpointError, check_dist_checkpoint, read_dcp_metadata

ACTOR_KEY = "actor_rollout_ref.actor.megatron.dist_checkpointing_path"
HF_LOG_PROB_TOLERANCE = 1e-5


class _Payload:
    """A pickle that creates ``marker`` when unpickled (what a crafted checkpoint file could run)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _copy_with(src: str, dst: Path, name: str, payload: object) -> str:
    shutil.copytree(src, dst)
    with open(dst / name, "wb") as handle:
        pickle.dump(payload, handle)
    return str(dst)


def _tp2_worker_from_dist_ckpt(rank: int, model_dir: str, ckpt_dir: str, scratch: str) -> dict:
    from omegaconf import OmegaConf

    from hybridrl.workers.megatron.engine import build_megatron_model
    from hybridrl.workers.megatron.worker import MegatronActorRolloutRefWorker

    config = policy_config(model_dir, 2, "actor_rollout_ref.actor.megatron.use_dist_checkpointing=True",
                           f"actor_rollout_ref.actor.megatron.dist_checkpointing_path={ckpt_dir}")
    worker = MegatronActorRolloutRefWorker(config, role="actor_rollout_ref")
    worker.init_model()
    data = policy_batch(seed=1)
    actor = worker.compute_log_prob(data).batch["old_log_probs"]  # the model loaded from the dist checkpoint
    ref = worker.compute_ref_log_prob(data).batch["ref_log_prob"]  # the model converted from the HF folder
    ref_params = dict(worker.ref_module.module.named_parameters())
    param_diff = max((p - ref_params[n]).abs().max().item() for n, p in worker.actor_model.gpt.named_parameters())
    errors = {}
    megatron = config.actor.megatron
    cases = {
        "no_path": {"dist_checkpointing_path": None},
        "hf_folder": {"dist_checkpointing_path": model_dir},
        "other_model": {"dist_checkpointing_path": ckpt_dir, "override_transformer_config": {"num_layers": 3}},
        "pickled_common": {"dist_checkpointing_path": f"{scratch}/pickled_common"},
    }
    for case, overrides in cases.items():
        section = {**megatron, "use_dist_checkpointing": True, **overrides}
        try:
            build_megatron_model(model_dir, worker.hf_config, OmegaConf.create(section), torch.float32, "cpu",
                                 section="critic.megatron")
            errors[case] = "loaded"
        except Exception as error:  # noqa: BLE001 (the message is the result)
            errors[case] = f"{type(error).__name__}: {error}"
    # a value model (critic / reward model): the trunk from the checkpoint, the head as given (verl skips
    # output_layer too)
    head = {"weight": torch.full((1, worker.hf_config.hidden_size), 0.5), "bias": torch.tensor([0.25])}
    section = OmegaConf.create({**megatron, "use_dist_checkpointing": True, "dist_checkpointing_path": ckpt_dir})
    value = build_megatron_model(model_dir, worker.hf_config, section, torch.float32, "cpu", value_head=head,
                                 section="critic.megatron").gpt
    actor_params = dict(worker.actor_model.gpt.named_parameters())
    value_trunk_diff = max((p - actor_params[n]).abs().max().item() for n, p in value.named_parameters()
                           if not n.startswith("output_layer."))
    value_head_kept = bool(torch.equal(value.output_layer.weight, head["weight"]))
    return {"actor": actor, "ref": ref, "param_diff": param_diff, "errors": errors,
            "value_trunk_diff": value_trunk_diff, "value_head_kept": value_head_kept}


def test_converted_tp1_checkpoint_loads_at_tp2_like_the_hf_conversion(tmp_path, tiny_gqa_qwen2_dir, dist_ckpt_dir):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    marker = str(tmp_path / "common_payload_ran")
    _copy_with(dist_ckpt_dir, scratch / "pickled_common", "common.pt", _Payload(marker))
    results = run_ranks(_tp2_worker_from_dist_ckpt, 2, tmp_path / "tp2", tiny_gqa_qwen2_dir, dist_ckpt_dir,
                        str(scratch))
    mask = policy_batch(seed=1).batch["response_mask"].bool()
    hf = hf_response_log_probs(tiny_gqa_qwen2_dir, policy_batch(seed=1))
    for result in results:
        diff = (result["actor"] - result["ref"])[mask].abs().max().item()
        diff_hf = (result["actor"] - hf)[mask].abs().max().item()
        print(f"dist ckpt vs HF conversion: params {result['param_diff']:.1e}, log-probs {diff:.1e}; vs HF {diff_hf:.1e}")
        assert result["param_diff"] == 0.0 and diff == 0.0
        assert diff_hf < HF_LOG_PROB_TOLERANCE
        errors = result["errors"]
        print(errors)
        assert "critic.megatron.dist_checkpointing_path is null" in errors["no_path"]
        assert "critic.megatron.dist_checkpointing_path=" in errors["hf_folder"]
        assert "not a megatron-core dist checkpoint (no metadata.json)" in errors["hf_folder"]
        assert "does not match this model" in errors["other_model"] and "stored (2," in errors["other_model"]
        assert "common.pt holds more than tensors" in errors["pickled_common"]
        assert result["value_trunk_diff"] == 0.0 and result["value_head_kept"]
    assert not os.path.exists(marker)  # the planted common.pt never ran


def test_refusals_name_the_key_and_never_unpickle(tmp_path, dist_ckpt_dir):
    with pytest.raises(DistCheckpointError, match=f"{ACTOR_KEY} is null"):
        check_dist_checkpoint(None, ACTOR_KEY)
    with pytest.raises(DistCheckpointError, match=f"{ACTOR_KEY}=.* is not a folder"):
        check_dist_checkpoint(str(tmp_path / "absent"), ACTOR_KEY)
    incomplete = tmp_path / "incomplete"
    shutil.copytree(dist_ckpt_dir, incomplete)
    (incomplete / ".metadata").unlink()
    with pytest.raises(DistCheckpointError, match=r"\.metadata is missing: the checkpoint is incomplete"):
        check_dist_checkpoint(str(incomplete), ACTOR_KEY)
    partial = tmp_path / "partial"
    shutil.copytree(dist_ckpt_dir, partial)
    next(partial.glob("*.distcp")).unlink()
    with pytest.raises(DistCheckpointError, match=r"data file\(s\) .*distcp.* are missing"):
        check_dist_checkpoint(str(partial), ACTOR_KEY)
    marker = tmp_path / "index_payload_ran"
    planted = _copy_with(dist_ckpt_dir, tmp_path / "planted", ".metadata", _Payload(str(marker)))
    with pytest.raises(DistCheckpointError, match=r"refuses it.*|builtins\.open"):
        check_dist_checkpoint(planted, ACTOR_KEY)
    assert not marker.exists()
    # the genuine index reads through the allow-list: every tensor of the 2-layer model, layers stacked
    metadata = read_dcp_metadata(dist_ckpt_dir)
    assert tuple(metadata.state_dict_metadata["decoder.layers.self_attention.linear_qkv.weight"].size)[0] == 2

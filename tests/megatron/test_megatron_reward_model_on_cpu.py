"""The Megatron reward-model worker against the FSDP2 one on the same tiny reward model (2 gloo ranks, TP=2).

The RM is a real HF folder: the tiny untied Llama saved as ``LlamaForSequenceClassification`` with one label and a
random ``score`` head (std 0.5, no bias, as HF saves it). Both workers load it as a token-classification model;
the Megatron one (trunk weights through mbridge, ``use_mbridge=True``) scores packed rows
(``use_remove_padding=True``, block-diagonal attention), the FSDP2 one padded rows. ``rm_scores`` agree within
1e-5 (fp32) and are non-zero only on each row's last valid response token; exported back to HF (gathered over TP),
the Megatron RM's tensors equal the folder's, bit for bit, plus HF's zero ``score.bias``.
"""

from __future__ import annotations

import pytest
import torch
from megatron_testlib import policy_batch, run_rank_groups

SCORE_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def tiny_rm_dir(tmp_path_factory, tiny_gqa_llama_dir):
    """The tiny Llama as a one-label sequence-classification RM with a random (non-zero) head."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    rm_dir = tmp_path_factory.mktemp("tiny_rm")
    torch.manual_seed(7)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_gqa_llama_dir, num_labels=1)
    with torch.no_grad():
        model.score.weight.normal_(0.0, 0.5)
    model.save_pretrained(rm_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(tiny_gqa_llama_dir).save_pretrained(rm_dir)
    return str(rm_dir)


def rm_config(model_dir: str, tp_size: int, strategy: str):
    """``reward_model`` for the tiny RM from the shipped YAML (``ppo_megatron_trainer`` at TP ``tp_size`` with
    packed rows and mbridge, or ``ppo_trainer``); the RM reads the policy's token ids (no chat-template switch)."""
    from config_testlib import compose_config

    common = [f"actor_rollout_ref.model.path={model_dir}", f"reward_model.model.path={model_dir}",
              "reward_model.enable=True", "reward_model.model.input_tokenizer=null",
              "reward_model.micro_batch_size_per_gpu=2", "data.train_batch_size=4"]
    if strategy == "megatron":
        return compose_config("ppo_megatron_trainer", [
            *common, f"reward_model.megatron.tensor_model_parallel_size={tp_size}",
            "+reward_model.model.use_remove_padding=True", "reward_model.megatron.use_mbridge=True"]).reward_model
    return compose_config("ppo_trainer", common).reward_model


def _rm_scores(rank: int, model_dir: str, tp_size: int, strategy: str) -> dict:
    from hybridrl.workers.megatron.reward_model_worker import MegatronRewardModelWorker
    from hybridrl.workers.reward_model_worker import RewardModelWorker

    worker_class = MegatronRewardModelWorker if strategy == "megatron" else RewardModelWorker
    worker = worker_class(rm_config(model_dir, tp_size, strategy))
    worker.init_model()
    scores = worker.compute_rm_score(policy_batch(seed=1)).batch["rm_scores"]
    if strategy != "megatron":
        return {"scores": scores}
    from hybridrl.workers.megatron.value_model import export_value_model_hf_weights

    exported = {name: tensor.clone() for name, tensor in export_value_model_hf_weights(worker.reward_model)}
    return {"scores": scores, "mbridge": float(worker.reward_model.bridge is not None), **{
        f"hf::{name}": tensor for name, tensor in exported.items()}}


def test_megatron_rm_tp2_equals_fsdp2(tmp_path, tiny_rm_dir):
    [fsdp], tp2 = run_rank_groups((_rm_scores, 1, tmp_path / "fsdp", tiny_rm_dir, 1, "fsdp2"),
                                  (_rm_scores, 2, tmp_path / "tp2", tiny_rm_dir, 2, "megatron"))
    fsdp = fsdp["scores"]
    response_mask = policy_batch(seed=1).batch["response_mask"]
    last = response_mask.sum(-1) - 1  # every row has a valid response token
    rows = torch.arange(len(last))
    assert (fsdp[rows, last].abs() > 1e-3).all()  # a real score on the last valid response token ...
    fsdp_elsewhere = fsdp.clone()
    fsdp_elsewhere[rows, last] = 0
    assert (fsdp_elsewhere == 0).all()  # ... and zeros elsewhere
    from safetensors.torch import load_file

    saved = load_file(f"{tiny_rm_dir}/model.safetensors")  # model.* and score.weight (no bias)
    for rank in tp2:
        assert rank["mbridge"] == 1.0  # the trunk came through mbridge (the critic test uses the built-in converter)
        exported = {name[4:]: tensor for name, tensor in rank.items() if name.startswith("hf::")}
        assert sorted(exported) == sorted([*saved, "score.bias"])  # exported back in the token-classification layout
        assert all(torch.equal(exported[name], saved[name]) for name in saved) and not exported["score.bias"].any()
        diff = (rank["scores"] - fsdp).abs().max().item()
        print(f"rm_scores diff vs FSDP2 (TP=2, packed rows): {diff:.2e}")
        assert diff < SCORE_TOLERANCE

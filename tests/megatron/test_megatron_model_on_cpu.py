"""megatron-core GPTModel from an HF tiny model: logits equal HF's at TP=1 and TP=2, and the weights export back.

Both converters are checked: the built-in one (``use_mbridge=False``) and mbridge's (``use_mbridge=True``).
Tolerance: fp32, max |logit difference| on valid tokens < 1e-5 (measured 1.5e-7 at TP=1, 2.4e-7 at TP=2:
the TP split reorders the sums); the export is exact (0.0).
"""

from __future__ import annotations

import torch
from megatron_testlib import megatron_section, run_rank_groups

LOGIT_TOLERANCE = 1e-5


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """3 rows of 12 tokens; rows 1 and 2 left-padded by 3 and 5."""
    input_ids = torch.randint(5, 500, (3, 12), generator=torch.Generator().manual_seed(0))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :3] = 0
    attention_mask[2, :5] = 0
    return input_ids, attention_mask, (attention_mask.cumsum(-1) - 1).clamp(min=0)


def _logits_and_export(rank: int, model_dir: str, tp_size: int, use_mbridge: bool) -> dict:
    from transformers import AutoConfig, AutoModelForCausalLM

    from hybridrl.workers.megatron.engine import build_megatron_model, export_hf_weights
    from hybridrl.workers.megatron.parallel import init_megatron_parallel
    from hybridrl.workers.megatron.weights import read_hf_state_dict

    megatron_config = megatron_section(tp_size, use_mbridge)
    init_megatron_parallel(megatron_config, "cpu")
    hf_config = AutoConfig.from_pretrained(model_dir)
    model = build_megatron_model(model_dir, hf_config, megatron_config, torch.float32, "cpu")
    hf_model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    input_ids, attention_mask, position_ids = _batch()
    with torch.no_grad():
        ours = model.causal_lm(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        theirs = hf_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    valid = attention_mask.bool()
    original = read_hf_state_dict(model_dir)
    exported = dict(export_hf_weights(model))
    return {
        "logit_diff": (ours - theirs)[valid].abs().max().item(),
        "same_names": sorted(original) == sorted(exported),
        "export_diff": max((exported[name] - original[name]).abs().max().item() for name in original),
        "logits": ours,
    }


def _all_cases(rank: int, model_dirs: list[str], tp_size: int) -> dict:
    """Every (model, converter) case in one process per rank: megatron-core's import and set-up are paid once."""
    results = {}
    for model_dir in model_dirs:
        for use_mbridge in (False, True):
            results[f"{model_dir}|{use_mbridge}"] = _logits_and_export(rank, model_dir, tp_size, use_mbridge)
    return results


def test_logits_equal_hf_at_tp1_and_tp2_and_export_round_trips(tmp_path, tiny_gqa_qwen2_dir, tiny_gqa_llama_dir):
    # tied Qwen2 with QKV bias, untied Llama; built-in converter and mbridge
    model_dirs = [tiny_gqa_qwen2_dir, tiny_gqa_llama_dir]
    [tp1], tp2 = run_rank_groups((_all_cases, 1, tmp_path / "tp1", model_dirs, 1),
                                 (_all_cases, 2, tmp_path / "tp2", model_dirs, 2))
    assert len(tp1) == 4
    for case, result in [*tp1.items(), *tp2[0].items(), *tp2[1].items()]:
        assert result["logit_diff"] < LOGIT_TOLERANCE, case
        assert result["same_names"], case
        assert result["export_diff"] == 0.0, case
        torch.testing.assert_close(tp2[0][case]["logits"], tp1[case]["logits"], rtol=0, atol=LOGIT_TOLERANCE)
        torch.testing.assert_close(tp2[1][case]["logits"], tp2[0][case]["logits"], rtol=0, atol=0)  # TP ranks agree


def test_rope_settings_read_transformers_4_and_5_configs():
    """transformers 5.x keeps rope_theta in rope_parameters and aliases rope_scaling to it (non-empty for plain RoPE):
    plain RoPE is not refused and its theta is read; a real scaling is still reported (and refused by the model)."""
    from transformers import Qwen2Config

    from hybridrl.workers.megatron.model import rope_settings

    assert rope_settings(Qwen2Config(rope_theta=5000.0)) == (5000.0, None)
    theta, scaling = rope_settings(Qwen2Config(rope_theta=5000.0, rope_scaling={"rope_type": "linear", "factor": 2.0}))
    assert theta == 5000.0 and scaling == {"rope_type": "linear", "factor": 2.0}

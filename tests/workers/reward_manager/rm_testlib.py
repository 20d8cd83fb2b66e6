"""Build rollout-shaped DataProtos (prompts [B,P] left-padded, responses [B,R] right-padded) for manager tests."""

import numpy as np
import torch

from hybridrl.protocol import DataProto


def make_batch(tokenizer, prompts, responses, ground_truths, data_sources, P=16, R=12, extra=None):
    """``responses`` items are strings (tokenized) or lists of token ids (used as is)."""
    pad = tokenizer.pad_token_id
    rows_p, rows_r, masks = [], [], []
    for prompt, response in zip(prompts, responses):
        p_ids = tokenizer.encode(prompt, add_special_tokens=False)[-P:]
        r_ids = response if isinstance(response, list) else tokenizer.encode(response, add_special_tokens=False)
        r_ids = r_ids[:R]
        rows_p.append([pad] * (P - len(p_ids)) + p_ids)
        rows_r.append(r_ids + [pad] * (R - len(r_ids)))
        masks.append([0] * (P - len(p_ids)) + [1] * len(p_ids) + [1] * len(r_ids) + [0] * (R - len(r_ids)))
    prompts_t, responses_t = torch.tensor(rows_p), torch.tensor(rows_r)
    non_tensors = {
        "data_source": np.array(data_sources, dtype=object),
        "reward_model": np.array([{"style": "rule", "ground_truth": g} for g in ground_truths], dtype=object),
        "extra_info": np.array(extra or [{"index": i} for i in range(len(prompts))], dtype=object),
    }
    return DataProto.from_dict(
        tensors={
            "prompts": prompts_t,
            "responses": responses_t,
            "input_ids": torch.cat([prompts_t, responses_t], dim=1),
            "attention_mask": torch.tensor(masks),
        },
        non_tensors=non_tensors,
    )


def valid_lengths(data):
    P = data.batch["prompts"].shape[-1]
    return data.batch["attention_mask"][:, P:].sum(-1).tolist()

"""Check ``rollout``: the hf rollout on the device, through ``ActorRolloutRefWorker(role="actor_rollout")``.

Generates sampled responses (temperature 1) for a few chat prompts with ``rollout.calculate_log_probs=True``, then
scores the same tokens with the actor (``compute_log_prob``). Reported: tokens/s, and the rollout ↔ actor agreement as
verl's ``training/rollout_probs_diff_*`` (|p_rollout − p_actor|) and as |Δ log p|. PASS: the sequences have the asked
shape, both log-probs are finite, and the mean |Δ log p| is below ``MAX_MEAN_LOG_PROB_DIFF``.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from gpu_check.outcome import Outcome
from gpu_check.single_rank import build_actor_worker, join_single_rank_group
from gpu_check.workload import model_dir, sizes_for

# rollout vs actor on the same weights: the dry run measures ~2e-8; bf16 rounding stays well below 0.1, while stale
# weights or a temperature mismatch give differences of order 1
MAX_MEAN_LOG_PROB_DIFF = 0.1
QUESTIONS = ("What is 12 + 30?", "What is 7 times 8?", "Say hello.", "What is 99 minus 1?")


def chat_prompts(tokenizer: Any, count: int) -> Any:
    """A DataProto of ``count`` left-padded chat prompts (``input_ids``, ``attention_mask``, ``position_ids``)."""
    from hybridrl.protocol import DataProto
    from hybridrl.utils.torch_functional import compute_position_id_with_mask
    from hybridrl.workers.rollout.hf_rollout import left_pad

    rows = []
    for index in range(count):
        chat = [{"role": "user", "content": QUESTIONS[index % len(QUESTIONS)]}]
        rows.append(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))
    input_ids, attention_mask = left_pad(rows, tokenizer.pad_token_id, torch.device("cpu"))
    tensors = {"input_ids": input_ids, "attention_mask": attention_mask,
               "position_ids": compute_position_id_with_mask(attention_mask)}  # fmt: skip
    return DataProto.from_dict(tensors=tensors, meta_info={"do_sample": True})


def agreement(rollout_log_probs: torch.Tensor, actor_log_probs: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """verl's probability differences plus the mean and max |Δ log p| over valid response tokens."""
    from hybridrl.workers.rollout.consistency import compute_rollout_probs_diff_metrics

    figures = compute_rollout_probs_diff_metrics(rollout_log_probs, actor_log_probs, mask)
    log_diff = (rollout_log_probs - actor_log_probs).abs()[mask.bool()]
    figures["log_prob_diff_mean"] = log_diff.mean().item()
    figures["log_prob_diff_max"] = log_diff.max().item()
    return figures


def run(context: dict[str, Any]) -> Outcome:
    join_single_rank_group(context["device"])
    sizes = sizes_for(context)
    shape = sizes.worker_batch
    log_probs_on = "actor_rollout_ref.rollout.calculate_log_probs=True"
    worker = build_actor_worker(model_dir(context), shape, "actor_rollout", log_probs_on)
    prompts = chat_prompts(worker.tokenizer, sizes.rollout_prompts)
    start = time.perf_counter()
    output = worker.generate_sequences(prompts)
    generate_s = time.perf_counter() - start
    response_length = output.batch["responses"].shape[1]
    mask = output.batch["attention_mask"][:, -response_length:]
    output.batch["response_mask"] = mask
    rollout_log_probs = output.batch["rollout_log_probs"]
    actor_log_probs = worker.compute_log_prob(output).batch["old_log_probs"]
    tokens = int(mask.sum())
    figures = {"sequences": output.batch["responses"].shape[0], "response_length": response_length,
               "response_tokens": tokens, "generate_s": round(generate_s, 3),
               "tokens_per_s": round(tokens / generate_s, 1), "rollout_dtype": str(worker.config.rollout.dtype),
               **agreement(rollout_log_probs, actor_log_probs, mask)}  # fmt: skip
    valid = mask.bool()
    finite = bool(torch.isfinite(rollout_log_probs[valid]).all() and torch.isfinite(actor_log_probs[valid]).all())
    if response_length != shape.response_length or tokens == 0 or not finite:
        return Outcome("FAIL", f"responses {list(output.batch['responses'].shape)}, {tokens} tokens, finite={finite}",
                       figures)  # fmt: skip
    summary = (f"{figures['sequences']} sequences, {tokens} tokens in {generate_s:.2f} s "
               f"({figures['tokens_per_s']:.0f} tok/s); rollout vs actor: mean |dlogp| "
               f"{figures['log_prob_diff_mean']:.3g}, probs_diff_max {figures['training/rollout_probs_diff_max']:.3g}")  # fmt: skip
    if figures["log_prob_diff_mean"] > MAX_MEAN_LOG_PROB_DIFF:
        return Outcome("FAIL", f"{summary} (> {MAX_MEAN_LOG_PROB_DIFF})", figures)
    return Outcome("PASS", f"hf on {context['device']}: {summary}", figures)

"""The canonical batch keys of a PPO/GRPO step: one table of key, shape and the stage that adds it.

Notation: ``B`` = rows (prompts × ``rollout.n`` once generated), ``P`` = max prompt length,
``R`` = max response length. Prompts are left-padded, responses right-padded, so
``input_ids[:, -R:] == responses`` after generation.

verl passes these keys between the driver and the workers by name; hybridrl keeps the names
(``old_log_probs`` and ``ref_log_prob`` differ in plurality in verl too). Error messages about a
missing key name the stage that should have added it (:func:`missing_key_hint`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["BATCH_KEYS", "ROLLOUT_ROW_KEY", "BatchKey", "Part", "Stage", "keys_added_by", "missing_key_hint"]

ROLLOUT_ROW_KEY = "__rollout_row__"


class Stage(str, Enum):
    """The step's stages, in order (the stage functions of ``trainer/ppo/stages.py``)."""

    DATASET = "dataset"  # RLHFDataset rows, collated
    GENERATE = "generate"  # driver uid + rollout (actor_rollout_wg.generate_sequences) + driver response_mask
    REWARD = "reward"  # reward function (+ rm_wg.compute_rm_score)
    OLD_LOG_PROB = "old_log_prob"  # actor_rollout_wg.compute_log_prob
    REF = "ref"  # ref_policy_wg.compute_ref_log_prob
    VALUES = "values"  # critic_wg.compute_values
    ADVANTAGE = "advantage"  # driver: apply_kl_penalty + compute_advantage


class Part(str, Enum):
    """Which part of a DataProto holds the key."""

    BATCH = "batch"  # a tensor in the TensorDict
    NON_TENSOR = "non_tensor_batch"  # an object ndarray of length B


@dataclass(frozen=True)
class BatchKey:
    """One row of the table: after ``stage``, ``name`` holds ``shape``, written by ``writer``."""

    name: str
    shape: str
    stage: Stage
    writer: str
    part: Part = Part.BATCH
    optional: bool = False  # only with some configs (a critic, a reference policy, a reward model, ...)


_BP, _BR, _BPR = "[B, P]", "[B, R]", "[B, P+R]"
_NT = Part.NON_TENSOR

# Ordered by stage; a key written twice (input_ids: prompt, then prompt+response) has one row per stage.
BATCH_KEYS: tuple[BatchKey, ...] = (
    BatchKey("input_ids", _BP, Stage.DATASET, "dataset"),  # left-padded prompt tokens
    BatchKey("attention_mask", _BP, Stage.DATASET, "dataset"),
    BatchKey("position_ids", _BP, Stage.DATASET, "dataset"),
    BatchKey("raw_prompt_ids", "[B] list[int]", Stage.DATASET, "dataset", _NT),
    BatchKey("data_source", "[B] str", Stage.DATASET, "dataset", _NT),
    BatchKey("reward_model", "[B] dict", Stage.DATASET, "dataset", _NT),  # {style, ground_truth}
    BatchKey("uid", "[B] str", Stage.GENERATE, "driver", _NT),  # one id per prompt, then repeated rollout.n times
    BatchKey("prompts", _BP, Stage.GENERATE, "rollout"),
    BatchKey("responses", _BR, Stage.GENERATE, "rollout"),  # right-padded
    BatchKey("input_ids", _BPR, Stage.GENERATE, "rollout"),  # prompts ‖ responses
    BatchKey("attention_mask", _BPR, Stage.GENERATE, "rollout"),
    BatchKey("position_ids", _BPR, Stage.GENERATE, "rollout"),
    BatchKey("rollout_log_probs", _BR, Stage.GENERATE, "rollout", optional=True),
    BatchKey("response_mask", _BR, Stage.GENERATE, "driver"),  # attention_mask[:, -R:]; agent loops: model tokens only
    BatchKey("__num_turns__", "[B] int", Stage.GENERATE, "agent loop", _NT, optional=True),  # rollout.mode=async
    # the input row of each sample when an agent loop returned several (or no) samples for a row
    BatchKey(ROLLOUT_ROW_KEY, "[B] int", Stage.GENERATE, "agent loop", _NT, optional=True),
    BatchKey("token_level_scores", _BR, Stage.REWARD, "reward function"),  # score on the last valid token
    BatchKey("rm_scores", _BR, Stage.REWARD, "reward model", optional=True),
    BatchKey("old_log_probs", _BR, Stage.OLD_LOG_PROB, "actor"),
    BatchKey("ref_log_prob", _BR, Stage.REF, "reference policy", optional=True),
    BatchKey("values", _BR, Stage.VALUES, "critic", optional=True),
    BatchKey("token_level_rewards", _BR, Stage.ADVANTAGE, "driver"),  # scores − β·KL when use_kl_in_reward
    BatchKey("advantages", _BR, Stage.ADVANTAGE, "driver"),
    BatchKey("returns", _BR, Stage.ADVANTAGE, "driver"),
)


def keys_added_by(stage: Stage) -> tuple[BatchKey, ...]:
    """The rows of :data:`BATCH_KEYS` written by ``stage``."""
    return tuple(key for key in BATCH_KEYS if key.stage == stage)


def missing_key_hint(name: str) -> str:
    """A sentence for error messages: which stage adds ``name`` and its shape; ``""`` for unknown keys."""
    rows = [key for key in BATCH_KEYS if key.name == name]
    if not rows:
        return ""
    last = rows[-1]
    return f" ('{name}' {last.shape} is added by the {last.writer} in the {last.stage.value} stage)"

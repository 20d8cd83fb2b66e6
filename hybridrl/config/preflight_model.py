"""Preflight of the model folders: every ``*.safetensors`` file holds the bytes its header declares, and a
vision-language policy runs only where the images reach the model (refused rather than trained blind).

A copy or download cut short leaves a ``model.safetensors`` whose header (at the front) is intact but whose
tensors end early; loading it failed in a worker, minutes after Ray started, with safetensors' bare
"incomplete metadata, file not fully covered". The layout (safetensors' format): 8 bytes little-endian ``N``,
``N`` bytes of JSON header mapping each tensor to ``data_offsets [begin, end)`` within the data that follows, so a
complete file has at least ``8 + N + max(end)`` bytes. Reading the headers only takes milliseconds per file.
"""

from __future__ import annotations

import json
import os

from omegaconf import DictConfig

from hybridrl.config.access import ACTOR, MODEL, ROLLOUT, get, need_critic
from hybridrl.config.errors import ConfigProblem

__all__ = ["check_model_files", "check_text_only_policy", "safetensors_problem"]

MODEL_KEYS = (f"{MODEL}.path", "critic.model.path", "reward_model.model.path")
_HEADER_LENGTH_BYTES = 8  # the little-endian u64 that opens every safetensors file


def check_model_files(config: DictConfig) -> list[ConfigProblem]:
    """A problem per incomplete or unreadable ``*.safetensors`` file in the local model folders of ``MODEL_KEYS``."""
    problems = []
    for key in MODEL_KEYS:
        folder = os.path.abspath(os.path.expanduser(str(get(config, key) or "")))
        if get(config, key) and os.path.isdir(folder):  # a hub id or an unused role's default: nothing to read
            problems += _folder_problems(key, folder)
    return problems


def check_text_only_policy(config: DictConfig) -> list[ConfigProblem]:
    """Problems when ``actor_rollout_ref.model.path`` is a vision-language model (its ``config.json`` has a
    ``vision_config``) outside what passes images to the model: a Qwen2-VL / Qwen2.5-VL / Qwen3-VL or Idefics3
    (SmolVLM's first release) policy with the sync hf rollout, padded FSDP forwards, no critic, reward model or
    LoRA (``hybridrl/models/multimodal.py``). Anything else would train on image placeholders the model never sees,
    so it is refused before Ray starts."""
    key = f"{MODEL}.path"
    folder = os.path.expanduser(str(get(config, key) or ""))
    model_config = _read_json(os.path.join(folder, "config.json"))
    if model_config is None or "vision_config" not in model_config:
        return []
    model_type = model_config.get("model_type", "?")
    if model_type not in VISION_LANGUAGE_TYPES:
        return [ConfigProblem(
            key,
            f"{folder} is a vision-language model ({model_type}): multimodal RL is not supported yet for this "
            f"family (the rollout and the training forwards pass images only to {list(VISION_LANGUAGE_TYPES)}).",
            "train a Qwen2-VL / Qwen2.5-VL / Qwen3-VL or Idefics3 model or a text-only one; what works today for "
            "vision-language models is listed in docs/status.md.",
        )]
    return [
        ConfigProblem(where, f"{folder} is a vision-language model ({model_type}), and {problem}", fix)
        for where, problem, fix in _vision_language_run_problems(config)
    ]


VISION_LANGUAGE_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "idefics3")


def _vision_language_run_problems(config: DictConfig) -> list[tuple[str, str, str]]:
    """(key, problem, fix) for each setting of the run that does not pass images to the model yet."""
    checks = [
        (f"{ROLLOUT}.name", get(config, f"{ROLLOUT}.name") in ("hf", "hf_generate"),
         "only the hf rollout passes images to the model so far.", "set actor_rollout_ref.rollout.name=hf."),
        (f"{ROLLOUT}.mode", get(config, f"{ROLLOUT}.mode") == "sync",
         "the async server and the agent loop do not pass images yet.", "set actor_rollout_ref.rollout.mode=sync."),
        ("data.return_multi_modal_inputs", bool(get(config, "data.return_multi_modal_inputs")),
         "the rollout and the training forwards read the images from multi_modal_inputs.",
         "set data.return_multi_modal_inputs=True."),
        (f"{MODEL}.use_remove_padding", not get(config, f"{MODEL}.use_remove_padding"),
         "the packed forward does not take images yet.", "set actor_rollout_ref.model.use_remove_padding=False."),
        (f"{ACTOR}.ulysses_sequence_parallel_size", int(get(config, f"{ACTOR}.ulysses_sequence_parallel_size") or 1)
         == 1, "Ulysses sequence parallelism does not take images yet.",
         "set actor_rollout_ref.actor.ulysses_sequence_parallel_size=1."),
        (f"{ACTOR}.strategy", str(get(config, f"{ACTOR}.strategy")) in ("fsdp", "fsdp2"),
         "only the FSDP actor passes images to the model so far.", "set actor_rollout_ref.actor.strategy=fsdp2."),
        (f"{MODEL}.lora_rank", not int(get(config, f"{MODEL}.lora_rank") or 0),
         "LoRA on a vision-language model is not supported yet.", "set actor_rollout_ref.model.lora_rank=0."),
        ("critic.enable", not need_critic(config), "a critic does not take images yet.",
         "use a critic-free estimator (algorithm.adv_estimator=grpo) or critic.enable=False."),
        ("reward_model.enable", not get(config, "reward_model.enable"), "a reward model does not take images yet.",
         "score with a rule-based reward function (reward_model.enable=False)."),
    ]
    return [(key, problem, fix) for key, supported, problem, fix in checks if not supported]


def _read_json(path: str) -> dict | None:
    """The JSON object in ``path``; None when absent or unreadable (transformers names a bad config.json itself)."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _folder_problems(key: str, folder: str) -> list[ConfigProblem]:
    files = [os.path.join(folder, name) for name in sorted(os.listdir(folder)) if name.endswith(".safetensors")]
    return [
        ConfigProblem(
            key,
            f"{path} {problem}.",
            f"download or save the model again (an interrupted copy leaves this), or point {key} at a complete "
            "model folder.",
        )
        for path, problem in ((path, safetensors_problem(path)) for path in files)
        if problem is not None
    ]


def safetensors_problem(path: str) -> str | None:
    """Why the safetensors file at ``path`` is incomplete or unreadable (the rest of a sentence), or None."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        if size < _HEADER_LENGTH_BYTES:
            return f"is truncated: {size} bytes, less than the {_HEADER_LENGTH_BYTES}-byte header length"
        header_length = int.from_bytes(handle.read(_HEADER_LENGTH_BYTES), "little")
        data_start = _HEADER_LENGTH_BYTES + header_length
        if data_start > size:
            return f"is truncated: its header alone declares {data_start} bytes, the file has {size}"
        try:
            header = json.loads(handle.read(header_length))
            data_end = max(
                (int(entry["data_offsets"][1]) for name, entry in header.items() if name != "__metadata__"), default=0
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as error:
            return f"is not a safetensors file (unreadable header: {type(error).__name__}: {error})"
    if data_start + data_end > size:
        return f"is truncated: its header declares {data_start + data_end} bytes, the file has {size}"
    return None

"""Preflight of the model folders: every ``*.safetensors`` file holds the bytes its header declares, and the
policy is not a vision-language model (multimodal RL is not supported yet: refused rather than trained blind).

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

from hybridrl.config.access import MODEL, get
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
    """A problem when ``actor_rollout_ref.model.path`` is a vision-language model (its ``config.json`` has a
    ``vision_config``): the datasets would read its images, but no rollout or training forward passes them to the
    model yet, so a run would train on image placeholders the model never sees."""
    key = f"{MODEL}.path"
    config_file = os.path.join(os.path.expanduser(str(get(config, key) or "")), "config.json")
    if not os.path.isfile(config_file):
        return []
    try:
        with open(config_file, encoding="utf-8") as handle:
            model_config = json.load(handle)
    except (OSError, ValueError):
        return []  # transformers names an unreadable config.json itself
    if not isinstance(model_config, dict) or "vision_config" not in model_config:
        return []
    return [
        ConfigProblem(
            key,
            f"{os.path.dirname(config_file)} is a vision-language model ({model_config.get('model_type', '?')}): "
            "multimodal RL is not supported yet (the datasets read images, but the rollout and the training forwards "
            "do not pass them to the model, so it would be trained on image placeholders it never sees).",
            "train a text-only model; what works today for vision-language models is listed in docs/status.md "
            "(Not supported yet).",
        )
    ]


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

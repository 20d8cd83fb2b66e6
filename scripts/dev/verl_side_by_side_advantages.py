"""verl 0.9's advantage estimators and hybridrl's, side by side on the same random inputs.

Loads ``verl/trainer/ppo/core_algos.py`` (with the ``torch_functional`` and ``groupwise`` modules it needs)
straight from a verl git mirror at a tag, stubs the rest of its imports (device, config dataclasses), runs
every estimator of verl's registry and hybridrl's under the same name on single-turn masks (right padding)
and multi-turn masks (tool-observation gaps, empty responses), for several group sizes, and prints a JSON
table of max |verl − hybridrl| over advantages and returns. A dev tool, not a test: it needs the mirror.

    python scripts/dev/verl_side_by_side_advantages.py [--mirror DIR] [--tag v0.9.0] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

DEFAULT_MIRROR = Path("/work/.mirror/verl-project+verl/repo")
GROUP_SIZES = (1, 2, 4, 8, "mixed")
MASKS = ("single_turn", "multi_turn")


# ---------------------------------------------------------------------------- loading verl's module
def _verl_source(mirror: Path, tag: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(mirror), "show", f"{tag}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _module(name: str, source: str | None = None, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # every stub may be a package
    module.__dict__.update(attributes)
    sys.modules[name] = module
    if source is not None:
        exec(compile(source, f"<verl {name}>", "exec"), module.__dict__)
    return module


def load_verl_core_algos(mirror: Path, tag: str) -> types.ModuleType:
    """verl's ``core_algos`` module at ``tag``, its own math helpers loaded from the same tag."""
    for name in ("verl", "verl.trainer", "verl.trainer.ppo", "verl.workers"):
        _module(name)
    _module("verl.utils.device", get_device_name=lambda: "cpu", get_torch_device=lambda: torch.cpu)
    _module("verl.utils.import_utils", deprecated=lambda *a, **k: lambda obj: obj)
    _module("verl.trainer.config", AlgoConfig=dict)
    _module("verl.workers.config", ActorConfig=dict)
    torch_functional = _module(
        "verl.utils.torch_functional", _verl_source(mirror, tag, "verl/utils/torch_functional.py")
    )
    groupwise = _module("verl.utils.groupwise", _verl_source(mirror, tag, "verl/utils/groupwise.py"))
    _module(
        "verl.utils",
        torch_functional=torch_functional,
        as_torch_index=groupwise.as_torch_index,
        group_mean_std=groupwise.group_mean_std,
    )
    return _module("verl.trainer.ppo.core_algos", _verl_source(mirror, tag, "verl/trainer/ppo/core_algos.py"))


# ---------------------------------------------------------------------------- inputs
def random_inputs(seed: int, group_size: int | str, mask_kind: str, groups: int = 6, width: int = 12, vocab: int = 8):
    """One batch: uids, masks, rewards (outcome on the last generated token plus a few dense ones), values,
    π / Σπ² from real logits, rollout IS weights, GDPO components, ReMax baselines."""
    gen = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, 6, (groups,), generator=gen).tolist() if group_size == "mixed" else [group_size] * groups
    index = np.array([f"uid-{g}" for g, size in enumerate(sizes) for _ in range(size)], dtype=object)
    index = index[torch.randperm(len(index), generator=gen).numpy()]
    batch = len(index)
    lengths = torch.randint(1, width + 1, (batch,), generator=gen)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    if mask_kind == "multi_turn":
        mask = mask * (torch.rand(batch, width, generator=gen) > 0.3).float()  # tool-observation tokens
        mask[0] = 0.0  # one response with no generated token (the agent loop can produce it)
    last = torch.where(mask.any(-1), width - 1 - mask.flip(-1).argmax(-1), torch.zeros_like(lengths))
    rewards = torch.zeros(batch, width)
    rewards[torch.arange(batch), last] = torch.randint(0, 3, (batch,), generator=gen).float()
    rewards = (
        rewards + 0.1 * torch.randn(batch, width, generator=gen) * (torch.rand(batch, width, generator=gen) < 0.2)
    ) * mask
    log_softmax = torch.randn(batch, width, vocab, generator=gen).log_softmax(-1)
    old_log_probs = log_softmax.gather(-1, torch.randint(0, vocab, (batch, width, 1), generator=gen)).squeeze(-1)
    response_attention = (torch.arange(width)[None, :] <= last[:, None]).long()
    return {
        "index": index,
        "response_mask": mask,
        "token_level_rewards": rewards,
        "values": torch.randn(batch, width, generator=gen),
        "old_log_probs": old_log_probs,
        "sum_pi_squared": log_softmax.exp().pow(2).sum(-1),
        "rollout_is_weights": torch.rand(batch, width, generator=gen) * 2,
        "reward_baselines": torch.rand(batch, generator=gen),
        "components": {
            "acc": torch.randint(0, 2, (batch,), generator=gen).float().numpy(),
            "fmt": torch.rand(batch, generator=gen).numpy(),
        },
        "gdpo_batch": {
            "prompts": torch.zeros(batch, 3, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(batch, 3, dtype=torch.long), response_attention], -1),
        },
    }


# ---------------------------------------------------------------------------- the cases
def _config(**values: Any):
    return OmegaConf.create({"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True, **values})


def estimator_calls(x: dict) -> dict[str, tuple[str, dict]]:
    """label -> (registry name, keyword arguments as verl 0.9's compute_advantage builds them)."""
    base = {"token_level_rewards": x["token_level_rewards"], "response_mask": x["response_mask"]}
    grouped = {**base, "index": x["index"], "config": _config()}
    otb = {**grouped, "old_log_probs": x["old_log_probs"], "sum_pi_squared": x["sum_pi_squared"]}
    gdpo_config = _config(gdpo_reward_keys=["acc", "fmt"], gdpo_reward_weights=[1.0, 0.5])
    calls = {
        name: (name, grouped)
        for name in (
            "grpo",
            "grpo_vectorized",
            "rloo",
            "rloo_vectorized",
            "opo",
            "gpg",
            "grpo_passk",
            "reinforce_plus_plus_baseline",
        )
    }
    calls["grpo (Dr.GRPO, no std)"] = ("grpo", {**grouped, "norm_adv_by_std_in_grpo": False})
    calls["reinforce_plus_plus γ=1"] = ("reinforce_plus_plus", {**base, "config": _config()})
    calls["reinforce_plus_plus γ=0.9"] = ("reinforce_plus_plus", {**base, "config": _config(gamma=0.9)})
    calls["remax"] = ("remax", {**base, "reward_baselines": x["reward_baselines"], "config": _config()})
    calls["gae γ=0.9 λ=0.8"] = ("gae", {**base, "values": x["values"], "gamma": 0.9, "lam": 0.8})
    calls["gdpo (components)"] = (
        "gdpo",
        {**grouped, "config": gdpo_config, "non_tensor_batch": x["components"], "batch": x["gdpo_batch"]},
    )
    calls["gdpo (sequence score)"] = ("gdpo", grouped)
    for name in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        calls[name] = (name, otb)
        calls[f"{name} +IS weights"] = (name, {**otb, "rollout_is_weights": x["rollout_is_weights"]})
        calls[f"{name} no zero tail"] = (name, {**otb, "handle_zero_tail": False})
    return calls


def _cloned(kwargs: dict) -> dict:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


def _run(fn, kwargs: dict):
    try:
        return fn(**_cloned(kwargs)), None
    except Exception as exc:  # noqa: BLE001 - the comparison records who raised what
        return None, type(exc).__name__


def compare(verl_fn, ours_fn, kwargs: dict) -> float | str:
    """max |Δ| over advantages and returns; 'both raise X' when both refuse the input."""
    verl_out, verl_err = _run(verl_fn, kwargs)
    ours_out, ours_err = _run(ours_fn, kwargs)
    if verl_err or ours_err:
        return f"both raise {verl_err}" if verl_err and ours_err else f"verl: {verl_err}, hybridrl: {ours_err}"
    diffs = [(a.double() - b.double()).abs().max().item() for a, b in zip(verl_out, ours_out)]
    return max(diffs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR)
    parser.add_argument("--tag", default="v0.9.0")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    if not args.mirror.exists():
        print(json.dumps({"skipped": f"no verl mirror at {args.mirror}"}))
        return
    verl = load_verl_core_algos(args.mirror, args.tag)
    from hybridrl.trainer.ppo import core_algos as ours

    table: dict[str, dict[str, Any]] = {}
    for mask_kind in MASKS:
        for size in GROUP_SIZES:
            column = f"{mask_kind}/n={size}"
            for seed in range(args.seeds):
                for label, (name, kwargs) in estimator_calls(random_inputs(seed, size, mask_kind)).items():
                    result = compare(verl.get_adv_estimator_fn(name), ours.get_adv_estimator_fn(name), kwargs)
                    previous = table.setdefault(label, {}).get(column)
                    if isinstance(result, float) and isinstance(previous, float):
                        result = max(result, previous)
                    table[label][column] = result if isinstance(result, str) or not math.isnan(result) else "nan"
    worst = max((v for row in table.values() for v in row.values() if isinstance(v, float)), default=0.0)
    enum_equal = [m.value for m in verl.AdvantageEstimator] == [m.value for m in ours.AdvantageEstimator]
    print(
        json.dumps(
            {
                "verl": args.tag,
                "seeds": args.seeds,
                "same_enum_values_and_order": enum_equal,
                "max_abs_diff_overall": worst,
                "max_abs_diff": table,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

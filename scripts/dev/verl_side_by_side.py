"""Side by side with verl v0.9.0: loss aggregation, value loss and every policy loss on the same random inputs.

Loads ``verl/trainer/ppo/core_algos.py`` of verl v0.9.0 from the bare git mirror into a temporary package (its
own ``torch_functional`` helpers are taken from the mirror too, function by function; the config classes and
utilities it imports but these functions do not need are small stubs), then runs both implementations on the
same inputs for every ``loss_agg_mode``, local and global normalisation, with and without rollout IS weights,
and prints a JSON table of the largest absolute differences of the loss, its gradient w.r.t. ``log_prob`` and
the metrics (plus the metric names either side reports that the other does not).

    python scripts/dev/verl_side_by_side.py [--mirror /work/.mirror/verl-project+verl/repo] [--tag v0.9.0]

Exit status 1 when any difference exceeds ``--atol`` (default 1e-6) or a metric name differs. A dev tool, not a
test: the suite does not depend on the mirror.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import torch

DEFAULT_MIRROR = "/work/.mirror/verl-project+verl/repo"
_TF_FUNCTIONS = ("masked_sum", "masked_mean", "clip_by_value", "entropy_from_logits")
MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
LOSSES = ("vanilla", "gspo", "sapo", "gpg", "clip_cov", "kl_cov", "geo_mean", "cispo", "dppo_tv", "dppo_kl", "dro")
# global normalisation of the inputs below (8 rows, 2 ranks): N and G over both ranks; C for the -norm mode
GLOBAL = {"dp_size": 2, "batch_num_tokens": 57, "global_batch_size": 16, "loss_scale_factor": 11}


# ----------------------------------------------------------------------------- loading verl from the mirror


def _git_show(mirror: str, tag: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", mirror, "show", f"{tag}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _functions_of(source: str, names: tuple[str, ...]) -> str:
    """The source of the named top-level functions of ``source`` (verl's own code, taken as it is)."""
    tree = ast.parse(source)
    return "\n\n".join(
        ast.get_source_segment(source, node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name in names
    )


class StubConfig(dict):
    """Stands in for verl's ``ActorConfig`` / ``DictConfig``: attribute and ``.get`` access over a dict."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as error:
            raise AttributeError(key) from error


def _stub_modules(tf_source: str) -> dict[str, types.ModuleType]:
    def module(name: str, **attrs: Any) -> types.ModuleType:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        return mod

    tf = module("verl.utils.torch_functional", torch=torch, F=torch.nn.functional)
    exec(compile("from typing import Optional\n" + tf_source, "verl_torch_functional", "exec"), tf.__dict__)  # noqa: S102
    unavailable = lambda *args, **kwargs: (_ for _ in ()).throw(NotImplementedError("stub"))  # noqa: E731
    return {
        "verl": module("verl"),
        "verl.utils": module("verl.utils", as_torch_index=unavailable, group_mean_std=unavailable, torch_functional=tf),
        "verl.utils.torch_functional": tf,
        "verl.utils.import_utils": module("verl.utils.import_utils", deprecated=lambda *a, **k: lambda fn: fn),
        "verl.trainer": module("verl.trainer"),
        "verl.trainer.config": module("verl.trainer.config", AlgoConfig=type("AlgoConfig", (), {})),
        "verl.workers": module("verl.workers"),
        "verl.workers.config": module("verl.workers.config", ActorConfig=StubConfig),
    }


def load_verl_core_algos(mirror: str, tag: str) -> types.ModuleType:
    """verl's ``core_algos`` of ``tag``, imported from a temporary file with the stubs above in ``sys.modules``."""
    tf_source = _functions_of(_git_show(mirror, tag, "verl/utils/torch_functional.py"), _TF_FUNCTIONS)
    sys.modules.update(_stub_modules(tf_source))
    workdir = Path(tempfile.mkdtemp(prefix="verl_core_algos_"))
    path = workdir / "verl_core_algos.py"
    path.write_text(_git_show(mirror, tag, "verl/trainer/ppo/core_algos.py"))
    spec = importlib.util.spec_from_file_location("verl_core_algos", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- inputs and comparison


def _inputs(seed: int) -> dict[str, torch.Tensor]:
    """8 rows × 7 tokens, different lengths (one row fully masked), log-probs near each other."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 1, 4, 0, 6, 3, 7, 2])
    mask = (torch.arange(7).unsqueeze(0) < lengths.unsqueeze(1)).float()
    old = -torch.rand(8, 7, generator=gen) * 2 - 0.05
    return {
        "old_log_prob": old,
        "log_prob": old + torch.randn(8, 7, generator=gen) * 0.3,
        "advantages": torch.randn(8, 7, generator=gen),
        "response_mask": mask,
        "rollout_is_weights": torch.rand(8, 7, generator=gen) * 2,
        "values": torch.randn(8, 7, generator=gen),
        "returns": torch.randn(8, 7, generator=gen),
    }


def _config(global_info: dict[str, Any]) -> dict[str, Any]:
    return {
        "clip_ratio": 0.2,
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.28,
        "clip_ratio_c": 3.0,
        "tau_pos": 1.0,
        "tau_neg": 1.05,
        "loss_scale_factor": global_info.get("loss_scale_factor"),
        "policy_loss": {
            "loss_mode": "vanilla",
            "clip_cov_ratio": 0.2,
            "clip_cov_lb": 0.0,
            "clip_cov_ub": 5.0,
            "kl_cov_ratio": 0.2,
            "ppo_kl_coef": 0.1,
            "dro_beta": 0.5,
        },
        "global_batch_info": dict(global_info),
    }


def _as_stub(config: dict[str, Any]) -> StubConfig:
    stub = StubConfig(config)
    stub["policy_loss"] = StubConfig(config["policy_loss"])
    return stub


def _run_loss(fn: Any, x: dict[str, torch.Tensor], mode: str, config: Any, weights: bool) -> tuple:
    log_prob = x["log_prob"].clone().requires_grad_(True)
    torch.manual_seed(7)  # clip_cov draws its detached tokens from the global RNG, the same way on both sides
    loss, metrics = fn(
        x["old_log_prob"],
        log_prob,
        x["advantages"],
        x["response_mask"],
        mode,
        config,
        rollout_is_weights=x["rollout_is_weights"] if weights else None,
    )
    loss.backward()
    return loss.detach(), log_prob.grad, {key: float(value) for key, value in metrics.items()}


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a − b|; NaN on both sides counts as equal, NaN on one side as infinitely far."""
    both_nan = torch.isnan(a) & torch.isnan(b)
    diff = torch.where(both_nan, torch.zeros_like(a), (a - b).abs())
    return float(torch.nan_to_num(diff, nan=float("inf")).max())


def compare_losses(verl: types.ModuleType, seeds: range) -> list[dict[str, Any]]:
    from hybridrl.trainer.ppo import core_algos as ours

    rows = []
    for name in LOSSES:
        for mode in MODES:
            for scope, info in (("local", {}), ("global", GLOBAL)):
                for weights in (False, True):
                    worst = {"loss": 0.0, "grad": 0.0, "metrics": 0.0}
                    names_differ: set[str] = set()
                    for seed in seeds:
                        x = _inputs(seed)
                        ref = _run_loss(verl.get_policy_loss_fn(name), x, mode, _as_stub(_config(info)), weights)
                        got = _run_loss(ours.get_policy_loss_fn(name), x, mode, _config(info), weights)
                        worst["loss"] = max(worst["loss"], _diff(ref[0], got[0]))
                        worst["grad"] = max(worst["grad"], _diff(ref[1], got[1]))
                        names_differ |= set(ref[2]) ^ set(got[2])
                        for key in set(ref[2]) & set(got[2]):
                            worst["metrics"] = max(worst["metrics"], abs(ref[2][key] - got[2][key]))
                    rows.append(
                        {
                            "what": f"policy_loss:{name}",
                            "loss_agg_mode": mode,
                            "normalisation": scope,
                            "is_weights": weights,
                            **worst,
                            "metric_names_differ": sorted(names_differ),
                        }
                    )
    return rows


def compare_aggregation(verl: types.ModuleType, seeds: range) -> list[dict[str, Any]]:
    from hybridrl.trainer.ppo import core_algos as ours

    rows = []
    for mode in MODES:
        for scope, info in (("local", {}), ("global", GLOBAL)):
            worst = {"agg_loss": 0.0, "value_loss": 0.0, "vf_clipfrac": 0.0}
            for seed in seeds:
                x = _inputs(seed)
                loss_mat = x["log_prob"] * x["advantages"]
                worst["agg_loss"] = max(
                    worst["agg_loss"],
                    _diff(
                        verl.agg_loss(loss_mat, x["response_mask"], mode, **info),
                        ours.agg_loss(loss_mat, x["response_mask"], mode, **info),
                    ),
                )
                args = (x["values"] + 0.3, x["returns"], x["values"], x["response_mask"], 0.2, mode)
                ref_vf, ref_clip = verl.compute_value_loss(*args, **info)
                got_vf, got_clip = ours.compute_value_loss(*args, **info)
                worst["value_loss"] = max(worst["value_loss"], _diff(ref_vf, got_vf))
                worst["vf_clipfrac"] = max(worst["vf_clipfrac"], _diff(ref_clip, got_clip))
            rows.append({"what": "agg_loss+compute_value_loss", "loss_agg_mode": mode, "normalisation": scope, **worst})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", default=DEFAULT_MIRROR)
    parser.add_argument("--tag", default="v0.9.0")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--atol", type=float, default=1e-6)
    args = parser.parse_args()
    if not Path(args.mirror).exists():
        print(json.dumps({"skipped": f"no verl mirror at {args.mirror}"}))
        return 0
    verl = load_verl_core_algos(args.mirror, args.tag)
    seeds = range(args.seeds)
    rows = compare_aggregation(verl, seeds) + compare_losses(verl, seeds)
    numeric = ("agg_loss", "value_loss", "vf_clipfrac", "loss", "grad", "metrics")
    worst = max(row.get(key, 0.0) for row in rows for key in numeric)
    mismatched = [row for row in rows if row.get("metric_names_differ")]
    print(
        json.dumps(
            {
                "verl": args.tag,
                "cases": len(rows),
                "seeds": args.seeds,
                "max_abs_diff": worst,
                "metric_name_mismatches": len(mismatched),
                "rows": rows,
            },
            indent=1,
        )
    )
    return 0 if worst <= args.atol and not mismatched else 1


if __name__ == "__main__":
    sys.exit(main())

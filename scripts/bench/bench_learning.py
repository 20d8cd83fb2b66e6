"""Learning runs: each RL path trained long enough to show that it learns; the figures print as JSON.

CI asserts the mechanics of these paths in a few steps (tests/README.md, "Learning runs"). Whether the model
learns takes 10-25 steps per run, minutes each on 2 cores, so it is measured here, on the same scripts, seeds and
margins the CI tests asserted before they were cut to smoke runs:

    run                      what runs                                        learned when
    recipe:<name>            recipes/<name>/run_*_cpu.sh, 15 seeded steps,    greedy held-out reward +0.5 (step 0 → 15)
      (drgrpo, rloo,           64 one-digit additions, the digit-share         and sampled training reward +0.025
      reinforce_pp[_baseline],  reward (the CI smoke's recipe checks apply     (mean of steps 1–3 → 13–15)
      gspo, gpg, pf_ppo)        to all 15 steps too)
    estimator:<name>         the rloo recipe with verl 0.9's estimator <name>  as the recipes (no recipe checks)
      (grpo_vectorized,        swapped in (gdpo: the digit reward's score and
      rloo_vectorized, gdpo)   acc components)
    tiny_pipeline:grpo       examples/tiny_pipeline, seed 1: 150 SFT steps,   SFT leaves 0.15–0.7 accuracy;
                             then 25 GRPO steps                               accuracy +0.1 after GRPO
    tiny_pipeline:remax      the same SFT export, 25 ReMax steps              accuracy +0.1; training score +0.1
                                                                              (steps 1–3 → 23–25)
    rollout_correction       3 GRPO runs × 10 steps, seed 2: on-policy, a     on-policy − uncorrected ≥ 0.1 and
                             2-version-stale rollout, stale + token TIS        |on-policy − corrected| ≤ 0.08
                                                                              (sampled val reward at step 10)
    online_dpo               the online-DPO recipe, 14 steps, digit-share     score +0.08, reward accuracy > 0.7,
                             reward (8 prompts × 8 samples)                   margin > 0.2 and +0.1 (steps 1–4 → 11–14)
    lora_grpo                GRPO with rank-8 adapters on the tiny Llama,     digit reward +0.1 (steps 1–4 → 11–14)
                             14 steps

    python scripts/bench/bench_learning.py                              # every run (~40 min on 2 quiet cores)
    python scripts/bench/bench_learning.py --runs recipes --out learning.json
    python scripts/bench/bench_learning.py --runs estimators
    python scripts/bench/bench_learning.py --runs recipe:gspo,tiny_pipeline:remax

Prints one JSON object ({"runs": [...]}, each run's figures, margins, ``learned`` and wall seconds) and exits 1 when
a run misses its margin. The runs reuse the CI tests' helpers (tests/recipes/cli.py, tests/trainer/e2e.py, the
perturbed rollout engines of tests/trainer/), so run it from the repository root.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hybridrl_runs import load_script  # noqa: E402  (scripts/bench/, on sys.path as the script's folder)

from tests.recipes.cli import run_recipe_script  # noqa: E402
from tests.recipes.test_rl_recipes_e2e_on_cpu import RECIPES, SEEDED, training_steps  # noqa: E402
from tests.trainer.e2e import failure_report, read_metrics  # noqa: E402

# ---------------------------------------------------------------------------- recipes

RECIPE_STEPS = 15
RECIPE_VAL_REWARD = "val-aux/arithmetic/reward/mean@1"
RECIPE_VAL_MARGIN = 0.5  # measured: 0.0 at step 0, 1.0 at step 15 in every recipe; with optim.lr=0 it stays 0.0
SCORE = "critic/score/mean"
RECIPE_SCORE_MARGIN = 0.025  # measured +0.051 (GSPO) to +0.089 (REINFORCE++); -0.003 with optim.lr=0
SCORE_WINDOW = 3


def window_gain(scores: list[float], window: int) -> tuple[float, float]:
    """Mean of the first ``window`` values and of the last ``window``."""
    return sum(scores[:window]) / window, sum(scores[-window:]) / window


def recipe_data(work: Path) -> str:
    """64 train / 8 test one-digit additions (tests/recipes/conftest.py's recipe_data_dir)."""
    out = work / "recipe_arithmetic"
    if not (out / "train.parquet").is_file():
        script = ROOT / "examples" / "data_preprocess" / "arithmetic.py"
        subprocess.run(
            [
                sys.executable,
                str(script),
                "--local_dir",
                str(out),
                "--train_size",
                "64",
                "--test_size",
                "8",
                "--digits",
                "1",
                "--operators",
                "+",
            ],
            check=True,
            capture_output=True,
        )
    return str(out)


def tiny_model(work: Path) -> str:
    """The tests' tiny tied Qwen2 (tests/conftest.py's tiny_model_dir)."""
    from hybridrl.models.tiny import build_tiny_model

    out = work / "tiny_qwen2"
    return str(out if (out / "config.json").is_file() else build_tiny_model(out))


# verl 0.9's estimators, on the RLOO recipe's script (critic-free, rollout.n=4, KL in the reward) with the estimator
# swapped; the recipes' margins. gdpo normalises the digit reward's two components (score, acc) one by one. The
# optimal-token-baseline pair (with actor_rollout_ref.actor.calculate_sum_pi_squared=True, which makes the actor's
# log-prob pass return Σπ²) is not measured here yet.
ESTIMATOR_OVERRIDES = {
    "grpo_vectorized": ["algorithm.adv_estimator=grpo_vectorized"],
    "rloo_vectorized": ["algorithm.adv_estimator=rloo_vectorized"],
    "gdpo": ["algorithm.adv_estimator=gdpo", "algorithm.gdpo_reward_keys=[score,acc]"],
}


def run_estimator(name: str, work: Path) -> dict[str, Any]:
    script, _ = RECIPES["rloo"]
    return run_recipe(f"estimator_{name}", work, (script, lambda steps, vocab_size: None), ESTIMATOR_OVERRIDES[name])


def run_recipe(
    name: str, work: Path, script_and_check: tuple[str, Callable] | None = None, overrides: list[str] = ()
) -> dict[str, Any]:
    script, check_recipe = script_and_check or RECIPES[name]
    model_dir = tiny_model(work)
    run_dir = work / f"recipe_{name}"
    run_dir.mkdir(parents=True, exist_ok=True)
    proc, metrics_file = run_recipe_script(
        script,
        model_dir,
        recipe_data(work),
        run_dir,
        f"trainer.total_training_steps={RECIPE_STEPS}",
        "trainer.test_freq=5",
        *SEEDED,
        *overrides,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(failure_report(proc))
    metrics = read_metrics(str(metrics_file))
    steps = training_steps(metrics, RECIPE_STEPS)
    vocab_size = json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"]
    try:
        check_recipe(steps, vocab_size)
        evidence = "ok"
    except AssertionError as error:
        evidence = f"failed: {error}"
    val_start, val_end = metrics[0][RECIPE_VAL_REWARD], metrics[RECIPE_STEPS][RECIPE_VAL_REWARD]
    score_first, score_last = window_gain([s[SCORE] for s in steps], SCORE_WINDOW)
    return {
        "figures": {
            "val_reward_step_0": val_start,
            f"val_reward_step_{RECIPE_STEPS}": val_end,
            "score_steps_1_3": score_first,
            f"score_steps_{RECIPE_STEPS - 2}_{RECIPE_STEPS}": score_last,
            "recipe_checks": evidence,
        },
        "margins": {"val_reward": RECIPE_VAL_MARGIN, "score": RECIPE_SCORE_MARGIN},
        "learned": val_end >= val_start + RECIPE_VAL_MARGIN
        and score_last >= score_first + RECIPE_SCORE_MARGIN
        and evidence == "ok",
    }


# ---------------------------------------------------------------------------- tiny pipeline

PIPELINE = ROOT / "examples" / "tiny_pipeline" / "tiny_pipeline.py"
PIPELINE_SEED = 1
PIPELINE_MIN_GAIN = 0.1  # measured seed 1: GRPO 0.230 → 0.438, ReMax 0.230 → 0.414 (training score 0.263 → 0.430)
SFT_ACCURACY_RANGE = (0.15, 0.7)  # the warm start leaves partial accuracy: room for RL to add


def run_tiny_pipeline(adv_estimator: str, work: Path) -> dict[str, Any]:
    """The pipeline driver with its defaults; the SFT checkpoint in ``work`` is reused by the second estimator."""
    pipeline = load_script("tiny_pipeline", PIPELINE)
    work_dir = work / "tiny_pipeline"
    args = pipeline.parse_args(
        ["--work_dir", str(work_dir), "--seed", str(PIPELINE_SEED), "--adv_estimator", adv_estimator]
    )
    summary = pipeline.run_pipeline(args)
    before, after = summary["val_accuracy_before_grpo"], summary["val_accuracy_after_grpo"]
    metrics = read_metrics(str(work_dir / "grpo_metrics.jsonl"))
    steps = [metrics[step] for step in sorted(metrics) if step >= 1]
    score_first, score_last = window_gain([s[SCORE] for s in steps], SCORE_WINDOW)
    learned = SFT_ACCURACY_RANGE[0] <= before <= SFT_ACCURACY_RANGE[1] and after >= before + PIPELINE_MIN_GAIN
    if adv_estimator == "remax":
        learned = learned and score_last >= score_first + PIPELINE_MIN_GAIN
    return {
        "figures": {
            "val_accuracy_before": before,
            "val_accuracy_after": after,
            "score_steps_1_3": score_first,
            f"score_steps_{len(steps) - 2}_{len(steps)}": score_last,
            "rl_steps": len(steps),
        },
        "margins": {"accuracy_gain": PIPELINE_MIN_GAIN, "sft_accuracy_range": SFT_ACCURACY_RANGE},
        "learned": learned,
    }


# ---------------------------------------------------------------------------- rollout correction

CORRECTION_STEPS = 10
UNCORRECTED_MIN_GAP = 0.1  # measured on-policy − uncorrected val reward at step 10: 0.944 − 0.751 = 0.193
CORRECTED_MAX_GAP = 0.08  # measured |on-policy − corrected|: |0.944 − 0.896| = 0.048


def run_rollout_correction(work: Path) -> dict[str, Any]:
    from tests.trainer import test_rollout_correction_e2e_on_cpu as rc

    data_dir = rc.make_digit_task_data(work / "digit_task")
    run_dir = work / "rollout_correction"
    run_dir.mkdir(parents=True, exist_ok=True)
    common = rc.stale_rollout_overrides(CORRECTION_STEPS)
    variants = {
        "on_policy": {rc.STALENESS: 0},
        "stale_uncorrected": {rc.STALENESS: rc.STALENESS_VERSIONS},
        "stale_corrected": {rc.STALENESS: rc.STALENESS_VERSIONS, **rc.CORRECTION},
    }
    runs = {
        name: rc.run_grpo(name, tiny_model(work), data_dir, run_dir, CORRECTION_STEPS, **{**common, **overrides})
        for name, overrides in variants.items()
    }
    reward = {name: metrics[CORRECTION_STEPS][rc.VAL_REWARD] for name, metrics in runs.items()}
    stale_kl = runs["stale_corrected"][CORRECTION_STEPS]["rollout_corr/kl"]
    return {
        "figures": {**{f"val_reward_{name}": value for name, value in reward.items()}, "stale_corrected_kl": stale_kl},
        "margins": {"uncorrected_min_gap": UNCORRECTED_MIN_GAP, "corrected_max_gap": CORRECTED_MAX_GAP},
        "learned": reward["on_policy"] - reward["stale_uncorrected"] >= UNCORRECTED_MIN_GAP
        and abs(reward["on_policy"] - reward["stale_corrected"]) <= CORRECTED_MAX_GAP
        and stale_kl > 0.05,
    }


# ---------------------------------------------------------------------------- online DPO, LoRA GRPO

DPO_STEPS = 14
DPO_WINDOW = 4


def arithmetic_data(out: Path, train_size: int, test_size: int) -> Path:
    """One-digit additions in verl's parquet schema (the tests' data fixtures)."""
    if not (out / "train.parquet").is_file():
        script = ROOT / "examples" / "data_preprocess" / "arithmetic.py"
        subprocess.run(
            [sys.executable, str(script), "--local_dir", str(out), "--train_size", str(train_size)]
            + ["--test_size", str(test_size), "--digits", "1", "--operators", "+"],
            check=True,
            capture_output=True,
        )
    return out


def run_online_dpo(work: Path) -> dict[str, Any]:
    """tests/recipes/test_dpo_recipes_e2e_on_cpu.py's data (16/8 additions with SPIN's SFT response column)."""
    from tests.recipes.cli import RECIPES as RECIPES_DIR
    from tests.recipes.dpo_e2e import ASSETS, dpo_args, run_recipe

    plain = arithmetic_data(work / "arithmetic_16", 16, 8)
    spin = work / "arithmetic_spin"
    if not (spin / "train.parquet").is_file():
        subprocess.run(
            [sys.executable, str(RECIPES_DIR / "spin" / "add_sft_response.py"), "--input", str(plain)]
            + ["--output", str(spin), "--source", "reward_model.ground_truth"],
            check=True,
            capture_output=True,
        )
    run_dir = work / "online_dpo"
    overrides = {
        "custom_reward_function.path": ASSETS / "dpo_digit_reward.py",
        "actor_rollout_ref.rollout.n": 8,
        "actor_rollout_ref.actor.ppo_epochs": 2,
        "actor_rollout_ref.actor.optim.lr": 2e-3,
        "algorithm.dpo.beta": 0.1,
        "trainer.total_epochs": 10,
        "trainer.total_training_steps": DPO_STEPS,
    }
    args = dpo_args(tiny_model(work), str(spin), str(run_dir / "ckpt"), **overrides)
    metrics_file = str(run_dir / "metrics.jsonl")
    run_dir.mkdir(parents=True, exist_ok=True)
    proc = run_recipe("hybridrl.recipes.online_dpo.main_online_dpo", args, metrics_file, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(failure_report(proc))
    steps = training_steps(read_metrics(metrics_file), DPO_STEPS)
    figures = {}
    for name in ("critic/score/mean", "actor/reward_accuracy", "actor/reward_margin"):
        figures[f"{name} steps 1-4"], figures[f"{name} steps 11-14"] = window_gain([s[name] for s in steps], DPO_WINDOW)
    # measured (steps 1–4 → 11–14): score 0.20 → 0.39, accuracy 0.67 → 0.89, margin 0.10 → 0.39; thresholds keep
    # about half of the smallest gain over seeds
    learned = (
        figures["critic/score/mean steps 11-14"] > figures["critic/score/mean steps 1-4"] + 0.08
        and figures["actor/reward_accuracy steps 11-14"] > 0.7
        and figures["actor/reward_margin steps 11-14"] > 0.2
        and figures["actor/reward_margin steps 11-14"] > figures["actor/reward_margin steps 1-4"] + 0.1
    )
    return {
        "figures": figures,
        "margins": {"score": 0.08, "accuracy": 0.7, "margin": 0.2, "margin_gain": 0.1},
        "learned": learned,
    }


LORA_STEPS = 14
LORA_WINDOW = 4
LORA_SCORE_MARGIN = 0.1


def run_lora_grpo(work: Path) -> dict[str, Any]:
    from hybridrl.models.tiny import TinyModelSpec, build_tiny_model
    from tests.trainer.e2e import run_main_ppo
    from tests.workers.engine.test_lora_grpo_e2e_on_cpu import lora_grpo_args

    llama = work / "tiny_llama"
    if not (llama / "config.json").is_file():
        build_tiny_model(llama, TinyModelSpec(arch="llama", tie_word_embeddings=False))
    run_dir = work / "lora_grpo"
    run_dir.mkdir(parents=True, exist_ok=True)
    data_dir = arithmetic_data(work / "arithmetic_16", 16, 8)
    metrics_file = str(run_dir / "metrics.jsonl")
    proc = run_main_ppo(lora_grpo_args(str(llama), str(data_dir), run_dir, LORA_STEPS), metrics_file, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(failure_report(proc))
    scores = [s[SCORE] for s in training_steps(read_metrics(metrics_file), LORA_STEPS)]
    first, last = window_gain(scores, LORA_WINDOW)
    return {
        "figures": {"score_steps_1_4": first, "score_steps_11_14": last},
        "margins": {"score": LORA_SCORE_MARGIN},
        "learned": last > first + LORA_SCORE_MARGIN,
    }


# ---------------------------------------------------------------------------- driver

RUNS: dict[str, Callable[[Path], dict[str, Any]]] = {
    **{f"recipe:{name}": (lambda work, name=name: run_recipe(name, work)) for name in RECIPES},
    **{f"estimator:{name}": (lambda work, name=name: run_estimator(name, work)) for name in ESTIMATOR_OVERRIDES},
    "tiny_pipeline:grpo": lambda work: run_tiny_pipeline("grpo", work),
    "tiny_pipeline:remax": lambda work: run_tiny_pipeline("remax", work),
    "rollout_correction": run_rollout_correction,
    "online_dpo": run_online_dpo,
    "lora_grpo": run_lora_grpo,
}
GROUPS = {"recipes": "recipe:", "estimators": "estimator:", "tiny_pipeline": "tiny_pipeline:"}


def select_runs(spec: str) -> list[str]:
    """``all``, group names (``recipes``, ``estimators``, ``tiny_pipeline``) and run names, comma-separated, in RUNS order."""
    wanted = set()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        if item == "all":
            wanted |= set(RUNS)
        elif item in GROUPS:
            wanted |= {name for name in RUNS if name.startswith(GROUPS[item])}
        elif item in RUNS:
            wanted.add(item)
        else:
            raise SystemExit(f"unknown run {item!r}: use all, {', '.join(GROUPS)} or one of {', '.join(RUNS)}")
    return [name for name in RUNS if name in wanted]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="all", help="comma-separated runs or groups (default: all)")
    parser.add_argument("--work-dir", default=None, help="where models, data and run folders go (default: a temp dir)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    names = select_runs(args.runs)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench_learning_")).resolve()
    results = []
    for name in names:
        start = time.time()
        print(f"[bench_learning] {name} ...", file=sys.stderr, flush=True)
        result = {"run": name, **RUNS[name](work), "seconds": round(time.time() - start, 1)}
        print(f"[bench_learning] {name}: learned={result['learned']} ({result['seconds']} s)", file=sys.stderr)
        results.append(result)
    report = {"benchmark": "learning", "machine": platform.platform(), "work_dir": str(work), "runs": results}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0 if all(result["learned"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Print the batch plan of a PPO command line without starting anything.

    python -m hybridrl.config.plan [--dataset-len N] key=value ...
    hybridrl-plan data.train_batch_size=64 actor_rollout_ref.rollout.n=8 ...

Takes the same overrides as ``python -m hybridrl.trainer.main_ppo``; exits 1 (after printing the plan
when it can be computed) if the batch settings do not validate.
"""

from __future__ import annotations

import argparse
import sys

from hybridrl.config.batch_plan import compute_batch_plan
from hybridrl.config.entry import compose_config
from hybridrl.config.errors import ConfigError
from hybridrl.config.plan_table import format_batch_plan
from hybridrl.config.validate import collect_problems


def main(argv: list[str] | None = None) -> int:
    """CLI: compose the PPO config with the overrides, print its batch plan, report batch problems."""
    parser = argparse.ArgumentParser(
        prog="hybridrl-plan", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset-len", type=int, default=None, help="training rows after overlong filtering")
    parser.add_argument("--config-name", default="ppo_trainer")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for main_ppo")
    args = parser.parse_intermixed_args(sys.argv[1:] if argv is None else argv)
    try:
        config = compose_config(args.config_name, args.overrides)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 1
    problems = collect_problems(config, check_env=False)
    try:
        print(format_batch_plan(compute_batch_plan(config, args.dataset_len)))
    except (TypeError, ValueError, ZeroDivisionError):
        print("(the plan cannot be computed until the problems below are fixed)")
    if problems:
        print(ConfigError(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Algorithm recipes (verl's ``recipe/``): one folder per algorithm with its config, run scripts and README.

Config-only recipes (Dr.GRPO, RLOO, ReMax, REINFORCE++, GSPO, GPG, PF-PPO) are a Hydra config under
``<name>/config/`` for ``hybridrl.trainer.main_ppo``; dapo, online_dpo and spin add code (trainer parts and an
entry point). Run scripts: ``bash hybridrl/recipes/<name>/run_<name>_cpu.sh``; index in ``README.md`` here.
"""

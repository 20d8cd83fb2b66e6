"""Algorithm recipes that need code beyond configuration (verl's ``recipe/``): trainer subclasses and entry points.

Config-only recipes (Dr.GRPO, RLOO, ReMax, REINFORCE++, GSPO, GPG, PF-PPO) live in the top-level ``recipes/``
folder as Hydra configs for ``hybridrl.trainer.main_ppo``; see ``recipes/README.md``.
"""

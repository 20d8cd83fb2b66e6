"""DAPO (Yu et al. 2025, arXiv 2503.14476): dynamic sampling on top of the PPO trainer.

``python -m hybridrl.recipes.dapo.main_dapo key=value ...`` runs :class:`RayDAPOTrainer`; the group filter
itself is :class:`~hybridrl.recipes.dapo.dynamic_sampling.DynamicSampler` (pure, Ray-free).
"""

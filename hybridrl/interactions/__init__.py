"""Simulated users for multi-turn rollouts (``multi_turn.interaction_config_path``), at verl's paths.

- :mod:`hybridrl.interactions.base`: :class:`BaseInteraction`.
- :mod:`hybridrl.interactions.gsm8k_interaction`: :class:`Gsm8kInteraction` (verl's example).
- :mod:`hybridrl.interactions.utils.interaction_registry`: interactions from verl's YAML.
"""

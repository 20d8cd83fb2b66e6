"""SPIN (self-play fine-tuning): DPO with the SFT target as chosen and the model's own generation as rejected.

``python -m hybridrl.recipes.spin.main_spin key=value ...`` runs
:class:`~hybridrl.recipes.spin.spin_trainer.RaySPINTrainer`, the online-DPO trainer with SPIN's pairs
(:mod:`hybridrl.recipes.spin.targets`) and ``trainer.ref_update_freq`` as the iteration length.
"""

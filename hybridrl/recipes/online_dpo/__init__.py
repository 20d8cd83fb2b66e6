"""Online DPO: sample several responses per prompt, rank them with the reward, DPO against the reference.

``python -m hybridrl.recipes.online_dpo.main_online_dpo key=value ...`` runs
:class:`~hybridrl.recipes.online_dpo.dpo_trainer.RayOnlineDPOTrainer` on
:class:`~hybridrl.recipes.online_dpo.dpo_worker.DPOActorRolloutRefWorker`; the loss family is
:mod:`hybridrl.algos.dpo_losses`; pair selection is :mod:`hybridrl.recipes.online_dpo.pairs` (pure).
"""

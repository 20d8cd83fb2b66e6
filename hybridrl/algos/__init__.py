"""The RL math of hybridrl: pure tensor functions, a leaf package.

Tensors and named hyper-parameters in, tensors or ``(loss, metrics)`` out; no config objects inside
the math, no Ray, no I/O. It imports only torch, numpy and ``hybridrl.utils.torch_functional``, and
nothing from ``hybridrl.trainer``, ``hybridrl.workers`` or ``hybridrl.single_controller`` (a test
walks the imports). Workers and the driver import it; verl's public surface over it, with the
registries and verl's config-taking signatures, is ``hybridrl.trainer.ppo.core_algos``.

Modules, by concept:
    advantages         advantage estimators (GAE, GRPO, RLOO, REINFORCE++, ReMax, OPO, GPG, pass@k)
    policy_losses      policy-gradient losses: PPO clip, GSPO, GPG, Clip-Cov, KL-Cov, GMPO, CISPO, REINFORCE
    divergence_losses  losses bounded by a divergence or a soft gate: SAPO, DPPO-TV, DPPO-KL, DRO
    policy_loss_modes  ``loss_mode`` → the bound pure loss; the verl-signature registry object; the
                       adapter for user-registered verl-style losses
    params             the config boundary: ``PolicyLossParams``, read once from the actor section
    aggregation        ``agg_loss``: per-token loss ``[B, T]`` → scalar (the five ``loss_agg_mode``), normalised by
                       the global mini-batch (``GlobalBatchInfo``), as verl 0.9
    kl                 KL estimators (k1, k2, k3, abs, straight-through) and KL-coefficient controllers
    value_loss         the critic's clipped value loss
    dpo_losses         DPO-family preference losses (sigmoid/cDPO, IPO, hinge)
    rollout_is         rollout correction: truncated / masked importance weights π_train / π_rollout
    rollout_rs         rollout correction: rejection sampling on k1/k2/k3 divergences (token, sequence)
    rollout_correction both + off-policy metrics (``rollout_corr/*``), parsed params, bypass-mode loss
"""

"""``FSDPSFTTrainer``: supervised fine-tuning of a HF causal LM with FSDP2 (or FSDP1), one process per rank.

    torchrun ─► rank r = dp_rank · sp + sp_rank (parallel.py; sp = ulysses_sequence_parallel_size)
                tokenizer, SFTDataset / MultiTurnSFTDataset ─► DistributedSampler shard of dp_rank
                model (ulysses_sdpa attention under SP) ─► apply_fsdp over all W ranks ─► AdamW + LR schedule
              fit: for each global batch (per-dp-rank batch = micro × grad_accum):
                     N = Σ_dp target tokens                       (global token count)
                     for each micro batch: backward(dp · S_m / N)  (forward.py: padded, packed or
                                                                     packed + Ulysses; scaling: loss.py)
                     clip_grad_and_step ─► lr_scheduler.step
                     every test_freq / at the end: val/loss (global token mean over the whole val set)
                     every save_freq / at the end: global_step_N checkpoint (+ HF weights at the end)

Metrics (rank 0, ``trainer.logger``): ``train/loss``, ``train/lr``, ``train/grad_norm``, ``val/loss``.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from torch import nn

from hybridrl.trainer.sft.checkpointing import resume_folder, resumed_step, save_step
from hybridrl.trainer.sft.config import plan_batches, scheduler_config
from hybridrl.trainer.sft.data import build_dataset, build_train_loader, build_val_loader
from hybridrl.trainer.sft.forward import micro_batch_loss_sum
from hybridrl.trainer.sft.loss import num_target_tokens
from hybridrl.trainer.sft.parallel import build_layout, sum_over_dp_ranks
from hybridrl.utils.config_defaults import with_defaults
from hybridrl.utils.device import current_device
from hybridrl.workers import engine
from hybridrl.workers.engine.lora import apply_lora, lora_enabled


def _split(batch: dict[str, torch.Tensor], size: int) -> list[dict[str, torch.Tensor]]:
    """Cut every ``[B, ...]`` tensor of ``batch`` into micro batches of ``size`` rows."""
    total = batch["input_ids"].shape[0]
    return [{k: v[i : i + size] for k, v in batch.items()} for i in range(0, total, size)]


class FSDPSFTTrainer:
    """Build everything from an ``sft_trainer.yaml`` config, then :meth:`fit`.

    Args:
        config: the composed ``sft_trainer`` config (validated by ``validate_sft_config``).
        device_name: ``cpu`` or ``cuda``; torch.distributed must already be initialised.
    """

    def __init__(self, config: DictConfig, device_name: str):
        config = with_defaults(config, "sft_trainer")  # a config that predates a key gets the YAML's value
        self.config, self.device_name = config, device_name
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.device = current_device()
        self.plan = plan_batches(config, self.world_size)
        self.layout = build_layout(self.plan.sp_size)
        self.use_remove_padding = bool(config.use_remove_padding)
        torch.manual_seed(int(config.trainer.seed))
        model_cfg, data_cfg = config.model, config.data
        self.tokenizer = engine.build_tokenizer(
            model_cfg.partial_pretrain,
            bool(model_cfg.trust_remote_code),
            custom_chat_template=data_cfg.get("chat_template"),
        )
        self.train_dataset = build_dataset(data_cfg.train_files, self.tokenizer, data_cfg)
        self.val_dataset = build_dataset(data_cfg.val_files, self.tokenizer, data_cfg)
        dp_rank, dp_size = self.layout.dp_rank, self.layout.dp_size  # an SP group loads the same samples
        self.train_loader = build_train_loader(
            self.train_dataset, self.plan.per_rank_batch, dp_rank, dp_size, int(config.trainer.seed)
        )
        self.val_loader = build_val_loader(self.val_dataset, self.plan.micro_batch, dp_rank, dp_size)
        self.steps_per_epoch = len(self.train_loader)
        steps = config.trainer.get("total_training_steps")
        self.total_training_steps = int(steps) if steps else self.steps_per_epoch * int(config.trainer.total_epochs)
        self.model = self._build_model()
        optim_cfg = scheduler_config(config.optim, self.total_training_steps)
        self.optimizer = engine.build_optimizer(self.model, optim_cfg)
        self.lr_scheduler = engine.build_lr_scheduler(self.optimizer, optim_cfg)
        self.checkpoint_manager = engine.FSDPCheckpointManager(
            self.model, self.optimizer, self.lr_scheduler, self.tokenizer, config.trainer.checkpoint
        )
        self.global_step = 0

    def _build_model(self) -> nn.Module:
        """Load ``model.partial_pretrain``, optional gradient checkpointing, then shard with ``model.strategy``.

        Under SP the attention is ``ulysses_sdpa`` and the wrapped model is marked with the SP group.
        """
        model_cfg, fsdp_cfg = self.config.model, self.config.model.fsdp_config
        engine.import_external_libs(model_cfg.get("external_lib"))
        module, hf_config = engine.load_hf_model(
            model_cfg.partial_pretrain,
            torch_dtype=engine.to_dtype(fsdp_cfg.model_dtype),
            trust_remote_code=bool(model_cfg.trust_remote_code),
            attn_implementation=self.layout.attention_implementation(),
        )
        hf_config.use_cache = False
        if model_cfg.enable_gradient_checkpointing:
            engine.enable_gradient_checkpointing(module)
        if lora_enabled(model_cfg):  # peft before FSDP: only the adapters train (model.lora_rank/alpha/target_modules)
            module = apply_lora(module, model_cfg)
        if self.device_name == "cuda":
            module.to(self.device)
        wrap_cfg = {"wrap_policy": {"min_num_params": int(fsdp_cfg.wrap_policy.min_num_params)}, "fsdp_size": -1}
        offload = bool(fsdp_cfg.cpu_offload and fsdp_cfg.offload_params)
        wrapped = engine.apply_fsdp(module, wrap_cfg, strategy=str(model_cfg.strategy), param_offload=offload)
        return self.layout.mark(wrapped)

    # ------------------------------------------------------------------------- steps

    def _forward_loss_sum(self, micro: dict[str, torch.Tensor]) -> torch.Tensor:
        return micro_batch_loss_sum(self.model, micro, self.use_remove_padding, self.device)

    def _sum_over_dp(self, value: torch.Tensor) -> torch.Tensor:
        return sum_over_dp_ranks(value, self.layout)

    def training_step(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One optimizer step on this dp rank's ``[per_rank_batch, T]`` share of the global batch."""
        self.model.train()
        micro_batches = _split(batch, self.plan.micro_batch)
        local_tokens = sum(num_target_tokens(m["loss_mask"]) for m in micro_batches)
        num_tokens = self._sum_over_dp(torch.as_tensor(local_tokens, dtype=torch.float32, device=self.device))
        denominator = num_tokens.clamp(min=1.0)
        loss_sum = torch.zeros((), device=self.device)
        for micro in micro_batches:
            micro_loss_sum = self._forward_loss_sum(micro)
            # dp · S_m / N: FSDP averages over W = dp · sp ranks and the SP gather's backward scales by sp,
            # so the update is ∇(Σ S / N) (loss.py)
            (micro_loss_sum * self.layout.dp_size / denominator).backward()
            loss_sum += micro_loss_sum.detach()
        grad_norm, _ = engine.clip_grad_and_step(self.model, self.optimizer, float(self.config.optim.clip_grad))
        lr = self.lr_scheduler.get_last_lr()[0]
        self.lr_scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._sum_over_dp(loss_sum) / denominator
        return {"train/loss": float(loss), "train/lr": float(lr), "train/grad_norm": float(grad_norm)}

    @torch.no_grad()
    def validation_loss(self) -> float:
        """Token-mean cross-entropy over the whole validation set (every sample once, all ranks)."""
        self.model.eval()
        loss_sum = torch.zeros((), device=self.device)
        tokens = torch.zeros((), device=self.device)
        for micro in self.val_loader:
            loss_sum += self._forward_loss_sum(micro)
            tokens += num_target_tokens(micro["loss_mask"]).to(self.device)
        self.model.train()
        return float(self._sum_over_dp(loss_sum) / self._sum_over_dp(tokens).clamp(min=1.0))

    # ------------------------------------------------------------------------- loop

    def load_checkpoint(self) -> None:
        """Resume per ``trainer.resume_mode``: model, optimizer, LR schedule, RNG and the step count."""
        folder = resume_folder(self.config.trainer)
        if folder is not None:
            self.checkpoint_manager.load_checkpoint(folder)
            if self.rank == 0:
                print(f"[sft] resumed from {folder}", flush=True)
        self.global_step = resumed_step(folder)

    def save_checkpoint(self, final: bool) -> str:
        """Write ``global_step_N`` (with the HF weights when ``final``)."""
        trainer_cfg = self.config.trainer
        return save_step(
            self.checkpoint_manager,
            str(trainer_cfg.default_local_dir),
            self.global_step,
            trainer_cfg.get("max_ckpt_to_keep"),
            with_hf_weights=final,
        )

    def _batches(self) -> Any:
        """Global batches from ``self.global_step`` on, across epochs (deterministic per epoch)."""
        epoch, skip = divmod(self.global_step, self.steps_per_epoch)
        while True:
            self.train_loader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
            yield from itertools.islice(self.train_loader, skip, None)
            epoch, skip = epoch + 1, 0

    def _due(self, freq: int, last: bool) -> bool:
        return last or (freq > 0 and self.global_step % freq == 0)

    def fit(self, tracking: Any = None) -> dict[str, float]:
        """Train to ``total_training_steps``; returns the last step's metrics. ``tracking`` logs on rank 0."""
        self.load_checkpoint()
        metrics: dict[str, float] = {}
        trainer_cfg = self.config.trainer
        for batch in self._batches():
            if self.global_step >= self.total_training_steps:
                break
            self.global_step += 1
            last = self.global_step >= self.total_training_steps
            metrics = self.training_step(batch)
            if self._due(int(trainer_cfg.test_freq), last):
                metrics["val/loss"] = self.validation_loss()
            if tracking is not None:
                tracking.log(metrics, step=self.global_step)
            if self._due(int(trainer_cfg.save_freq), last):
                self.save_checkpoint(final=last)
        return metrics


def config_as_dict(config: DictConfig) -> dict[str, Any]:
    """The resolved config as plain dicts (for the trackers)."""
    plain = OmegaConf.to_container(config, resolve=True)
    assert isinstance(plain, dict)
    return {str(k): v for k, v in plain.items()}

"""Supervised fine-tuning entry point, launched like verl's:

    torchrun --standalone --nproc_per_node=2 -m hybridrl.trainer.fsdp_sft_trainer \
        data.train_files=... data.val_files=... model.partial_pretrain=<hf folder> trainer.device=cpu ...

    command line ──► override keys checked (unknown key -> closest valid key)
                 ──► Hydra composes configs/sft_trainer.yaml ──► validate_sft_config (every problem at once)
                 ──► init_distributed (gloo on CPU, nccl on CUDA) ──► FSDPSFTTrainer.fit ──► clean teardown

Sequence parallelism as in verl: ``use_remove_padding=True ulysses_sequence_parallel_size=2`` (groups of 2 ranks
share each micro batch; batch sizes count data-parallel ranks, world / 2).

The final checkpoint ``{trainer.default_local_dir}/global_step_N/huggingface`` is a plain HF folder:
start GRPO/PPO from it with ``actor_rollout_ref.model.path=<that folder>``.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig

from hybridrl.config import hydra_entry
from hybridrl.trainer.sft.config import validate_sft_config


def run_sft(config: DictConfig) -> dict[str, float]:
    """Train on the current torch.distributed group (joined here from torchrun's env); returns the last metrics."""
    from hybridrl.trainer.sft.teardown import clean_exit_process_group, release
    from hybridrl.trainer.sft.trainer import FSDPSFTTrainer, config_as_dict
    from hybridrl.utils.device import DEVICE_ENV_VAR
    from hybridrl.utils.distributed import init_distributed
    from hybridrl.utils.tracking import Tracking

    device_name = str(config.trainer.device)
    os.environ[DEVICE_ENV_VAR] = device_name  # hybridrl.utils.device follows trainer.device
    init_distributed(device_name)
    tracking, trainer, finished = None, None, False
    try:
        trainer = FSDPSFTTrainer(config, device_name)
        if trainer.rank == 0:
            tracking = Tracking(
                str(config.trainer.project_name),
                str(config.trainer.experiment_name),
                default_backend=list(config.trainer.logger),
                config=config_as_dict(config),
            )
            print(
                f"[sft] {trainer.plan} steps/epoch={trainer.steps_per_epoch} "
                f"total_training_steps={trainer.total_training_steps}",
                flush=True,
            )
        metrics = trainer.fit(tracking)
        finished = True
        return metrics
    finally:
        if tracking is not None:
            tracking.finish()
        release(trainer)
        # after a failure another rank may be stuck in a collective: no barrier (torchrun stops the others)
        clean_exit_process_group(barrier=finished)


_command_line = hydra_entry("sft_trainer", run_sft, check=validate_sft_config, override_keys="sft_trainer")


def main() -> None:
    """Command-line entry: check the overrides, compose, validate, train, exit 0 (see ``sft/teardown.py``)."""
    from hybridrl.trainer.sft.teardown import exit_now

    try:
        _command_line()
    except SystemExit as stop:  # a ConfigError, or an exception Hydra reports from the run: SystemExit(1)
        exit_now(stop.code if isinstance(stop.code, int) else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        exit_now(1)
    exit_now(0)


if __name__ == "__main__":
    main()

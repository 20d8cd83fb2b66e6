"""Supervised fine-tuning (``python -m hybridrl.trainer.fsdp_sft_trainer``): config checks, data, loss, loop."""

"""verl 0.9's FSDP-side top-k distillation loss (``verl.trainer.distillation.fsdp``)."""

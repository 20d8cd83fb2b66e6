"""On-policy distillation (verl 0.9's ``verl.trainer.distillation``): losses, teachers and the trainer stage."""

from hybridrl.trainer.distillation.losses import *  # noqa: F401,F403  (verl re-exports its losses here)

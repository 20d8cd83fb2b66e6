"""verl's typed trainer configs at ``hybridrl.trainer.config`` (verl: ``verl.trainer.config``); defaults from the
shipped YAML (:mod:`hybridrl.base_config`)."""

from hybridrl.trainer.config import algorithm, config
from hybridrl.trainer.config.algorithm import *  # noqa: F403
from hybridrl.trainer.config.config import *  # noqa: F403

__all__ = config.__all__ + algorithm.__all__

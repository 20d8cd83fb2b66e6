"""verl's typed worker configs at ``hybridrl.workers.config`` (verl: ``verl.workers.config``).

Each class reads its defaults from the shipped YAML (:mod:`hybridrl.base_config`); build one directly
(``FSDPActorConfig(ppo_micro_batch_size_per_gpu=4)``) or from a config section with
:func:`hybridrl.utils.config.omega_conf_to_dataclass`.
"""

from hybridrl.workers.config import actor, checkpoint, critic, engine, model, optimizer, rollout
from hybridrl.workers.config.actor import *  # noqa: F403
from hybridrl.workers.config.checkpoint import *  # noqa: F403
from hybridrl.workers.config.critic import *  # noqa: F403
from hybridrl.workers.config.engine import *  # noqa: F403
from hybridrl.workers.config.model import *  # noqa: F403
from hybridrl.workers.config.optimizer import *  # noqa: F403
from hybridrl.workers.config.rollout import *  # noqa: F403

__all__ = (
    actor.__all__
    + checkpoint.__all__
    + critic.__all__
    + engine.__all__
    + model.__all__
    + optimizer.__all__
    + rollout.__all__
)

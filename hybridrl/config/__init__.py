"""The config system: compose the YAMLs with overrides, validate them, resolve the batch plan, preflight the
files; the entry points' ``main`` (``hydra_entry``) and ``hybridrl-plan``.

Cheap to import (OmegaConf only; Hydra is imported when composing). The YAML files under ``configs/``
(shipped as ``hybridrl.configs``) are the single source of truth for keys and defaults; reading them and
filling a config from them is on the ground floor, :mod:`hybridrl.utils.config_files` and
:mod:`hybridrl.utils.config_defaults` (re-exported here), because the public datasets in ``utils`` fill too.
"""

from hybridrl.config.access import need_critic, need_reference_policy
from hybridrl.config.batch_plan import BatchPlan, RolePlan, compute_batch_plan, with_dataset_len
from hybridrl.config.entry import compose_config, hydra_entry
from hybridrl.config.errors import ConfigError, ConfigProblem, ConfigWarning
from hybridrl.config.loading import allowed_additions, flatten_keys
from hybridrl.config.overrides import prepare_cli_argv, prepare_overrides
from hybridrl.config.plan_table import format_batch_plan, plan_rows
from hybridrl.config.suggest import closest_keys
from hybridrl.config.unsupported import UNSUPPORTED, check_unsupported
from hybridrl.config.validate import collect_problems, validate_config
from hybridrl.utils.config_defaults import is_filled, section_with_defaults, with_defaults
from hybridrl.utils.config_files import CONFIG_NAMES, HYBRIDRL_CONFIG_NAMES, config_dir, config_file, load_config

__all__ = [
    "BatchPlan",
    "CONFIG_NAMES",
    "ConfigError",
    "ConfigProblem",
    "ConfigWarning",
    "HYBRIDRL_CONFIG_NAMES",
    "RolePlan",
    "UNSUPPORTED",
    "allowed_additions",
    "check_unsupported",
    "closest_keys",
    "collect_problems",
    "compose_config",
    "compute_batch_plan",
    "config_dir",
    "config_file",
    "flatten_keys",
    "format_batch_plan",
    "hydra_entry",
    "is_filled",
    "load_config",
    "need_critic",
    "need_reference_policy",
    "plan_rows",
    "prepare_cli_argv",
    "prepare_overrides",
    "section_with_defaults",
    "validate_config",
    "with_dataset_len",
    "with_defaults",
]

"""The config tree: load/compose the YAMLs, validate them, resolve the batch plan; the entry points' ``main``.

Cheap to import (OmegaConf only; Hydra is imported when composing). The YAML files under
``configs/`` are the single source of truth for keys and defaults.
"""

from hybridrl.utils.config.access import need_critic, need_reference_policy
from hybridrl.utils.config.batch_plan import BatchPlan, RolePlan, compute_batch_plan, with_dataset_len
from hybridrl.utils.config.defaults import section_with_defaults, with_defaults
from hybridrl.utils.config.entry import compose_config, hydra_entry
from hybridrl.utils.config.errors import ConfigError, ConfigProblem, ConfigWarning
from hybridrl.utils.config.loading import allowed_additions, flatten_keys, load_config
from hybridrl.utils.config.overrides import prepare_cli_argv, prepare_overrides
from hybridrl.utils.config.paths import CONFIG_NAMES, HYBRIDRL_CONFIG_NAMES, config_dir, config_file
from hybridrl.utils.config.plan_table import format_batch_plan, plan_rows
from hybridrl.utils.config.suggest import closest_keys
from hybridrl.utils.config.unsupported import UNSUPPORTED, check_unsupported
from hybridrl.utils.config.validate import collect_problems, validate_config

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

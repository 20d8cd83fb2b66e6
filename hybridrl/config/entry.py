"""Compose the config the way the command line does: one entry for every Hydra program.

    python -m <entry point> key=value ...
      ──► override keys checked against a shipped YAML (unknown key -> the closest valid key)   [override_keys]
      ──► Hydra composes <config_name>.yaml (``--cfg job`` prints the tree and stops)
      ──► the keys it lacks filled from the YAML of override_keys, once (marked filled: the trainer,
          the workers and the datasets take it as it is)                                      [override_keys]
      ──► check(config): every problem at once, or ConfigError printed to stderr and exit 1
      ──► run(config)

``hydra_entry`` builds that ``main`` for ``main_ppo``, ``main_generation``, ``main_eval``,
``fsdp_sft_trainer`` and the recipes; ``compose_config`` does the first two steps in-process (tests,
notebooks, ``hybridrl-plan``). Hydra is imported only when composing, so importing this stays cheap.
"""

from __future__ import annotations

import copy
import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from omegaconf import DictConfig

from hybridrl.config.errors import ConfigError
from hybridrl.config.overrides import prepare_cli_argv, prepare_overrides, select_model_engine
from hybridrl.utils.config_aliases import resolve_aliases
from hybridrl.utils.config_defaults import with_defaults
from hybridrl.utils.config_files import config_dir

__all__ = ["compose_config", "hydra_entry"]


def compose_config(name: str = "ppo_trainer", overrides: Sequence[str] = ()) -> DictConfig:
    """Compose ``<name>.yaml`` with Hydra-syntax overrides, exactly as the CLI does.

    Unknown keys raise :class:`~hybridrl.config.errors.ConfigError` naming the closest valid key. An override of
    verl 0.9's group ``model_engine`` selects the config as in verl (``model_engine=megatron``:
    ``ppo_megatron_trainer``). verl 0.9's aliases are resolved (:func:`~hybridrl.utils.config_aliases.resolve_aliases`):
    the keys hybridrl reads hold the values verl 0.9 would use.
    """
    name = select_model_engine(name, list(overrides))
    return copy.deepcopy(_composed(str(config_dir()), name, tuple(overrides)))


@functools.lru_cache(maxsize=64)
def _composed(folder: str, name: str, overrides: tuple[str, ...]) -> DictConfig:
    """Hydra's composition, once per process for each (folder, config, overrides): half a second for verl 0.9's
    tree, and tests and user code compose the same few configs many times (callers get copies)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    prepared = prepare_overrides(list(overrides), name)
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=folder, version_base=None):
        return resolve_aliases(compose(config_name=name, overrides=prepared))


def _exit_with(error: ConfigError) -> NoReturn:
    print(error, file=sys.stderr, flush=True)
    sys.exit(1)


def hydra_entry(
    config_name: str,
    run: Callable[[DictConfig], Any],
    *,
    check: Callable[[DictConfig], Any] | None = None,
    config_path: str | None = None,
    override_keys: str | None = None,
) -> Callable[[DictConfig | None], Any]:
    """The ``main`` of an entry point.

    Args:
        config_name: the YAML Hydra composes (``ppo_trainer``, a recipe's ``dapo_trainer``, ...).
        run: ``run(config)``, the program; it imports the heavy parts (torch, Ray) itself.
        check: ``check(config)``, raising ConfigError with every problem; runs before ``run``.
        config_path: the folder of ``config_name`` (default: the shipped ``configs/``); a relative path
            is found next to ``run``'s module (Hydra's rule), as a recipe's ``config``.
        override_keys: the shipped YAML whose keys check the command-line overrides before Hydra sees
            them (a recipe's YAML only changes values of ``ppo_trainer`` keys); None leaves them to Hydra.

    Returns:
        ``main(config=None)``: ``None`` runs the command line (exit 1 on a ConfigError); a composed
        config gets the keys it lacks from ``override_keys``' YAML, is checked (ConfigError raised) and run,
        and ``run``'s result returned.
    """

    def enter(config: DictConfig) -> DictConfig:
        # where a config enters: a composed tree, or one saved by an older version, gets the keys it lacks
        # (with_defaults resolves verl 0.9's aliases too); a recipe's own YAML built on ppo_trainer's is resolved
        return resolve_aliases(config) if override_keys is None else with_defaults(config, override_keys)

    def task(config: DictConfig) -> None:
        config = enter(config)
        if check is not None:
            try:
                check(config)
            except ConfigError as error:
                _exit_with(error)
        try:
            run(config)
        except ConfigError as error:  # a check run inside ``run`` before the heavy start (main_ppo's preflight)
            _exit_with(error)

    # Hydra unwraps ``__wrapped__`` to name the job (its log file) and to place a relative config_path:
    # both follow the entry point's module, as when it decorated its own function.
    task.__wrapped__ = run  # type: ignore[attr-defined]

    def main(config: DictConfig | None = None) -> Any:
        if config is not None:
            config = enter(config)
            if check is not None:
                check(config)
            return run(config)
        import hydra

        if override_keys is not None:
            try:
                sys.argv = [sys.argv[0], *prepare_cli_argv(sys.argv[1:], override_keys)]
            except ConfigError as error:
                _exit_with(error)
        path = str(config_dir()) if config_path is None else config_path
        hydra.main(config_path=path, config_name=config_name, version_base=None)(task)()
        return None

    main.__doc__ = f"Run ``{config_name}`` from the command line (``config=None``) or with a composed config."
    return main

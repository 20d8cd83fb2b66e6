"""The YAML is the one source of defaults: no ``.get("<yaml leaf key>", <default>)`` in the package.

A key that exists in ``hybridrl/configs/*.yaml`` is read by attribute (``cfg.actor.clip_ratio_c``); a config
that predates the key gets it filled from the YAML at load (``hybridrl.utils.config.defaults``). The scan
matches leaf key *names*, so a ``.get`` on something that is not a config (Ray actor options, a dict of
keyword arguments) with a name that happens to be a YAML key is listed in ``NOT_CONFIG_READS`` with the reason.
"""

from __future__ import annotations

import ast
import pathlib

import yaml

import hybridrl

PACKAGE = pathlib.Path(hybridrl.__file__).parent
CONFIGS = PACKAGE / "configs"

# (file relative to the package, key): why this .get is not a restated YAML default
NOT_CONFIG_READS = {
    ("single_controller/ray/actor_class.py", "num_cpus"): "Ray actor options / resources of a worker class, not the config",
}


def _leaf_keys(node: object, out: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, dict):
                _leaf_keys(value, out)
            else:
                out.add(str(key))
    return out


def restated_defaults() -> list[str]:
    """``file:line: call`` for every ``.get("<leaf key>", <non-None default>)`` outside the allow-list."""
    keys: set[str] = set()
    for path in CONFIGS.rglob("*.yaml"):
        _leaf_keys(yaml.safe_load(path.read_text()), keys)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
                continue
            if len(node.args) != 2 or not isinstance(node.args[0], ast.Constant):
                continue
            key, default = node.args[0].value, node.args[1]
            if key not in keys or (isinstance(default, ast.Constant) and default.value is None):
                continue
            if (relative, key) not in NOT_CONFIG_READS:
                found.append(f"{relative}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_yaml_default_is_restated_in_code():
    found = restated_defaults()
    assert not found, (
        "these calls restate a default of a key that exists in hybridrl/configs/*.yaml; read the key by "
        "attribute (the YAML value is filled in at load):\n  " + "\n  ".join(found)
    )

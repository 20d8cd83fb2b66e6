"""The YAML is the one source of defaults: no ``.get("<yaml leaf key>", <default>)`` in the package, nor the
same through a wrapper (``getattr(cfg, "key", default)``, ``_get(cfg, "key", default)``, ``get(cfg, "a.key", d)``).

A key that exists in ``hybridrl/configs/*.yaml`` is read by attribute (``cfg.actor.clip_ratio_c``); a config
that predates the key gets it filled from the YAML at load (``hybridrl.utils.config_defaults``). The scan
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
    # the FSDP wrap is shared with the SFT trainer, whose sft_trainer.yaml fsdp_config has none of these keys
    ("workers/engine/fsdp.py", "fsdp_size"): "SFT's fsdp_config has no fsdp_size (one FSDP group over the world)",
    ("workers/engine/fsdp.py", "min_num_params"): "SFT's wrap_policy may omit it (0: wrap by layer class only)",
    ("workers/engine/fsdp.py", "forward_prefetch"): "SFT's fsdp_config has no forward_prefetch (FSDP1 default off)",
    ("workers/engine/fsdp.py", "reshard_after_forward"): "SFT's fsdp_config has no reshard_after_forward (FSDP2 default)",
    ("workers/engine/fsdp.py", "offload_policy"): "SFT's fsdp_config has no offload_policy (off)",
    # verl 0.9's model.lora.dropout is a YAML leaf of that name; this reads an attention call's keyword arguments
    ("models/transformers/ulysses_attention.py", "dropout"): "flash-attention keyword arguments, not a config",
    ("models/transformers/varlen_attention.py", "dropout"): "attention keyword arguments, not a config",
    # rollout.engine_kwargs is a section; the YAML leaf of that name is verl 0.9's checkpoint_engine.engine_kwargs
    ("workers/rollout/sglang_rollout.py", "engine_kwargs"): "the rollout section's engine_kwargs mapping",
    ("workers/rollout/vllm_rollout.py", "engine_kwargs"): "the rollout section's engine_kwargs mapping",
    # verl 0.9's rate-limited reward manager reads reward.max_concurrent, not a YAML key (sandbox_fusion's is)
    ("experimental/reward_loop/reward_manager/limited.py", "max_concurrent"): "reward.max_concurrent (added by +)",
}
# Calls that take a YAML key but write it (not a read with a restated default).
_SETTERS = {"update", "set", "setdefault"}


def _leaf_keys(node: object, out: set[str]) -> set[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, dict):
                _leaf_keys(value, out)
            else:
                out.add(str(key))
    return out


def _is_literal(node: ast.expr) -> bool:
    """A constant, or a tuple/list/dict display of constants: a value written in code, not read from elsewhere."""
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def _key_and_default(node: ast.Call) -> tuple[object, ast.expr] | None:
    """``(key, default)`` of ``x.get("key", d)`` or of a wrapper read ``f(x, "key", <literal>)``; None otherwise."""
    name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    if name == "get" and len(node.args) == 2:
        key_node, default = node.args
    elif len(node.args) == 3 and not node.keywords and name not in _SETTERS and _is_literal(node.args[2]):
        key_node, default = node.args[1], node.args[2]
    else:
        return None
    if not (isinstance(key_node, ast.Constant) and isinstance(key_node.value, str)):
        return None
    return key_node.value.rsplit(".", 1)[-1], default  # a dotted path names its leaf key last


def restated_defaults() -> list[str]:
    """``file:line: call`` for every read of a YAML leaf key with a non-None code default, outside the allow-list."""
    keys: set[str] = set()
    for path in CONFIGS.rglob("*.yaml"):
        _leaf_keys(yaml.safe_load(path.read_text()), keys)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            read = _key_and_default(node) if isinstance(node, ast.Call) else None
            if read is None:
                continue
            key, default = read
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

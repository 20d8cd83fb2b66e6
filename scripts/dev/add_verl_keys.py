"""Add the keys of a verl key list (``key<TAB>default``) that a shipped YAML lacks, in place, with a comment each.

A maintenance tool, run by hand when hybridrl follows a new verl release; the YAML stays the one source of
truth (nothing reads this script at run time). Each missing key is inserted at the end of its closest
existing section, so the file keeps its order and its comments; a comment line goes above every new key
(STYLE.md rule 8), taken from :data:`COMMENTS` (first matching pattern) or written from the key's name.

    python scripts/dev/add_verl_keys.py configs/ppo_trainer.yaml tests/fixtures/verl-0.9-ppo_trainer-keys.tsv
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
import sys
from pathlib import Path

from omegaconf import OmegaConf

# What a new key does, by pattern (first match wins); {leaf} is the key's last part in words.
COMMENTS: tuple[tuple[str, str], ...] = (
    ("transfer_queue*", "TransferQueue (verl's distributed data system): {leaf}; not in hybridrl, default only."),
    ("*profiler*", "Profiler setting: {leaf}; hybridrl has no profiler integration, default only."),
    ("*qat*", "Quantisation-aware training: {leaf}; not in hybridrl, default only."),
    ("*mtp*", "Multi-token prediction (MTP) head: {leaf}; not in hybridrl, default only."),
    ("*disaggregation*", "Prefill/decode disaggregated serving: {leaf}; not in hybridrl, default only."),
    ("*prometheus*", "Prometheus metrics of the rollout servers: {leaf}; not in hybridrl, default only."),
    ("*checkpoint_engine*", "Weight-transfer (checkpoint) engine trainer -> rollout: {leaf}."),
    ("distillation*", "On-policy distillation from a teacher model: {leaf}; not in hybridrl, default only."),
    ("skip.*", "Dump and replay rollouts instead of generating: {leaf}; not in hybridrl, default only."),
    ("*router_replay*", "MoE routing replay (experts chosen at rollout reused in training): {leaf}."),
    ("*routing_replay*", "MoE routing replay: record the experts the rollout chose (R3)."),
    ("*.lora.*", "Engine-level LoRA settings (verl's Megatron LoRA): {leaf}; hybridrl's LoRA keys are model.lora_*."),
    ("*tiled_mlp*", "Tiled MLP forward (memory saving): {leaf}; not in hybridrl, default only."),
    ("reward.reward_model.rollout*", "Served reward model, its inference engine: {leaf}; not in hybridrl."),
    ("reward_model.rollout.*", "Legacy name of reward.reward_model.rollout.{leaf} (null: unset)."),
    ("reward_model.reward_loop*", "Legacy reward-loop setting {leaf} (null: unset); not in hybridrl."),
    ("reward.*", "Reward section (verl 0.9 home of the reward settings): {leaf}."),
    ("*sandbox_fusion*", "Sandbox Fusion code execution rewards: {leaf}; not in hybridrl, default only."),
    ("*fsdp_config.*", "FSDP engine setting {leaf} (verl's new engine); hybridrl reads the actor-level key."),
    ("critic.fsdp.*", "FSDP engine setting {leaf} of the critic (verl's new engine)."),
    ("*.optim.*", "Optimizer setting: {leaf}."),
    ("ray_kwargs.*", "Ray start-up setting {leaf} (verl 0.9's name of ray_init.*)."),
)


def leaf_words(key: str) -> str:
    return key.rsplit(".", 1)[-1].replace("_", " ")


def comment_for(key: str) -> str:
    for pattern, text in COMMENTS:
        if fnmatch.fnmatchcase(key, pattern):
            return text.format(leaf=leaf_words(key))
    return f"verl 0.9 key: {leaf_words(key)}."


def yaml_value(value: object) -> str:
    """A TSV default (a Python literal) written as YAML that OmegaConf reads back to the same value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    raise TypeError(f"cannot write {value!r}")


def read_tsv(path: Path) -> dict[str, object]:
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split("\t", 1)
            rows[key] = ast.literal_eval(value)
    return rows


_KEY = re.compile(r"^(\s*)([\w-]+):")


def section_end(lines: list[str], path: list[str]) -> tuple[int, int] | None:
    """(index after the last line of the section at ``path``, its children's indent), or None if absent.

    A section written as an empty mapping (``key: {}``) is opened: its ``{}`` goes."""
    start, indent = 0, 0
    end = len(lines)
    for part in path:
        found = None
        for index in range(start, end):
            match = _KEY.match(lines[index])
            if match and len(match.group(1)) == indent and match.group(2) == part:
                found = index
                break
        if found is None:
            return None
        start = found + 1
        indent += 2
        end = next(
            (i for i in range(start, end) if _KEY.match(lines[i]) and len(_KEY.match(lines[i]).group(1)) < indent),
            end,
        )
    if path and lines[start - 1].rstrip().endswith(": {}"):
        lines[start - 1] = lines[start - 1].rstrip()[:-3]
    while end > start and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1  # before the blank lines and banners that close the section
    return end, indent


def insert_key(lines: list[str], key: str, value: object) -> None:
    parts = key.split(".")
    for depth in range(len(parts) - 1, -1, -1):
        located = section_end(lines, parts[:depth]) if depth else (len(lines), 0)
        if located is not None:
            break
    end, indent = located
    block = []
    for offset, part in enumerate(parts[depth:]):
        pad = " " * (indent + 2 * offset)
        last = depth + offset == len(parts) - 1
        words = comment_for(key) if last else f"{part.replace('_', ' ')} settings (verl 0.9)."
        block.append(f"{pad}# {words}")
        block.append(f"{pad}{part}: {yaml_value(value)}" if last else f"{pad}{part}:")
    if depth == 0:
        block.insert(0, "")
    lines[end:end] = block


def main() -> int:
    yaml_path, tsv_path = Path(sys.argv[1]), Path(sys.argv[2])
    skip = set(sys.argv[3:])
    lines = yaml_path.read_text().splitlines()
    have = OmegaConf.to_container(OmegaConf.load(yaml_path), resolve=False)
    added = 0
    for key, value in read_tsv(tsv_path).items():
        node: object = have
        for part in key.split("."):
            node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
        if node is KeyError and key not in skip:
            insert_key(lines, key, value)
            added += 1
    yaml_path.write_text("\n".join(lines) + "\n")
    print(f"{yaml_path}: {added} keys added")
    return 0


if __name__ == "__main__":
    sys.exit(main())

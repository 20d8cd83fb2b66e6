"""One name per concept: a module base name used twice in ``hybridrl/`` must be on the allow-list below, with why.

Two modules called ``validation.py`` (DataProto checks vs the validation loop) or ``padding.py`` (DataProto padding
vs remove-padding token packing) made readers open the wrong file; such pairs get names saying what they are
(``protocol/checks.py``, ``utils/remove_padding.py``). A repeated name is fine when it is the same role in another
place: the same component on another engine (FSDP vs Megatron ``critic_worker.py``), another trainer (PPO vs SFT
``checkpointing.py``), a verl public path, or a package convention (``__init__``, ``base``).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "hybridrl"

# base name -> why every module of that name in hybridrl/ is the same concept (or a convention).
ALLOWED_DUPLICATES: dict[str, str] = {
    "__init__.py": "package marker",
    "base.py": "a package's interface module, at verl's paths (single_controller/ray/base, workers/rollout/base, "
    "workers/actor/base, workers/critic/base, interactions/base)",
    "actor.py": "verl's path of the actor's typed config (workers/config/actor), and the Megatron actor",
    "chat_template.py": "verl's two paths of the chat-template helpers: utils/chat_template (verl 0.7-0.8) re-exports "
    "utils/tokenizer/chat_template (verl 0.9)",
    "checkpoint.py": "engine siblings: a worker's checkpoint I/O on FSDP (workers/engine) and on Megatron; verl's "
    "path of the checkpoint's typed config (workers/config/checkpoint)",
    "checkpointing.py": "trainer siblings: driver-side checkpoint and resume of the PPO and the SFT trainer",
    "config.py": "a component's own config step: the SFT trainer's validation, a recipe's Hydra composition; verl's "
    "paths utils/config (omega_conf_to_dataclass) and trainer/config/config (typed trainer configs)",
    "context_parallel.py": "engine siblings: context parallelism of the FSDP path (utils) and of Megatron",
    "critic.py": "verl's path of the critic's typed config (workers/config/critic), and the Megatron critic",
    "critic_worker.py": "engine siblings: the critic worker on FSDP and on Megatron",
    "dapo.py": "verl's two paths of the DAPO reward manager: the driver's batch manager (workers/reward_manager) and the "
    "reward loop's per-sample one (experimental/reward_loop/reward_manager)",
    "engine.py": "verl's path of the engines' typed configs (workers/config/engine), and the Megatron engine",
    "errors.py": "each package's own error types (Ray worker groups, OpenAI serving errors, config errors)",
    "losses.py": "verl's two paths of the distillation losses (trainer/distillation/losses and its fsdp/losses)",
    "forward.py": "trainer siblings: the forward pass of the PPO workers and of the SFT trainer",
    "model.py": "verl's ``verl.utils.model`` path, the Megatron engine's model builder, and verl's path of the "
    "model's typed config (workers/config/model)",
    "naive.py": "verl's two paths of the naive reward manager: the driver's batch manager and the reward loop's "
    "per-sample one",
    "offload.py": "engine siblings: parameter / optimizer offload on FSDP and on Megatron",
    "parallel.py": "trainer / engine siblings: the parallel layout (device mesh, groups) of SFT and of Megatron",
    "registry.py": "verl's two reward-manager registries: the driver's managers and the reward loop's",
    "reward_model_worker.py": "engine siblings: the reward-model worker on FSDP and on Megatron",
    "sampler.py": "verl's path of the custom-sampler base classes: experimental/dataset/sampler re-exports "
    "utils/dataset/sampler (the data layer's, below the trainer)",
    "tool_parser.py": "verl's import path of the tool-call parsers (experimental.agent_loop.tool_parser re-exports "
    "generation.tool_parser)",
    "tool_registry.py": "verl's two import paths of the tool registry (tools.utils.tool_registry re-exports)",
    "worker.py": "a Ray worker class of its package: the SPMD base Worker (verl's path), the Megatron policy "
    "worker, the agent-loop worker",
}

# Same name, different concepts: never to be allowed again.
NEVER_ALLOWED = {"validation.py", "padding.py", "sampling.py", "kv_cache.py"}


def _modules_by_base_name() -> dict[str, list[str]]:
    modules: dict[str, list[str]] = defaultdict(list)
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if "__pycache__" not in path.parts:
            modules[path.name].append(str(path.relative_to(PACKAGE_DIR.parent)))
    return modules


def _duplicates() -> dict[str, list[str]]:
    return {name: paths for name, paths in _modules_by_base_name().items() if len(paths) > 1}


def test_every_repeated_module_name_is_allowed_with_a_reason():
    unexplained = {name: paths for name, paths in _duplicates().items() if name not in ALLOWED_DUPLICATES}
    assert not unexplained, (
        f"module base names used more than once in hybridrl/: {unexplained}; rename one to say what it is, or add "
        "the name to ALLOWED_DUPLICATES with the reason they are the same concept"
    )


def test_the_allow_list_names_only_real_duplicates():
    stale = sorted(set(ALLOWED_DUPLICATES) - set(_duplicates()))
    assert not stale, f"no longer repeated in hybridrl/, drop from ALLOWED_DUPLICATES: {stale}"


def test_names_of_different_concepts_are_never_allowed():
    assert not NEVER_ALLOWED & set(ALLOWED_DUPLICATES)
    assert all(reason.strip() for reason in ALLOWED_DUPLICATES.values())

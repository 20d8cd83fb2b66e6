"""``checks_megatron``: every ``strategy=megatron`` problem before Ray, naming the key and the fix."""

from __future__ import annotations

import warnings

import pytest

from hybridrl.config import ConfigWarning, collect_problems
from hybridrl.config.checks_megatron import check_megatron, check_megatron_environment, megatron_sections
from tests.config_testlib import compose_config

ACTOR_MEGATRON = "actor_rollout_ref.actor.megatron"
# a GRPO run on 4 ranks whose batch sizes fit dp = 4 / TP
GRPO_4_RANKS = [
    "algorithm.adv_estimator=grpo", "data.train_batch_size=8", "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4", "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4", "trainer.n_gpus_per_node=4", "trainer.nnodes=1",
    "trainer.device=cpu",
]


# the built-in converter (verl 0.9 defaults to mbridge, which pipeline stages do not use here)
BUILTIN = "actor_rollout_ref.actor.megatron.use_mbridge=False"


def _problems(*overrides: str, config_name: str = "ppo_megatron_trainer") -> dict[str, str]:
    """key → message + fix of every config problem (no environment checks; a key's problems joined by " | ")."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = compose_config(config_name, [*GRPO_4_RANKS, *overrides])
        problems: dict[str, str] = {}
        for problem in collect_problems(config, check_env=False):
            text = f"{problem.message} Fix: {problem.fix}"
            problems[problem.key] = f"{problems[problem.key]} | {text}" if problem.key in problems else text
        return problems


def test_the_shipped_megatron_config_passes_at_tp2_on_4_ranks():
    assert _problems(f"{ACTOR_MEGATRON}.tensor_model_parallel_size=2") == {}


def test_model_parallel_size_must_divide_the_ranks():
    problems = _problems(f"{ACTOR_MEGATRON}.tensor_model_parallel_size=3")
    message = problems[f"{ACTOR_MEGATRON}.tensor_model_parallel_size"]
    assert "4 ranks" in message and "TP=3 × PP=1 × CP=1 = 3" in message
    assert "a divisor of 4 (1, 2, 4)" in message  # the fix lists the sizes that work


@pytest.mark.parametrize("key,value,fix", [
    ("virtual_pipeline_model_parallel_size", 2, "set it to null"),
    ("expert_model_parallel_size", 2, "set it to 1"),
])
def test_what_the_megatron_workers_lack_is_refused_by_key(key, value, fix):
    problems = _problems(f"{ACTOR_MEGATRON}.{key}={value}")
    assert "not implemented" in problems[f"{ACTOR_MEGATRON}.{key}"] and fix in problems[f"{ACTOR_MEGATRON}.{key}"]


@pytest.mark.parametrize("section", [ACTOR_MEGATRON, "actor_rollout_ref.ref.megatron"])
def test_dist_checkpointing_needs_its_path(section):
    key = f"{section}.dist_checkpointing_path"
    kl_loss = "actor_rollout_ref.actor.use_kl_loss=True"  # a reference policy exists
    message = _problems(f"{section}.use_dist_checkpointing=True", kl_loss)[key]
    assert "use_dist_checkpointing=True" in message and "converter_hf_to_mcore" in message
    # with a path the config passes (the folder is checked on the workers, where it is read)
    assert _problems(f"{section}.use_dist_checkpointing=True", f"{key}=/ckpt/mcore", kl_loss) == {}


def test_dist_checkpointing_path_of_the_critic_is_checked_by_its_key():
    problems = _problems("critic.megatron.use_dist_checkpointing=True", "algorithm.adv_estimator=gae",
                         "critic.enable_resource_pool=True")
    assert "critic.megatron.dist_checkpointing_path" in problems


def test_context_parallel_refusal_on_cpu_says_it_is_gpu_only_and_untested():
    key = f"{ACTOR_MEGATRON}.context_parallel_size"
    message = _problems(f"{key}=2")[key]
    assert "implemented for the GPU path only (TransformerEngine layer spec, untested)" in message
    assert "context_parallel_size == 1" in message and "set it to 1 on CPU" in message
    # the critic's section is checked the same way
    assert "critic.megatron.context_parallel_size" in _problems(
        "critic.megatron.context_parallel_size=2", "algorithm.adv_estimator=gae", "critic.enable_resource_pool=True")


def test_context_parallel_on_gpu_passes_with_a_never_ran_warning(monkeypatch):
    from hybridrl.config import errors

    monkeypatch.setattr(errors, "_warned", set())  # warn_once: other tests of this process may have warned already
    with pytest.warns(ConfigWarning, match="context_parallel_size=2: .* has never run on a GPU"):
        config = compose_config("ppo_megatron_trainer", [*GRPO_4_RANKS, "trainer.device=cuda",
                                                         f"{ACTOR_MEGATRON}.context_parallel_size=2"])
        problems = check_megatron(config, use_critic=False, use_reference_policy=False)
    assert problems == []


def test_pipeline_parallel_policy_passes_with_the_builtin_converter_and_checkpoints():
    assert _problems(f"{ACTOR_MEGATRON}.pipeline_model_parallel_size=2", BUILTIN, "trainer.save_freq=-1") == {}
    # checkpoints at PP > 1: saved per stage, resumed, merged (tests/megatron/test_megatron_pipeline_checkpoint_on_cpu.py)
    assert _problems(f"{ACTOR_MEGATRON}.pipeline_model_parallel_size=2", BUILTIN, "trainer.save_freq=1") == {}
    assert _problems(f"{ACTOR_MEGATRON}.pipeline_model_parallel_size=2", BUILTIN, "trainer.resume_mode=resume_path",
                     "trainer.resume_from_path=/tmp/x") == {}
    # with a reference policy (KL loss) on the actor's layout
    assert _problems(f"{ACTOR_MEGATRON}.pipeline_model_parallel_size=2", BUILTIN, "actor_rollout_ref.actor.use_kl_loss=True",
                     "actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=2") == {}


def test_pipeline_parallel_refuses_what_it_lacks_by_key():
    pp = f"{ACTOR_MEGATRON}.pipeline_model_parallel_size"
    problems = _problems(f"{pp}=2", f"{ACTOR_MEGATRON}.use_mbridge=True")
    assert "built-in converter only" in problems[f"{ACTOR_MEGATRON}.use_mbridge"] and pp not in problems
    critic = ["critic.enable=True", "critic.ppo_micro_batch_size_per_gpu=2", "critic.ppo_mini_batch_size=4",
              "critic.strategy=megatron", "critic.enable_resource_pool=True"]
    message = _problems(*critic, "critic.megatron.pipeline_model_parallel_size=2")["critic.megatron.pipeline_model_parallel_size"]
    assert "policy (actor, reference) only" in message and "set it to 1" in message


def test_megatron_offload_keys_pass_for_every_section():
    """param/grad/optimizer offload is implemented for the actor and critic, param offload for the reference and
    reward model (hybridrl.workers.megatron.offload)."""
    actor = [f"{ACTOR_MEGATRON}.{key}=True" for key in ("param_offload", "grad_offload", "optimizer_offload")]
    critic = ["algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=2", "critic.ppo_mini_batch_size=4",
              *[f"critic.megatron.{key}=True" for key in ("param_offload", "grad_offload", "optimizer_offload")]]
    reference = ["actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.ref.megatron.param_offload=True"]
    assert _problems(*actor, *critic, *reference) == {}


def test_strategy_megatron_in_the_fsdp_file_points_at_the_megatron_config():
    problems = _problems("actor_rollout_ref.actor.strategy=megatron", config_name="ppo_trainer")
    assert "--config-name ppo_megatron_trainer" in problems["actor_rollout_ref.actor.strategy"]


def test_policy_modes_without_a_megatron_worker_are_refused():
    problems = _problems("actor_rollout_ref.rollout.mode=async", "data.return_raw_chat=True",
                         "trainer.v1.trainer_mode=separate_async", "actor_rollout_ref.model.lora_rank=8")
    for key in ("actor_rollout_ref.rollout.mode", "trainer.v1.trainer_mode", "actor_rollout_ref.model.lora_rank"):
        assert "strategy=megatron" in problems[key], key


def test_critic_on_another_engine_family_is_refused_as_in_verl():
    critic = ["critic.enable=True", "critic.ppo_micro_batch_size_per_gpu=2", "critic.ppo_mini_batch_size=4"]
    problems = _problems(*critic, "actor_rollout_ref.actor.strategy=fsdp2", "critic.strategy=megatron")
    assert "same engine family" in problems["critic.strategy"] and "critic.strategy=fsdp2" in problems["critic.strategy"]


def test_a_megatron_role_without_a_worker_module_is_an_error(monkeypatch):
    from hybridrl.config import worker_classes

    # a version of hybridrl without the Megatron critic worker (before it landed, this was the shipped state)
    missing = {**worker_classes.WORKER_CLASSES["megatron"], "critic": "hybridrl.workers.megatron.no_such:Critic"}
    monkeypatch.setitem(worker_classes.WORKER_CLASSES, "megatron", missing)
    config = compose_config("ppo_megatron_trainer", [*GRPO_4_RANKS, "critic.enable=True"])
    problems = {p.key: p.message for p in check_megatron(config, use_critic=True, use_reference_policy=False)}
    assert "no Megatron critic worker (hybridrl.workers.megatron.no_such is missing)" in problems["critic.strategy"]


def test_sequence_parallel_is_warned_about_on_cpu_with_tp2(monkeypatch):
    from hybridrl.config import errors

    monkeypatch.setattr(errors, "_warned", set())  # warn_once: other tests of this process may have warned already
    config = compose_config("ppo_megatron_trainer", [*GRPO_4_RANKS, f"{ACTOR_MEGATRON}.tensor_model_parallel_size=2"])
    with pytest.warns(ConfigWarning, match="sequence_parallel=True is ignored on CPU"):
        check_megatron(config, use_critic=False, use_reference_policy=False)
    monkeypatch.setattr(errors, "_warned", set())
    tp1 = compose_config("ppo_megatron_trainer", GRPO_4_RANKS)  # TP=1: sequence parallelism has nothing to split
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        check_megatron(tp1, use_critic=False, use_reference_policy=False)


def test_megatron_core_must_be_installed_where_a_role_uses_it():
    import importlib.util

    config = compose_config("ppo_megatron_trainer", GRPO_4_RANKS)
    problems = check_megatron_environment(config, use_critic=False, use_reference_policy=False)
    installed = importlib.util.find_spec("megatron") is not None
    assert (problems == []) == installed  # the main .venv lacks it, .venv-megatron has it
    if not installed:
        assert "scripts/setup_megatron_env.sh" in problems[0].fix


def test_megatron_sections_follow_each_role_strategy():
    config = compose_config("ppo_megatron_trainer", [*GRPO_4_RANKS, "reward_model.enable=True"])
    assert megatron_sections(config, use_critic=True, use_reference_policy=True) == [
        "actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic", "reward_model"]
    fsdp = compose_config("ppo_trainer", GRPO_4_RANKS)
    assert megatron_sections(fsdp, use_critic=True, use_reference_policy=True) == []


def test_a_colocated_megatron_critic_needs_the_actor_layout():
    critic = ["critic.enable=True", "critic.ppo_micro_batch_size_per_gpu=2", "critic.ppo_mini_batch_size=4",
              f"{ACTOR_MEGATRON}.tensor_model_parallel_size=2"]
    key = "critic.megatron.tensor_model_parallel_size"
    problems = _problems(*critic, f"{key}=1")
    assert "differs from the actor's 2" in problems[key] and f"set {key}=2" in problems[key]
    assert key not in _problems(*critic, f"{key}=2")
    own_pool = ["critic.enable_resource_pool=True", "critic.n_gpus_per_node=2", "critic.nnodes=1"]
    assert key not in _problems(*critic, f"{key}=1", *own_pool)  # its own processes: its own parallel groups

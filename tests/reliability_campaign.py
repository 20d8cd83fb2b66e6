"""The reliability and security campaign, as data: one entry per case, with the tests that check it.

A hostile-but-honest user's campaign on a clean clone (crafted files, faults during runs, network exposure, bad server
requests, hostile tools and agents): what held is kept, what failed or held partly was fixed. Each case's checks are
ordinary tests in their own areas (this module adds none); ``tests/conftest.py`` marks every test named here
``reliability``, so the whole campaign replays with

    bash scripts/test.sh reliability          # = pytest -m reliability tests (fast and slow ones)

``tests/test_reliability_campaign_on_cpu.py`` checks that every test named here exists, that every case has one
(or says why not, in ``gap``; a case with tests may say there what they leave out), and that the marker selects
exactly these tests.

A test is ``path::function`` or ``path::Class::method`` relative to the repository root; ``[params]`` may follow
to say which parametrisation is the case, but the marker goes on every parametrisation of the function.
Not collected (no ``test_`` prefix).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    id: str
    area: str  # crafted files | config and data | faults | exposure | server | tools and agents
    holds: str  # what must hold
    tests: tuple[str, ...]
    gap: str = ""  # what its tests do not check, or why it has none (a benchmark, a documented limitation)


PREFLIGHT = "tests/config/test_preflight_on_cpu.py::"
NO_PICKLE = "tests/trainer/ppo/test_checkpoint_no_pickle_on_cpu.py::"
DATAPROTO = "tests/protocol/test_dataproto_disk_no_pickle_on_cpu.py::"
SHARD = "tests/workers/engine/test_checkpoint_shard_error_on_cpu.py::"
TRAINER_CKPT = "tests/trainer/ppo/test_checkpointing_on_cpu.py::"
SANDBOX = "tests/utils/reward_score/test_code_sandbox_on_cpu.py::"
UNISOLATED = "tests/utils/reward_score/test_sandbox_refuses_unisolated_on_cpu.py::"
ADMISSION = "tests/serving/test_admission_on_cpu.py::"
OPENAI_ERRORS = "tests/serving/test_openai_errors_on_cpu.py::"
ENDPOINT = "tests/serving/test_training_endpoint_on_cpu.py::"
TOOLS = "tests/tools/test_tool_registry_on_cpu.py::"
EXECUTOR = "tests/tools/test_executor_on_cpu.py::"

CASES: tuple[Case, ...] = (
    # ------------------------------------------------------------------ crafted files (held)
    Case(
        "pickle-checkpoint-state",
        "crafted files",
        "a crafted pickle as a checkpoint's data.pt / trainer_state.pt is refused and never runs; saves write no pickle",
        (
            NO_PICKLE + "test_crafted_pickle_in_checkpoint_is_refused_and_never_runs",
            NO_PICKLE + "test_crafted_pickle_via_the_trainer_config_is_refused",
            NO_PICKLE + "test_checkpoint_save_writes_no_pickle",
        ),
    ),
    Case(
        "pickle-legacy-checkpoint",
        "crafted files",
        "an earlier version's pickled checkpoint loads only with trainer.allow_legacy_pickle_checkpoint=true",
        (NO_PICKLE + "test_earlier_pickled_checkpoint_loads_only_with_the_opt_in",),
    ),
    Case(
        "pickle-worker-shard",
        "crafted files",
        "a crafted worker shard (.pt) is refused by the weights-only loader, names the file, and the message never "
        "suggests weights_only=False (which would run the payload)",
        (SHARD + "test_crafted_shard_is_refused_without_suggesting_to_unpickle_it",),
    ),
    Case(
        "pickle-dataproto-file",
        "crafted files",
        "DataProto.load_from_disk refuses a crafted pickle (never runs) and reads an old pickled file only with "
        "allow_pickle=True; a value only pickle could store is refused on save",
        (
            DATAPROTO + "test_crafted_pickle_is_refused_and_never_runs",
            DATAPROTO + "test_earlier_pickled_file_loads_only_with_allow_pickle",
            DATAPROTO + "test_values_only_pickle_could_store_are_refused_on_save",
        ),
    ),
    Case(
        "truncated-checkpoint-shard",
        "crafted files",
        "a truncated worker shard names the file and the previous complete step (or says to start over)",
        (
            SHARD + "test_truncated_model_shard_names_the_file_and_the_previous_complete_step",
            SHARD + "test_truncated_shard_without_an_earlier_step_says_start_over",
        ),
    ),
    # ------------------------------------------------------------------ config and data, before Ray
    Case(
        "bad-config-before-ray",
        "config and data",
        "bad CLI inputs fail with the key and the fix before any worker starts",
        (
            "tests/trainer/test_main_ppo_e2e_on_cpu.py::test_bad_inputs_fail_before_any_worker_starts",
            "tests/trainer/test_preflight_cli_on_cpu.py::test_empty_train_file_exits_1_before_ray_naming_the_file",
        ),
    ),
    Case(
        "bad-data-before-ray",
        "config and data",
        "empty parquet files and over-long prompts are named (key, file, row) by the preflight",
        (
            PREFLIGHT + "test_empty_parquet_with_schema_names_the_key_and_file",
            PREFLIGHT + "test_empty_parquet_in_the_dataset_itself",
            PREFLIGHT + "test_over_long_prompt_names_the_row_and_its_length",
        ),
    ),
    Case(
        "bad-checkpoint-folder-before-ray",
        "config and data",
        "an unwritable checkpoint folder, a corrupt tracker file, a resume path that is not a step folder: found "
        "before Ray",
        (
            PREFLIGHT + "test_unwritable_checkpoint_folder_is_found_before_the_first_step",
            PREFLIGHT + "test_corrupt_tracker_file_is_found_before_ray",
            PREFLIGHT + "test_resume_path_that_is_not_a_step_folder",
        ),
    ),
    Case(
        "truncated-model-safetensors",
        "config and data",
        "a truncated model.safetensors is named with actor_rollout_ref.model.path before Ray (was a raw "
        "SafetensorError from a worker)",
        (PREFLIGHT + "test_truncated_model_safetensors_names_the_file_and_the_key",),
    ),
    Case(
        "corrupt-parquet-page",
        "config and data",
        "a parquet file with a corrupt data page (intact footer) is named with its file and column before Ray",
        (PREFLIGHT + "test_parquet_with_a_corrupt_data_page_names_the_file_and_column",),
    ),
    Case(
        "resume-deleted-shard",
        "config and data",
        "resuming from a checkpoint whose shard was deleted is found before Ray, naming the missing files and the "
        "previous complete step",
        (
            PREFLIGHT + "test_resume_folder_with_a_deleted_shard_is_found_before_ray",
            TRAINER_CKPT + "test_deleted_shard_and_tensor_file_are_named_with_the_previous_complete_step",
        ),
    ),
    Case(
        "resume-missing-data-safetensors",
        "config and data",
        "a missing data.safetensors is reported as data.safetensors (not data.json), with the previous step",
        (TRAINER_CKPT + "test_deleted_shard_and_tensor_file_are_named_with_the_previous_complete_step",),
    ),
    Case(
        "reward-file-syntax-error",
        "config and data",
        "a reward file with a syntax error is named (file, line) before Ray",
        (PREFLIGHT + "test_reward_file_with_a_syntax_error_is_found_before_ray",),
    ),
    Case(
        "ragged-mini-batch",
        "config and data",
        "data.train_batch_size not a multiple of ppo_mini_batch_size is refused naming both keys and a divisor",
        ("tests/config/test_validate_on_cpu.py::test_train_batch_not_a_multiple_of_the_mini_batch_is_refused",),
    ),
    # ------------------------------------------------------------------ faults during runs
    Case(
        "sigterm-resume",
        "faults",
        "SIGTERM, then resume, reproduces the uninterrupted run on every metric",
        (
            "tests/trainer/test_main_ppo_e2e_on_cpu.py::test_exact_resume_after_sigterm_at_epoch_boundary",
            TRAINER_CKPT + "test_trainer_state_restores_kl_controller_rng_and_dataloader_position",
        ),
    ),
    Case(
        "killed-worker",
        "faults",
        "a killed worker fails the running and the next call promptly, instead of hanging",
        ("tests/single_controller/test_failures_on_cpu.py::test_killed_worker_fails_the_next_and_the_running_call",),
        gap="a worker group, not a whole main_ppo run: the checkpoints left intact after the kill are not checked",
    ),
    Case(
        "host-oom-kill",
        "faults",
        "a worker killed by the host's OOM killer is reported with the micro-batch and checkpointing keys to change",
        (
            "tests/single_controller/test_worker_errors_on_cpu.py::test_a_host_oom_kill_names_the_micro_batch_and_checkpointing_keys",
        ),
    ),
    Case(
        "lr-1e10-divergence",
        "faults",
        "lr=1e10 stops the run non-zero and saves nothing after the divergence",
        (
            "tests/trainer/test_divergence_guard_e2e_on_cpu.py::test_lr_1e10_run_stops_with_an_error_and_saves_nothing_after_divergence",
            "tests/workers/actor/test_divergence_guard_on_cpu.py::test_actor_step_with_a_huge_lr_stops_before_the_broken_weights_are_used",
            "tests/workers/actor/test_divergence_guard_on_cpu.py::test_save_is_refused_after_a_skipped_step_or_with_nan_weights",
            "tests/workers/test_divergence_workers_on_cpu.py::test_actor_worker_counts_a_nan_step_and_refuses_to_save_it",
        ),
    ),
    Case(
        "full-disk-checkpoint",
        "faults",
        "a full disk while saving removes the temporary *.pt.tmp files and names the folder and the fix; earlier "
        "checkpoints and the step pointer stay intact",
        (SHARD + "test_full_disk_while_saving_removes_the_temporary_files_and_names_the_folder",),
    ),
    # ------------------------------------------------------------------ network exposure
    Case(
        "ray-loopback-and-token",
        "exposure",
        "a local Ray cluster listens on loopback only and refuses clients without the run's token",
        (
            "tests/single_controller/test_ray_network_security_on_cpu.py::test_local_cluster_listens_on_loopback_only_and_refuses_clients_without_the_token",
            "tests/single_controller/test_ray_utils_on_cpu.py::test_loopback_only_node_resolves_loopback_inside_and_restores_after",
        ),
    ),
    Case(
        "worker-rendezvous-store",
        "exposure",
        "every socket a training worker listens on, the torch.distributed rendezvous store among them, is on loopback",
        (
            "tests/single_controller/test_colocation_on_cpu.py::test_two_workers_all_reduce_over_gloo_listening_on_loopback_only",
        ),
    ),
    Case(
        "sft-torchrun-store",
        "exposure",
        "multi-process SFT under torchrun: the rendezvous store listens on loopback only",
        (),
        gap="not fixed: torchrun's agent serves the store itself; documented in docs/security.md (firewall the ports)",
    ),
    Case(
        "sandbox-fork-bomb",
        "exposure",
        "model code's fork bomb is contained",
        (SANDBOX + "test_fork_bomb_is_contained",),
    ),
    Case(
        "sandbox-huge-allocation",
        "exposure",
        "a huge allocation fails cleanly with a MemoryError inside the sandbox (20 GB in the campaign, 8 GiB here)",
        (SANDBOX + "test_memory_bomb_fails_cleanly",),
    ),
    Case(
        "sandbox-runaway",
        "exposure",
        "infinite loops, sleeps and output floods are killed or capped",
        (
            SANDBOX + "test_infinite_loop_is_killed_and_scores_zero",
            SANDBOX + "test_sleeping_program_hits_wall_timeout",
            SANDBOX + "test_output_flood_is_capped",
        ),
    ),
    Case(
        "sandbox-escapes",
        "exposure",
        "no network, no writes outside the work dir, no parent environment (scrubbed, not readable through /proc)",
        (
            SANDBOX + "test_socket_connect",
            SANDBOX + "test_write_outside_workdir",
            SANDBOX + "test_environment_is_scrubbed",
            SANDBOX + "test_parent_environment_not_readable_via_proc",
            "tests/tools/test_builtin_tools_on_cpu.py::test_code_interpreter_runs_in_the_sandbox",
        ),
    ),
    Case(
        "sandbox-without-isolation",
        "exposure",
        "without namespaces the sandbox refuses to run the code (it never runs) unless the opt-in is set",
        (
            UNISOLATED + "test_unisolated_run_is_refused_and_the_code_never_runs",
            UNISOLATED + "test_code_scorer_stops_instead_of_scoring_zero_without_isolation",
        ),
    ),
    # ------------------------------------------------------------------ the OpenAI server (python -m hybridrl.serve)
    Case(
        "serve-admission-bound",
        "server",
        "a burst past server.max_inflight_sequences (n x requests) is refused with 429 + Retry-After",
        (ADMISSION + "test_a_burst_past_the_bound_is_refused_and_abandoned_work_is_cancelled",),
    ),
    Case(
        "serve-cancel-on-disconnect",
        "server",
        "a request whose client disconnects has its generation cancelled; a fresh request is answered at once after",
        (
            ADMISSION + "test_a_burst_past_the_bound_is_refused_and_abandoned_work_is_cancelled",
            "tests/workers/rollout/async_server/test_hf_continuous_batching_on_cpu.py::test_cancelling_a_generate_task_cancels_its_request",
        ),
    ),
    Case(
        "serve-bounded-shutdown",
        "server",
        "SIGTERM cancels what still runs after server.shutdown_timeout_s instead of waiting for abandoned work; bad "
        "values of the two new server keys are config errors",
        (
            ADMISSION + "test_a_shutdown_cancels_the_requests_still_running_after_its_timeout",
            "tests/serving/test_serve_cli_on_cpu.py::test_missing_model_path_and_bad_keys_are_config_errors",
        ),
    ),
    Case(
        "serve-memory-after-burst",
        "server",
        "the memory a burst took is handed back to the system when the engine runs out of work",
        (
            "tests/utils/test_cpu_allocator_on_cpu.py::test_release_free_memory_returns_a_freed_heap_to_the_system",
            "tests/workers/rollout/async_server/test_hf_continuous_batching_on_cpu.py::test_on_idle_runs_when_the_engine_runs_out_of_work",
        ),
    ),
    Case(
        "serve-burst-smollm2-10s",
        "server",
        "under 50 x n=16 requests with SmolLM2, a fresh 4-token request is answered within 10 s of the disconnects",
        (),
        gap="a timing on a real model is a benchmark's job, not a test's: scripts/bench/bench_serve_burst.py "
        "(the cancellation it relies on is tested by serve-cancel-on-disconnect)",
    ),
    Case(
        "serve-prompt-beyond-context",
        "server",
        "a prompt longer than the model's context (but within rollout.prompt_length) is a 400 context_length_exceeded, "
        "not a 500",
        (
            OPENAI_ERRORS + "test_prompts_and_max_tokens_beyond_the_models_context_are_400",
            "tests/serving/test_openai_app_hf_engine_on_cpu.py::test_a_prompt_beyond_the_models_context_is_a_400_not_an_engine_error",
        ),
    ),
    Case(
        "serve-seed-beyond-int64",
        "server",
        "a seed outside int64 is a 400 naming seed, not a 500",
        (OPENAI_ERRORS + "test_unsupported_or_out_of_range_fields_are_400[request_fields5-seed]",),
    ),
    Case(
        "serve-invalid-tool-schema",
        "server",
        "an invalid tools JSON Schema is a 400 naming where it is wrong (was accepted with 200)",
        (
            OPENAI_ERRORS + "test_an_invalid_tool_schema_is_named_with_where_it_is_wrong",
            OPENAI_ERRORS + "test_unsupported_or_out_of_range_fields_are_400",
        ),
    ),
    Case(
        "serve-bad-requests",
        "server",
        "malformed, oversized and unauthenticated requests get OpenAI error objects (400 / 413 / 401 / 404)",
        (
            OPENAI_ERRORS + "test_bad_json_is_400",
            OPENAI_ERRORS + "test_invalid_fields_are_400_naming_the_field",
            OPENAI_ERRORS + "test_max_tokens_over_the_limit_is_400",
            OPENAI_ERRORS + "test_a_body_over_the_limit_is_413",
            OPENAI_ERRORS + "test_missing_or_wrong_api_key_is_401",
            OPENAI_ERRORS + "test_unknown_routes_are_openai_404s",
        ),
    ),
    # ------------------------------------------------------------------ tools, interactions, agents
    Case(
        "blocking-rollout-function",
        "tools and agents",
        "a custom rollout function that blocks (sync sleep in async def) stalls only its own trajectory and is "
        "reported by name; the others are counted right",
        (ENDPOINT + "test_a_blocking_rollout_function_stalls_only_its_own_trajectory",),
    ),
    Case(
        "bad-agents",
        "tools and agents",
        "an agent that raises, returns garbage or hangs is scored and counted; the batch survives",
        (ENDPOINT + "test_openai_agent_scores_its_trajectory_and_survives_bad_agents",),
    ),
    Case(
        "blocking-tool",
        "tools and agents",
        "a blocking tool times out by its config and does not delay the others",
        (
            EXECUTOR + "test_blocking_tool_times_out_by_its_config",
            EXECUTOR + "test_slow_blocking_tool_does_not_delay_a_fast_one",
        ),
    ),
    Case(
        "tool-class-name",
        "tools and agents",
        "a tool file's class_name is resolved only to a BaseTool subclass, refused before construction",
        (
            TOOLS + "test_a_class_that_is_not_a_tool_is_refused_before_construction",
            TOOLS + "test_bad_files_name_file_and_entry",
        ),
    ),
    Case(
        "interaction-class-name",
        "tools and agents",
        "an interaction file's class_name is resolved only to a BaseInteraction subclass, refused before construction",
        ("tests/interactions/test_interactions_on_cpu.py::test_bad_files_name_file_and_entry",),
    ),
    Case(
        "code-from-config-documented",
        "tools and agents",
        "docs/security.md lists tool and interaction class paths among the keys that run code by design",
        ("tests/docs/test_security_page_on_cpu.py::test_security_page_lists_every_key_that_runs_code",),
    ),
)


def strip_params(node_id: str) -> str:
    """``path::function`` of a node id (``[params]`` dropped)."""
    return node_id.split("[", 1)[0]


def campaign_node_ids() -> set[str]:
    """Every test of the campaign, params stripped: what ``tests/conftest.py`` marks ``reliability``."""
    return {strip_params(test) for case in CASES for test in case.tests}


def campaign_files() -> list[str]:
    """The test files the campaign's tests live in (relative to the repository root), sorted."""
    return sorted({test.split("::", 1)[0] for case in CASES for test in case.tests})


def mark_reliability_campaign(items) -> None:
    """``reliability`` on every collected test this campaign names (all its parametrisations), so that
    ``pytest -m reliability tests`` (``bash scripts/test.sh reliability``) replays the whole campaign
    (tests/conftest.py calls it on the collected items)."""
    import pytest

    campaign = campaign_node_ids()
    for item in items:
        if strip_params(item.nodeid) in campaign:
            item.add_marker(pytest.mark.reliability)

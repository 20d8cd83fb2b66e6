"""Preflight (issue 21, finding 4): each disk-level problem stops ``main_ppo.run_ppo`` before Ray starts, in under
2 s, with a ConfigError naming the key and the file. Real parquet files, the real tiny tokenizer, real Ray module.

Before: an empty parquet failed after Ray and the workers started (torch's "num_samples=0", or "type null" for a
frame written by pandas); an unwritable checkpoint folder at the first save, after a full step; a corrupt tracker
after the workers started; an over-long prompt when its batch was drawn.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hybridrl.config import ConfigError, compose_config
from hybridrl.trainer.main_ppo import run_ppo

PREFLIGHT_SECONDS = 2.0


def _row(index: int, content: str) -> dict:
    return {
        "data_source": "arithmetic",
        "prompt": [{"role": "user", "content": content}],
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {"split": "train", "index": index},
    }


def _write(path, rows: list[dict], schema: pa.Schema | None = None) -> str:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), str(path))
    return str(path)


@pytest.fixture
def data_files(tmp_path):
    rows = [_row(i, f"What is {i} + 1?") for i in range(4)]
    return _write(tmp_path / "train.parquet", rows), _write(tmp_path / "test.parquet", rows[:2])


def _config(tiny_model_dir, data_files, tmp_path, *extra: str):
    train, test = data_files
    return compose_config("ppo_trainer", [
        f"data.train_files={train}", f"data.val_files={test}", "data.max_prompt_length=64",
        f"actor_rollout_ref.model.path={tiny_model_dir}", "trainer.device=cpu",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}", "trainer.save_freq=-1", *extra,
    ])


@pytest.fixture(autouse=True)
def ray_never_reached(monkeypatch):
    """The step after preflight (Ray: init_ray, the TaskRunner actor) fails the test if it is ever reached."""
    import ray

    import hybridrl.utils.ray_utils as ray_utils

    def reached_ray(*args, **kwargs):
        raise AssertionError("preflight let the run reach Ray (init_ray or ray.remote was called)")

    monkeypatch.setattr(ray_utils, "init_ray", reached_ray)
    monkeypatch.setattr(ray, "remote", reached_ray)


def _preflight_error(config) -> str:
    """Run main_ppo's run_ppo; it must fail in preflight: ConfigError, < 2 s, Ray neither started nor reached.

    (Another test of the session may have started the shared Ray cluster: "not started" = unchanged.)
    """
    import ray

    ray_was_up = ray.is_initialized()
    start = time.perf_counter()
    with pytest.raises(ConfigError) as raised:
        run_ppo(config)
    elapsed = time.perf_counter() - start
    assert ray.is_initialized() == ray_was_up
    assert elapsed < PREFLIGHT_SECONDS, f"preflight took {elapsed:.2f} s"
    return str(raised.value)


def test_empty_parquet_with_schema_names_the_key_and_file(tiny_model_dir, data_files, tmp_path):
    schema = pq.read_schema(data_files[0])
    empty = _write(tmp_path / "empty.parquet", [], schema=schema)  # before: torch's num_samples=0 after Ray started
    message = _preflight_error(_config(tiny_model_dir, data_files, tmp_path, f"data.train_files={empty}"))
    assert f"data.train_files: {empty} has no rows (0 prompts in column data.prompt_key='prompt')" in message


def test_empty_parquet_written_by_pandas_names_the_file_not_a_null_type(tiny_model_dir, data_files, tmp_path):
    import pandas as pd

    empty = str(tmp_path / "empty_pandas.parquet")
    pd.DataFrame({"data_source": [], "prompt": []}).to_parquet(empty)  # the prompt column has type null
    message = _preflight_error(_config(tiny_model_dir, data_files, tmp_path, f"data.val_files={empty}"))
    assert f"data.val_files: {empty} has no rows" in message and "null" not in message


def test_empty_parquet_in_the_dataset_itself(tiny_model_dir, tmp_path):
    import pandas as pd

    from hybridrl.utils.dataset.rl_dataset import RLHFDataset
    from hybridrl.utils.tokenizer import hf_tokenizer

    empty = str(tmp_path / "empty.parquet")
    pd.DataFrame({"prompt": []}).to_parquet(empty)
    with pytest.raises(ValueError, match=f"{empty} has no rows .*data.prompt_key='prompt'"):
        RLHFDataset(empty, hf_tokenizer(tiny_model_dir), {"max_prompt_length": 64})


def test_over_long_prompt_names_the_row_and_its_length(tiny_model_dir, tmp_path):
    rows = [_row(0, "short"), _row(1, "short too"), _row(2, "word " * 200), _row(3, "short")]
    files = (_write(tmp_path / "train.parquet", rows), _write(tmp_path / "test.parquet", rows[:1]))
    message = _preflight_error(_config(tiny_model_dir, files, tmp_path))  # data.truncation=error is the default
    assert f"data.train_files: row 2 of {files[0]} has a prompt of " in message
    assert "> data.max_prompt_length=64 with data.truncation=error (1 of 4 prompts are too long" in message
    assert "data.filter_overlong_prompts=True" in message


def test_over_long_prompts_pass_when_truncated_or_filtered(tiny_model_dir, tmp_path):
    from hybridrl.config.preflight import preflight_problems

    rows = [_row(0, "word " * 200)]
    files = (_write(tmp_path / "train.parquet", rows), _write(tmp_path / "test.parquet", rows))
    for extra in ("data.truncation=left", "data.filter_overlong_prompts=True"):
        assert preflight_problems(_config(tiny_model_dir, files, tmp_path, extra)) == []


def test_unwritable_checkpoint_folder_is_found_before_the_first_step(tiny_model_dir, data_files, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")  # a path below a file cannot be created, even as root
    folder = blocker / "ckpt"
    config = _config(tiny_model_dir, data_files, tmp_path, "trainer.save_freq=1", f"trainer.default_local_dir={folder}")
    message = _preflight_error(config)
    assert f"trainer.default_local_dir: checkpoints cannot be written to {folder}" in message


def test_checkpoint_probe_leaves_only_the_folder(tiny_model_dir, data_files, tmp_path):
    from hybridrl.config.preflight import check_checkpoint_folder

    assert check_checkpoint_folder(_config(tiny_model_dir, data_files, tmp_path, "trainer.save_freq=1")) == []
    assert os.listdir(tmp_path / "ckpt") == []  # the probe file was removed


def test_corrupt_tracker_file_is_found_before_ray(tiny_model_dir, data_files, tmp_path):
    (tmp_path / "ckpt").mkdir()
    tracker = tmp_path / "ckpt" / "latest_checkpointed_iteration.txt"
    tracker.write_text("step three\n")
    message = _preflight_error(_config(tiny_model_dir, data_files, tmp_path))  # resume_mode=auto (default)
    assert f"the tracker file {tracker} is corrupt (content 'step three'" in message


def test_resume_path_that_is_not_a_step_folder(tiny_model_dir, data_files, tmp_path):
    missing = tmp_path / "ckpt" / "global_step_7"
    config = _config(tiny_model_dir, data_files, tmp_path, "trainer.resume_mode=resume_path",
                     f"trainer.resume_from_path={missing}")
    assert f"trainer.resume_from_path: '{missing}' is not an existing global_step_N folder" in _preflight_error(config)


def test_a_valid_config_passes_preflight_quickly(tiny_model_dir, data_files, tmp_path):
    from hybridrl.config.preflight import preflight_problems

    config = _config(tiny_model_dir, data_files, tmp_path, "trainer.save_freq=1")
    start = time.perf_counter()
    assert preflight_problems(config) == []
    assert time.perf_counter() - start < PREFLIGHT_SECONDS


def _model_copy(tiny_model_dir, tmp_path) -> str:
    import shutil

    return shutil.copytree(tiny_model_dir, tmp_path / "model")


def test_truncated_model_safetensors_names_the_file_and_the_key(tiny_model_dir, data_files, tmp_path):
    model = _model_copy(tiny_model_dir, tmp_path)
    weights = model / "model.safetensors"
    full_size = weights.stat().st_size
    with open(weights, "r+b") as handle:  # a copy cut short: the header at the front is intact, the tensors end early
        handle.truncate(full_size // 2)
    config = _config(tiny_model_dir, data_files, tmp_path, f"actor_rollout_ref.model.path={model}")
    message = _preflight_error(config)  # before: safetensors' bare error from a worker, after Ray started
    assert f"actor_rollout_ref.model.path: {weights} is truncated: its header declares {full_size} bytes, " \
           f"the file has {full_size // 2}." in message
    assert "download or save the model again" in message


def _corrupt_data_page(path: str, column: str) -> None:
    """Overwrite bytes inside ``column``'s data page (its header and first values, within the column's chunk);
    the footer (schema, row counts) stays intact."""
    chunk = pq.ParquetFile(path).metadata.row_group(0)
    [meta] = [chunk.column(i) for i in range(chunk.num_columns) if chunk.column(i).path_in_schema == column]
    with open(path, "r+b") as handle:
        handle.seek(meta.data_page_offset)
        handle.write(b"\xff" * min(100, meta.total_compressed_size))


@pytest.mark.parametrize(
    ("leaf", "column", "split"),
    [
        ("prompt.list.element.content", "prompt", "train"),
        ("reward_model.ground_truth", "reward_model", "val"),  # before: found after Ray, by the dataset
    ],
)
def test_parquet_with_a_corrupt_data_page_names_the_file_and_column(tiny_model_dir, tmp_path, leaf, column, split):
    rows = [_row(i, f"What is {i} + 1? " * 5) for i in range(50)]
    files = (_write(tmp_path / "train.parquet", rows), _write(tmp_path / "test.parquet", rows))
    damaged = files[0] if split == "train" else files[1]
    _corrupt_data_page(damaged, leaf)
    assert pq.ParquetFile(damaged).metadata.num_rows == 50  # the footer still reads
    message = _preflight_error(_config(tiny_model_dir, files, tmp_path))  # before: a raw pyarrow OSError, no file
    assert f"data.{split}_files: cannot read column {column!r} of {damaged} (" in message
    assert "the file is corrupt: regenerate it" in message


def test_reward_file_with_a_syntax_error_is_found_before_ray(tiny_model_dir, data_files, tmp_path):
    reward = tmp_path / "my_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return 1.0 if solution_str == ground_truth else 0.0)\n")
    config = _config(tiny_model_dir, data_files, tmp_path, f"custom_reward_function.path={reward}")
    message = _preflight_error(config)  # before: found when the reward manager imported it, after Ray
    assert f"custom_reward_function.path: {reward}, line 2: SyntaxError: unmatched ')'" in message


def test_resume_folder_with_a_deleted_shard_is_found_before_ray(tiny_model_dir, data_files, tmp_path):
    from hybridrl.utils.checkpoint import mark_complete, write_checkpoint_tracker
    from hybridrl.utils.safe_state import save_state

    root = tmp_path / "ckpt"
    for step in (1, 2):  # what a one-rank FSDP save leaves
        actor = root / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 1}')
        for kind in ("model", "optim", "extra_state"):
            (actor / f"{kind}_world_size_1_rank_0.pt").write_bytes(b"")
        mark_complete(str(actor))
        save_state({}, str(root / f"global_step_{step}" / "data"))
        save_state({"rng": None}, str(root / f"global_step_{step}" / "trainer_state"))
    write_checkpoint_tracker(str(root), 2)
    (root / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt").unlink()
    config = _config(tiny_model_dir, data_files, tmp_path, "algorithm.adv_estimator=grpo")  # no critic
    message = _preflight_error(config)  # resume_mode=auto (default); before: found by a worker after ~130 s
    assert "is incomplete: missing ['actor/model_world_size_1_rank_0.pt']" in message
    assert f"trainer.resume_from_path={root / 'global_step_1'}" in message


def test_a_vision_language_policy_is_refused_before_ray_where_images_do_not_reach_it(
    tiny_vlm_dir, tiny_model_dir, data_files, tmp_path
):
    """Images reach a Qwen-VL or Idefics3 policy only on the sync hf rollout and the padded FSDP forwards, without a
    critic, reward model or LoRA: every other setting is named before Ray starts (a run would train blind)."""
    from hybridrl.config.preflight_model import check_text_only_policy

    vlm = tiny_vlm_dir("qwen2_vl")
    config = _config(tiny_model_dir, data_files, tmp_path, f"actor_rollout_ref.model.path={vlm}",
                     "actor_rollout_ref.rollout.name=vllm", "algorithm.adv_estimator=gae")
    message = _preflight_error(config)
    for key in ("rollout.name", "rollout.mode", "model.use_remove_padding", "critic.enable"):
        assert f"{key}: {vlm} is a vision-language model (qwen2_vl), and " in message, key
    assert "set actor_rollout_ref.rollout.mode=sync" in message
    supported = ("actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.mode=sync",
                 "actor_rollout_ref.model.use_remove_padding=False", "algorithm.adv_estimator=grpo")
    assert check_text_only_policy(_config(tiny_model_dir, data_files, tmp_path, f"actor_rollout_ref.model.path={vlm}",
                                          *supported)) == []
    idefics3 = tiny_vlm_dir("idefics3")  # the 1-D-rope family passes under the same restrictions
    message = _preflight_error(_config(tiny_model_dir, data_files, tmp_path, f"actor_rollout_ref.model.path={idefics3}"))
    assert f"model.use_remove_padding: {idefics3} is a vision-language model (idefics3), and " in message
    idefics3_run = _config(tiny_model_dir, data_files, tmp_path, f"actor_rollout_ref.model.path={idefics3}", *supported)
    assert check_text_only_policy(idefics3_run) == []
    smolvlm2 = tmp_path / "smolvlm2"  # SmolVLM2's own model type: not run here, so refused naming the family
    shutil.copytree(idefics3, smolvlm2)
    config_json = json.loads((smolvlm2 / "config.json").read_text())
    (smolvlm2 / "config.json").write_text(json.dumps({**config_json, "model_type": "smolvlm"}))
    smolvlm2_run = _config(tiny_model_dir, data_files, tmp_path, f"actor_rollout_ref.model.path={smolvlm2}")
    message = _preflight_error(smolvlm2_run)
    assert f"{smolvlm2} is a vision-language model (smolvlm): multimodal RL is not supported yet for this family" \
        in message

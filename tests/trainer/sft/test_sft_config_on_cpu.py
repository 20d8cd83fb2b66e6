"""Config checks of the SFT trainer: every problem at once, with the dotted key and the fix."""

import pytest

from hybridrl.config import ConfigError, compose_config
from hybridrl.trainer.sft.config import plan_batches, scheduler_config, validate_sft_config


def _config(*overrides):
    return compose_config("sft_trainer", list(overrides))


def test_defaults_are_valid_and_multiturn_is_supported():
    validate_sft_config(_config())
    validate_sft_config(_config("data.multiturn.enable=True"))


def test_bad_keys_error_clearly_and_together():
    with pytest.raises(ConfigError) as info:
        validate_sft_config(
            _config(
                "ulysses_sequence_parallel_size=2",
                "optim.lr_scheduler=wsd",
                "trainer.resume_mode=resume_path",
            ),
            world_size=2,
        )
    keys = {p.key for p in info.value.problems}
    assert keys == {
        "ulysses_sequence_parallel_size",
        "optim.lr_scheduler",
        "trainer.resume_from_path",
    }
    assert "ulysses_sequence_parallel_size>1 needs use_remove_padding=True" in str(info.value)


def test_sequence_parallel_checks():
    validate_sft_config(_config("ulysses_sequence_parallel_size=2", "use_remove_padding=True"), world_size=4)
    with pytest.raises(ConfigError) as info:  # both problems at once: no packing, and 2 does not divide 3
        validate_sft_config(_config("ulysses_sequence_parallel_size=2"), world_size=3)
    messages = [str(p) for p in info.value.problems]
    assert len(messages) == 2
    assert "2 given, but ulysses_sequence_parallel_size>1 needs use_remove_padding=True" in messages[0]
    assert messages[1].startswith("ulysses_sequence_parallel_size: 2 does not divide the world size 3.")
    # torchrun's WORLD_SIZE is used when no world size is passed; plan_batches checks it again
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WORLD_SIZE", "3")
        with pytest.raises(ConfigError, match="does not divide the world size 3"):
            validate_sft_config(_config("ulysses_sequence_parallel_size=2", "use_remove_padding=True"))
    with pytest.raises(ConfigError, match="does not divide the world size 3"):
        plan_batches(_config("ulysses_sequence_parallel_size=2", "use_remove_padding=True"), world_size=3)


def test_batch_plan_counts_data_parallel_ranks_under_sequence_parallelism():
    sp = ("ulysses_sequence_parallel_size=2", "use_remove_padding=True")
    plan = plan_batches(_config("data.train_batch_size=32", "data.micro_batch_size_per_gpu=4", *sp), world_size=4)
    # world 4 = dp 2 × sp 2: 32 global / 2 dp ranks = 16 per dp rank = 4 micro batches of 4
    assert (plan.dp_size, plan.sp_size, plan.per_rank_batch, plan.grad_accum) == (2, 2, 16, 4)
    # 3 samples on 2 ranks: not a multiple of the world size, but of dp = 2 / 2 = 1 (both ranks see all 3)
    plan = plan_batches(_config("data.train_batch_size=3", "data.micro_batch_size_per_gpu=3", *sp), world_size=2)
    assert (plan.dp_size, plan.per_rank_batch, plan.grad_accum) == (1, 3, 1)
    with pytest.raises(ConfigError, match="data-parallel size 2"):
        plan_batches(_config("data.train_batch_size=5", *sp), world_size=4)


def test_batch_plan_and_divisibility_errors():
    plan = plan_batches(_config("data.train_batch_size=32", "data.micro_batch_size_per_gpu=4"), world_size=2)
    # 32 global / 2 ranks = 16 per rank = 4 micro batches of 4
    assert (plan.per_rank_batch, plan.micro_batch, plan.grad_accum) == (16, 4, 4)
    with pytest.raises(ConfigError, match="data.train_batch_size"):
        plan_batches(_config("data.train_batch_size=33"), world_size=2)
    with pytest.raises(ConfigError, match="data.micro_batch_size_per_gpu"):
        plan_batches(_config("data.train_batch_size=32", "data.micro_batch_size_per_gpu=5"), world_size=2)
    # the deprecated global micro batch size is divided by the world size
    assert plan_batches(_config("data.train_batch_size=32", "data.micro_batch_size=8"), world_size=2).micro_batch == 4


def test_scheduler_config_maps_sft_names_to_the_engine():
    optim = scheduler_config(_config("optim.warmup_steps_ratio=0.2").optim, total_training_steps=50)
    assert optim["lr_warmup_steps_ratio"] == 0.2 and optim["warmup_style"] == "cosine"
    assert optim["total_training_steps"] == 50 and optim["lr_warmup_steps"] == -1

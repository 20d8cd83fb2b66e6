"""trainer/ppo/reward.py: load_reward_manager (by name, custom function + reward_kwargs, dapo keys),
get_custom_reward_fn errors, compute_reward output."""

import pytest
import torch
from omegaconf import OmegaConf
from rm_testlib import make_batch, valid_lengths

from hybridrl.trainer.ppo.reward import compute_reward, compute_reward_async, get_custom_reward_fn, load_reward_manager
from hybridrl.workers.reward_manager import DAPORewardManager, NaiveRewardManager, PrimeRewardManager


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def config(**overrides):
    base = {
        "data": {"reward_fn_key": "data_source", "max_response_length": 12},
        "reward_model": {"reward_manager": "naive"},
        "custom_reward_function": {"path": None, "name": "compute_score"},
    }
    return OmegaConf.merge(OmegaConf.create(base), OmegaConf.create(overrides))


@pytest.fixture
def reward_file(tmp_path):
    path = tmp_path / "my_reward.py"
    path.write_text(
        "def my_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):\n"
        "    return {'score': scale * float(ground_truth in solution_str), 'len': len(solution_str)}\n"
    )
    return str(path)


@pytest.fixture
def batch(tokenizer):
    return make_batch(tokenizer, ["What is 3 + 4?", "What is 1 + 1?"], ["7", "3"], ["7", "2"], ["mysource"] * 2)


def test_default_manager_uses_default_compute_score(tokenizer, batch):
    manager = load_reward_manager(config(), tokenizer, num_examine=0)
    assert isinstance(manager, NaiveRewardManager)
    batch.non_tensor_batch["data_source"][:] = "arithmetic"
    reward, extra = compute_reward(batch, manager)
    assert reward.sum(-1).tolist() == [1.0, 0.0] and extra == {}


def test_custom_reward_function_with_kwargs(tokenizer, batch, reward_file):
    cfg = config(custom_reward_function={"path": reward_file, "name": "my_score", "reward_kwargs": {"scale": 3.0}})
    manager = load_reward_manager(cfg, tokenizer, num_examine=0)
    reward, extra = compute_reward(batch, manager)
    lengths = valid_lengths(batch)
    assert reward[0, lengths[0] - 1].item() == 3.0 and reward.sum().item() == 3.0
    assert extra["score"] == [3.0, 0.0] and extra["len"] == [1, 1]
    assert compute_reward_async(batch, reward_fn=manager)[0].sum().item() == 3.0


def test_custom_reward_function_errors(reward_file, tmp_path):
    with pytest.raises(FileNotFoundError, match="custom_reward_function.path"):
        get_custom_reward_fn(config(custom_reward_function={"path": str(tmp_path / "missing.py")}))
    with pytest.raises(AttributeError, match="'nope'.*my_score"):
        get_custom_reward_fn(config(custom_reward_function={"path": reward_file, "name": "nope"}))
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('no deps')\n")
    with pytest.raises(RuntimeError, match="broken.py.*no deps"):
        get_custom_reward_fn(config(custom_reward_function={"path": str(broken), "name": "x"}))
    assert get_custom_reward_fn(config()) is None


def test_dapo_gets_length_and_buffer_from_config(tokenizer):
    cfg = config(
        reward_model={
            "reward_manager": "dapo",
            "overlong_buffer": {"enable": True, "len": 4, "penalty_factor": 0.5, "log": False},
        }
    )
    manager = load_reward_manager(cfg, tokenizer, num_examine=0)
    assert isinstance(manager, DAPORewardManager)
    assert manager.max_resp_len == 12 and manager.overlong_buffer_cfg["len"] == 4
    # a config without reward_model.overlong_buffer: no penalty
    assert (
        load_reward_manager(config(reward_model={"reward_manager": "dapo"}), tokenizer, 0).overlong_buffer_cfg is None
    )


def test_manager_kwargs_and_unknown_name(tokenizer):
    manager = load_reward_manager(config(reward_model={"reward_manager": "prime"}), tokenizer, 0, timeout_s=5.0)
    assert isinstance(manager, PrimeRewardManager) and manager.timeout_s == 5.0
    zero = load_reward_manager(config(), tokenizer, 0, on_error="zero")
    assert zero.on_error == "zero"
    with pytest.raises(ValueError, match="reward_model.reward_manager"):
        load_reward_manager(config(reward_model={"reward_manager": "bogus"}), tokenizer, 0)


def test_compute_reward_tensor_only_manager():
    def legacy(data):  # an old-style reward fn without return_dict
        return torch.ones(2, 3)

    reward, extra = compute_reward(None, legacy)
    assert reward.shape == (2, 3) and extra == {}

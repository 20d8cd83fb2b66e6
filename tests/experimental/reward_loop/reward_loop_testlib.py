"""Scoring functions written to a file (the reward loop loads them by path, as a user's) and configs."""

from omegaconf import OmegaConf

SCORES_PY = '''
import asyncio
import time

from hybridrl.utils.reward_score import default_compute_score

IN_FLIGHT = {"now": 0, "max": 0}


def sync_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return default_compute_score(data_source, solution_str, ground_truth, extra_info)


async def async_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    await asyncio.sleep(0.01)
    return default_compute_score(data_source, solution_str, ground_truth, extra_info)


def dict_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return {"score": default_compute_score(data_source, solution_str, ground_truth, extra_info),
            "chars": len(solution_str)}


async def counting_judge(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    IN_FLIGHT["now"] += 1
    IN_FLIGHT["max"] = max(IN_FLIGHT["max"], IN_FLIGHT["now"])
    await asyncio.sleep(0.05)
    IN_FLIGHT["now"] -= 1
    return 1.0


async def flaky_judge(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """ground_truth picks the failure: raise, hang, nan, none, text, nodict; else 0.5."""
    if ground_truth == "raise":
        raise RuntimeError("judge unreachable")
    if ground_truth == "hang":
        await asyncio.sleep(30)
    if ground_truth == "nan":
        return float("nan")
    if ground_truth == "none":
        return None
    if ground_truth == "text":
        return "seven"
    if ground_truth == "nodict":
        return {"verdict": "good"}
    return 0.5


def slow_sync(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if ground_truth == "hang":
        time.sleep(3)
    return 0.25


def pid_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    import os

    return {"score": 1.0, "pid": os.getpid()}
'''

MANAGER_PY = """
from hybridrl.experimental.reward_loop.reward_manager.base import RewardManagerBase


class LengthRewardManager(RewardManagerBase):
    async def run_single(self, data):
        fields = self.sample_fields(data)
        return {"reward_score": float(fields.valid_response_length), "reward_extra_info": {"length": 1}}
"""


def write_scores(tmp_path):
    path = tmp_path / "scores.py"
    path.write_text(SCORES_PY)
    return str(path)


def loop_config(score_path=None, score_name="compute_score", manager="naive", reward=None, reward_kwargs=None):
    """The keys the reward loop reads, spelt as a resolved hybridrl config holds them."""
    return OmegaConf.create(
        {
            "reward": {
                "num_workers": 2,
                "reward_manager": {
                    "source": "register",
                    "name": manager,
                    "module": {"path": None, "name": "custom_reward_manager"},
                },
                **(reward or {}),
            },
            "reward_model": {"reward_manager": manager, "reward_kwargs": reward_kwargs or {}, "enable": False},
            "custom_reward_function": {"path": score_path, "name": score_name, "reward_kwargs": {}},
            "data": {"max_response_length": 12, "reward_fn_key": "data_source"},
        }
    )

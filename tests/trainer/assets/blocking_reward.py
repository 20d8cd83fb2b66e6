"""Arithmetic reward that blocks once a watched file exists (used to stop a run at a known step)."""

import os
import time

from hybridrl.utils.reward_score import default_compute_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    watched = os.environ.get("HYBRIDRL_TEST_BLOCK_WHEN_EXISTS")
    if watched and os.path.exists(watched):
        time.sleep(600)  # the test sends SIGTERM while we wait here
    return default_compute_score(data_source, solution_str, ground_truth, extra_info)

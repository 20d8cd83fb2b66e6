"""Reward = the response's length in characters (the fake rollout's responses differ in length)."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(len(solution_str))

"""Deterministic reward for fake-rollout tests: constant on even answers, varying with the response otherwise.

Prompts whose answer is even score 1.0 for every response (a zero-variance group DAPO drops); the others score
the response's length in characters (the fake rollout gives the responses of a group different lengths).
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if int(ground_truth) % 2 == 0:
        return 1.0
    return float(len(solution_str))

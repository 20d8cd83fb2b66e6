"""A reward a random tiny model can climb: the share of non-space response characters that are digits.

Scores are fractions, so two sampled responses rarely tie and most prompts yield a DPO pair.
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    text = solution_str.replace(" ", "")
    return sum(ch.isdigit() for ch in text) / max(len(text), 1)

"""A reward a random tiny model can climb: the share of response characters that are digits.

``acc`` (what DAPO's filter reads) is 1 when over 40% of the characters are digits, so groups of a random
model mix 0s and 1s sometimes, not always: dynamic sampling has groups to drop and groups to keep.
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    text = solution_str.replace(" ", "")
    share = sum(ch.isdigit() for ch in text) / max(len(text), 1)
    return {"score": share, "acc": float(share > 0.4)}

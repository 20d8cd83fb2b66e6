"""Closest-valid-key suggestions for misspelled config keys (difflib)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest_keys(key: str, valid_keys: Iterable[str], limit: int = 3) -> list[str]:
    """Valid dotted keys closest to ``key``, best first.

    Siblings under the longest existing parent are preferred (``trainer.totl_epochs`` ->
    ``trainer.total_epochs``); otherwise the whole dotted key is matched.
    """
    valid = sorted(set(valid_keys))
    parent, _, leaf = key.rpartition(".")
    while parent:
        siblings = [k for k in valid if k.startswith(parent + ".")]
        if siblings:
            tails = {k[len(parent) + 1 :]: k for k in siblings}
            hits = difflib.get_close_matches(key[len(parent) + 1 :], list(tails), n=limit, cutoff=0.6)
            if hits:
                return [tails[h] for h in hits]
            break
        parent = parent.rpartition(".")[0]
    return difflib.get_close_matches(key, valid, n=limit, cutoff=0.6) or _same_leaf(leaf, valid, limit)


def _same_leaf(leaf: str, valid: list[str], limit: int) -> list[str]:
    """Keys anywhere in the tree ending with the same (or a close) leaf name."""
    by_leaf: dict[str, list[str]] = {}
    for k in valid:
        by_leaf.setdefault(k.rpartition(".")[2], []).append(k)
    hits = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.8)
    return by_leaf[hits[0]][:limit] if hits else []


def unknown_key_fix(key: str, valid_keys: Iterable[str], override: str | None = None) -> str:
    """The 'Fix:' text for an unknown key: the closest valid key, or how to add a new one."""
    hits = closest_keys(key, valid_keys)
    adding = f"'+{override.lstrip('+')}'" if override else f"'+{key}=...'"
    if hits:
        alternatives = " or ".join(f"'{h}'" for h in hits)
        return f"did you mean {alternatives}? To add a new key on purpose, write {adding}."
    return f"check the spelling against configs/*.yaml; to add a new key on purpose, write {adding}."

"""Do verl's example command lines compose with hybridrl's config tree?

For every ``examples/**/*.sh`` of a verl release that calls ``main_ppo``, the script recovers the command
line the example would run and composes its overrides with hybridrl's own code (``prepare_cli_argv``, then
``compose_config``), exactly as ``python -m hybridrl.trainer.main_ppo`` would. It prints a JSON summary: how
many scripts compose, the Megatron ones separately, the most frequent missing keys and every failure.

    python scripts/dev/verl_examples_compose.py                      # verl v0.9.0 from the local mirror
    python scripts/dev/verl_examples_compose.py --ref v0.9.0 --repo /path/to/verl.git --details

How a command line is recovered: the script runs under bash with an empty ``PATH``, in a scratch folder, with
``set`` disabled (no ``-e``/``-u``). Shell variables, arrays, arithmetic and line continuations expand as
they would for a user; every external command (``python3``, ``ray``, ``nvidia-smi``, ...) reaches bash's
``command_not_found_handle``, which records the arguments of a call naming ``main_ppo`` and does nothing
else. A variable the script reads from the environment (``$MODEL_PATH`` unset) expands to a placeholder
path, so values stay well-formed; the keys are what this measures.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_REPO = "/work/.mirror/verl-project+verl/repo"
ENTRY_MARK = "main_ppo"
# Environment variables the examples read (a user would set them); a placeholder keeps values well-formed.
PLACEHOLDER = "/placeholder"

# bash prelude: no external command runs; a call naming main_ppo has its arguments recorded, one per line
# (NUL-separated), after the token naming the entry point.
_PRELUDE = r"""
set() { :; }
command_not_found_handle() {
    local found=0 arg
    for arg in "$@"; do
        if [[ $found == 1 ]]; then printf '%s\0' "$arg" >> "$HYBRIDRL_CALLS"; fi
        if [[ $found == 0 && $arg == *main_ppo* ]]; then found=1; printf 'CALL\0' >> "$HYBRIDRL_CALLS"; fi
    done
    return 0
}
"""


# ---------------------------------------------------------------------------------------------- scripts
def list_scripts(repo: str, ref: str) -> list[str]:
    """Paths of ``examples/**/*.sh`` at ``ref`` whose text names ``main_ppo``."""
    names = _git(repo, "ls-tree", "-r", "--name-only", ref, "examples").splitlines()
    return [n for n in names if n.endswith(".sh") and ENTRY_MARK in _git(repo, "show", f"{ref}:{n}")]


def recover_calls(text: str) -> list[list[str]]:
    """The argument lists of every ``main_ppo`` call the script makes (see the module docstring)."""
    with tempfile.TemporaryDirectory() as scratch:
        calls_file = Path(scratch) / "calls"
        script = Path(scratch) / "script.sh"
        script.write_text(_PRELUDE + text)
        env = {"PATH": str(Path(scratch) / "no-commands"), "HOME": PLACEHOLDER, "HYBRIDRL_CALLS": str(calls_file)}
        env.update({name: PLACEHOLDER for name in _read_variables(text)})
        subprocess.run(["/bin/bash", str(script)], cwd=scratch, env=env, capture_output=True, timeout=30, check=False)
        raw = calls_file.read_text() if calls_file.exists() else ""
    calls: list[list[str]] = []
    for token in raw.split("\0"):
        if token == "CALL":
            calls.append([])
        elif calls and token:
            calls[-1].append(token)
    return calls


def _read_variables(text: str) -> set[str]:
    """Upper-case names a script reads as ``$NAME``/``${NAME...}``: a user's environment would set them."""
    import re

    names = set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", text))
    assigned = set(re.findall(r"^\s*(?:export\s+)?([A-Z][A-Z0-9_]*)=", text, flags=re.M))
    return names - assigned


# ---------------------------------------------------------------------------------------------- compose
def compose_call(argv: list[str]) -> str | None:
    """None if the command line composes with hybridrl's config tree, else the first error's text."""
    from hybridrl.config.entry import compose_config
    from hybridrl.config.errors import ConfigError
    from hybridrl.config.overrides import prepare_cli_argv, split_cli_overrides

    try:
        argv = prepare_cli_argv(list(argv), "ppo_trainer")
        overrides, _ = split_cli_overrides(argv)
        compose_config(_config_name(argv), overrides)
    except ConfigError as error:
        return str(error)
    except Exception as error:  # noqa: BLE001 - Hydra's own errors (unknown group, bad syntax) count as failures
        return f"{type(error).__name__}: {error}"
    return None


def _config_name(argv: list[str]) -> str:
    """The shipped config the command line selects (``--config-name``; verl's config folder is ours)."""
    from hydra._internal.utils import get_args_parser

    name = get_args_parser().parse_known_args(argv)[0].config_name or "ppo_trainer"
    return name.removesuffix(".yaml")


def missing_keys(error: str) -> list[str]:
    """The dotted keys an error names as unknown (``[key] unknown key: ...`` lines of a ConfigError)."""
    import re

    return re.findall(r"^\s*-?\s*\[?([\w.@+~-]+)\]?:? unknown key", error, flags=re.M) or re.findall(
        r"Key '([\w.]+)' is not in struct", error
    )


def is_megatron(calls: list[list[str]]) -> bool:
    flat = " ".join(arg for call in calls for arg in call)
    return "model_engine=megatron" in flat or "ppo_megatron_trainer" in flat or ".megatron." in flat


# ---------------------------------------------------------------------------------------------- report
def measure(repo: str, ref: str) -> dict:
    rows = []
    for path in list_scripts(repo, ref):
        calls = recover_calls(_git(repo, "show", f"{ref}:{path}"))
        errors = [error for error in (compose_call(call) for call in calls) if error]
        rows.append({"script": path, "calls": len(calls), "megatron": is_megatron(calls), "errors": errors})
    return summarise(rows)


def summarise(rows: list[dict]) -> dict:
    ok = [r for r in rows if r["calls"] and not r["errors"]]
    megatron = [r for r in rows if r["megatron"]]
    counts: collections.Counter[str] = collections.Counter()
    for row in rows:
        counts.update({key for error in row["errors"] for key in missing_keys(error)})
    return {
        "composing": len(ok),
        "total": len(rows),
        "megatron_composing": sum(1 for r in megatron if r in ok),
        "megatron_total": len(megatron),
        "no_call_recovered": [r["script"] for r in rows if not r["calls"]],
        "top_missing_keys": counts.most_common(25),
        "failing": {r["script"]: r["errors"] for r in rows if r["errors"]},
    }


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default=os.environ.get("VERL_REPO", DEFAULT_REPO), help="verl git dir")
    parser.add_argument("--ref", default="v0.9.0")
    parser.add_argument("--details", action="store_true", help="print every failing script's errors")
    args = parser.parse_args()
    summary = measure(args.repo, args.ref)
    if not args.details:
        summary["failing"] = {path: len(errors) for path, errors in summary["failing"].items()}
    json.dump(summary, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

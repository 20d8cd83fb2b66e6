"""Preflight of the Python files a config names: each compiles (compiled, not run: no code executes here).

A syntax error in ``custom_reward_function.path`` surfaced only when the reward manager imported the file, after
Ray, the TaskRunner and the workers had started; compiling it names the file and the line in milliseconds.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig

from hybridrl.config.access import get
from hybridrl.config.errors import ConfigProblem

__all__ = ["CODE_FILE_KEYS", "check_code_files", "syntax_problem"]

CODE_FILE_KEYS = ("custom_reward_function.path",)


def check_code_files(config: DictConfig) -> list[ConfigProblem]:
    """A problem per file of ``CODE_FILE_KEYS`` that does not compile (missing files are checks_env's)."""
    problems = []
    for key in CODE_FILE_KEYS:
        path = os.path.abspath(os.path.expanduser(str(get(config, key) or "")))
        if not get(config, key) or not os.path.isfile(path):
            continue
        problem = syntax_problem(path)
        if problem is not None:
            problems.append(ConfigProblem(key, problem, f"fix the file, or point {key} at another one."))
    return problems


def syntax_problem(path: str) -> str | None:
    """``"<path>, line L: <error>"`` when the Python file at ``path`` does not compile, else None."""
    with open(path, "rb") as handle:
        source = handle.read()
    try:
        compile(source, path, "exec", dont_inherit=True)
    except SyntaxError as error:  # IndentationError and TabError are SyntaxErrors
        return f"{path}, line {error.lineno}: {type(error).__name__}: {error.msg} (the file does not compile)"
    except ValueError as error:  # null bytes in the source
        return f"{path}: {error} (the file does not compile)"
    return None

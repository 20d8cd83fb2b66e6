"""One sampling resolver: only ``hybridrl.generation.sampling.resolve_sampling`` works out sampling settings.

An AST scan of the package flags every function (method, nested function, module body) other than the resolver
that shows a sign of resolving sampling settings itself:

- it builds a ``SamplingParams`` or a ``RequestParams`` (the names imported from ``hybridrl.generation``, aliases
  followed);
- it calls ``dataclasses.replace`` with a ``SamplingParams`` field as a keyword (``temperature=``, ``top_k=``, ...);
- it reads ``rollout.val_kwargs``' sampling values: ``val_kwargs.temperature`` / ``top_k`` / ``top_p``,
  ``val_kwargs`` by string key, or ``val_kwargs`` taken as a value (``source = cfg.val_kwargs if validate else cfg``:
  the values are then read through the alias).

The trainer reading ``val_kwargs.n`` (how often it repeats a validation prompt) and ``val_kwargs.do_sample`` (the
``meta_info["do_sample"]`` of its call) passes the call's layer on; it resolves nothing. An engine building its own
library's parameters (``vllm.SamplingParams(**...)``) translates the resolved ones. Neither is flagged.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from pathlib import Path

import hybridrl
from hybridrl.generation.records import SamplingParams

PACKAGE = Path(hybridrl.__file__).resolve().parent
RESOLVER = ("generation/sampling.py", "resolve_sampling")
RECORDS = {"SamplingParams", "RequestParams"}
SAMPLING_FIELDS = {field.name for field in dataclasses.fields(SamplingParams)}
PASSED_ON_KEYS = {"n", "do_sample"}  # val_kwargs keys the trainer reads to shape its call (see the docstring)


def _record_names(tree: ast.Module) -> set[str]:
    """Local names of the records (``from hybridrl.generation... import SamplingParams as SP``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hybridrl.generation"):
            names.update(alias.asname or alias.name for alias in node.names if alias.name in RECORDS)
    return names


def _replace_names(tree: ast.Module) -> set[str]:
    """Local names of ``dataclasses.replace`` (``from dataclasses import replace [as r]``)."""
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "dataclasses"
        for alias in node.names
        if alias.name == "replace"
    }


def _val_kwargs_read(node: ast.AST, parent: ast.AST) -> str | None:
    """A read of ``val_kwargs`` that is not passing it on: ``val_kwargs.temperature``, ``cfg.val_kwargs if validate
    else cfg`` (the values read through an alias), ``val_kwargs["top_p"]``, ``config["val_kwargs"]``, ...

    Passing on is not resolving: ``val_kwargs.n`` / ``val_kwargs.do_sample`` (the trainer's repeat count and its
    call's ``meta_info["do_sample"]``), ``f(cfg.val_kwargs)`` (an argument), ``self.val_kwargs = val_kwargs``."""
    if isinstance(node, (ast.Subscript, ast.Call)):
        key = node.slice if isinstance(node, ast.Subscript) else (node.args[0] if node.args else None)
        is_get = isinstance(node, ast.Subscript) or (isinstance(node.func, ast.Attribute) and node.func.attr == "get")
        if is_get and isinstance(key, ast.Constant) and key.value == "val_kwargs":
            return "reads val_kwargs"
        return None
    named = (isinstance(node, ast.Attribute) and node.attr == "val_kwargs") or (
        isinstance(node, ast.Name) and node.id == "val_kwargs"
    )
    if not named or not isinstance(node.ctx, ast.Load):
        return None
    if isinstance(parent, ast.Attribute):
        return None if parent.attr in PASSED_ON_KEYS else f"reads val_kwargs.{parent.attr}"
    if isinstance(parent, ast.Call) and node is not parent.func:
        return None
    if isinstance(parent, ast.keyword) or (isinstance(parent, ast.Assign) and isinstance(node, ast.Name)):
        return None
    return "reads val_kwargs"


def _signals(node: ast.AST, parent: ast.AST, records: set[str], replaces: set[str]) -> list[str]:
    """What ``node`` (one AST node, below ``parent``) does that only the resolver may do."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in records:
            return [f"builds {func.id}"]
        is_replace = (isinstance(func, ast.Name) and func.id in replaces) or (
            isinstance(func, ast.Attribute)
            and func.attr == "replace"
            and isinstance(func.value, ast.Name)
            and func.value.id == "dataclasses"
        )
        if is_replace and {k.arg for k in node.keywords} & SAMPLING_FIELDS:
            return ["dataclasses.replace of sampling fields"]
    read = _val_kwargs_read(node, parent)
    return [read] if read else []


def scan_source(source: str, relative: str) -> list[tuple[str, str, int, str]]:
    """``(file, function, line, signal)`` for every sign of sampling resolution outside the resolver."""
    tree = ast.parse(source)
    records, replaces = _record_names(tree), _replace_names(tree)
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                visit(child, child.name if function == "<module>" else f"{function}.{child.name}")
                continue
            if (relative, function) != RESOLVER:
                line = getattr(child, "lineno", getattr(node, "lineno", 0))
                found.extend((relative, function, line, s) for s in _signals(child, node, records, replaces))
            visit(child, function)

    visit(tree, "<module>")
    return found


def scan_package() -> list[tuple[str, str, int, str]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += scan_source(path.read_text(), path.relative_to(PACKAGE).as_posix())
    return found


def test_only_the_resolver_resolves_sampling_settings():
    found = scan_package()
    assert not found, "sampling settings worked out outside hybridrl.generation.sampling.resolve_sampling:\n  " + (
        "\n  ".join(f"{file}:{line} {function}: {signal}" for file, function, line, signal in found)
    )


def test_the_resolver_is_where_the_scan_looks():
    source = (PACKAGE / RESOLVER[0]).read_text()
    tree = ast.parse(source)
    names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert RESOLVER[1] in names
    # the resolver itself shows the signals: without its exemption the scan would flag it
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    records = _record_names(tree) | {"SamplingParams"}
    exempt_removed = [
        hit for node in ast.walk(tree) if node in parents for hit in _signals(node, parents[node], records, set())
    ]
    assert any("val_kwargs" in hit for hit in exempt_removed) and "builds SamplingParams" in exempt_removed


# ---------------------------------------------------------------------------- a planted second resolver is caught

PLANTED = textwrap.dedent(
    """
    from dataclasses import replace as update
    from hybridrl.generation.records import SamplingParams as Params

    def my_resolver(rollout_config, meta_info):
        params = Params(temperature=rollout_config.temperature, top_k=-1, top_p=1.0, do_sample=True,
                        max_new_tokens=8, n=1, ignore_eos=False, eos_token_ids=(2,), pad_token_id=0,
                        calculate_log_probs=False)
        if meta_info.get("validate"):
            params = update(params, temperature=rollout_config.val_kwargs.temperature)
        return params

    class Loop:
        def sampling(self, config):
            return {"top_p": config["val_kwargs"]["top_p"], "top_k": config.get("val_kwargs").top_k}

    def call_params(rollout_config, validate):
        source = rollout_config.val_kwargs if validate else rollout_config
        return {"temperature": float(source.temperature)}
    """
)


def test_a_planted_second_resolver_is_caught():
    found = {(function, signal) for _, function, _, signal in scan_source(PLANTED, "experimental/planted.py")}
    assert found == {
        ("my_resolver", "builds Params"),
        ("my_resolver", "dataclasses.replace of sampling fields"),
        ("my_resolver", "reads val_kwargs.temperature"),
        ("Loop.sampling", "reads val_kwargs"),
        ("call_params", "reads val_kwargs"),
    }


def test_the_same_code_inside_the_resolver_is_not_flagged():
    planted_as_resolver = PLANTED.replace("def my_resolver", "def resolve_sampling").replace("class Loop", "class L")
    found = scan_source(planted_as_resolver, RESOLVER[0])
    assert {function for _, function, _, _ in found} == {"L.sampling", "call_params"}


def test_what_is_not_resolution_is_not_flagged():
    source = textwrap.dedent(
        """
        import dataclasses

        class Validator:
            def __init__(self, val_kwargs):
                self.val_kwargs = val_kwargs

        def repeat(batch, val_kwargs, vllm, params, limits, config):
            batch = batch.repeat(val_kwargs.n)
            meta = {"do_sample": val_kwargs.do_sample, "validate": True}
            Validator(config.actor_rollout_ref.rollout.val_kwargs)
            Validator(val_kwargs=config.val_kwargs)
            native = vllm.SamplingParams(**params)
            return dataclasses.replace(limits, timeout_s=3), "a.b".replace(".", "/"), native, meta
        """
    )
    assert scan_source(source, "trainer/ppo/validation_like.py") == []

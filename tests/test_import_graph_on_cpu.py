"""The package's module-level import graph has no cycles and follows the layering of ARCHITECTURE.md §3.

The graph is read from the source (no imports are executed): every ``import x`` / ``from x import y`` that
runs when a module is imported (module body, class bodies, ``try``/``if``/``with`` blocks) is an edge; imports
inside functions run later and are not edges, nor are those under ``if TYPE_CHECKING:``. ``from pkg import
name`` points at ``pkg.name`` when that is a module, else at ``pkg`` (the package ``__init__`` defining it).
Importing ``a.b.c`` also runs the ``__init__`` of ``a.b`` (and ``a``), so those are edges too, except the
importer's own enclosing packages (already being imported when it runs).

A function-level import that closes a cycle only hides it (the cycle runs on the first call), so the
cycle test is repeated with function bodies read too; importing an optional heavy dependency (vllm, peft,
...) lazily is fine, it is not a package module.

Run as a script to print the graph's cycles: ``python tests/test_import_graph_on_cpu.py``.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "hybridrl"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE

# Cycles through function-level imports allowed, each as the sorted modules of its strongly connected component:
# none (the last one, protocol <-> protocol_extras, went with the hybridrl/protocol/ package).
ALLOWED_FUNCTION_LEVEL_CYCLES: set[tuple[str, ...]] = set()


# ---------------------------------------------------------------------------- reading the graph


def module_files(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file of the package (``__init__`` names its package)."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _statements(body: list[ast.stmt], functions: bool) -> Iterator[ast.stmt]:
    """Statements that run when the module is imported (``functions``: and those of function bodies);
    ``if TYPE_CHECKING:`` blocks never run."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if functions:
                yield from _statements(node.body, functions)
            continue
        yield node
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _statements(node.body, functions)
            yield from _statements(node.orelse, functions)
        elif isinstance(node, ast.ClassDef):
            yield from _statements(node.body, functions)
        elif isinstance(node, (ast.Try, ast.With, ast.For, ast.While)):
            for block in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(node, block, []), functions)
            for handler in getattr(node, "handlers", []):
                yield from _statements(handler.body, functions)


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names (relative levels resolved against ``module``)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _with_parent_packages(module: str, targets: set[str], known: set[str]) -> set[str]:
    """``targets`` plus the packages whose ``__init__`` importing them runs (not ``module``'s own ancestors)."""
    edges = set(targets)
    for target in targets:
        parts = target.split(".")
        for end in range(1, len(parts)):
            package = ".".join(parts[:end])
            if package in known and not module.startswith(package + "."):
                edges.add(package)
    return edges


def module_imports(module: str, path: Path, known: set[str], parents: bool, functions: bool) -> set[str]:
    """The package modules ``module`` imports at import time (``parents``: with the packages run on the way;
    ``functions``: in function bodies too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in _statements(tree.body, functions):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve_from(module, is_package, node)
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in known else source)
    targets = {target for target in targets if target in known}
    return (_with_parent_packages(module, targets, known) if parents else targets) - {module}


@functools.lru_cache(maxsize=4)
def import_graph(parents: bool = True, functions: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports at module level (cached: read-only for callers).

    ``parents=False``: only the modules the import statements name (no enclosing packages);
    ``functions=True``: imports inside functions count too.
    """
    files = module_files()
    known = set(files)
    return {module: module_imports(module, path, known, parents, functions) for module, path in files.items()}


# ---------------------------------------------------------------------------- cycles


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (each one holds a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the component's first module, as ``[a, b, ..., a]``."""
    start, members = component[0], set(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        next_frontier = []
        for node in frontier:
            for target in sorted(graph[node] & members):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if target not in parents:
                    parents[target] = node
                    next_frontier.append(target)
        frontier = next_frontier
    raise AssertionError(f"no cycle through {start}")


def describe_cycles(graph: dict[str, set[str]], components: list[list[str]]) -> str:
    lines = []
    for component in components:
        lines.append(f"- {len(component)} modules: {', '.join(component)}")
        lines.append(f"  e.g. {' -> '.join(shortest_cycle(graph, component))}")
    return "\n".join(lines)


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Folder (package) -> the other folders its modules import: a module belongs to the package holding it;
    the top-level modules (``hybridrl.protocol``, ``hybridrl.model_merger``, ...) stand for themselves."""
    files = module_files()

    def folder(module: str) -> str:
        if files[module].name == "__init__.py" or module.count(".") == 1:
            return module
        return module.rpartition(".")[0]

    folders: dict[str, set[str]] = {folder(module): set() for module in graph}
    for module, targets in graph.items():
        folders[folder(module)].update(folder(target) for target in targets if folder(target) != folder(module))
    return folders


# ---------------------------------------------------------------------------- tests


def _in(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _edges_from(graph: dict[str, set[str]], source_prefix: str) -> Iterator[tuple[str, str]]:
    for module, targets in sorted(graph.items()):
        if _in(module, source_prefix):
            for target in sorted(targets):
                yield module, target


def test_graph_reads_the_whole_package():
    graph = import_graph()
    assert "hybridrl.trainer.main_ppo" in graph
    assert "hybridrl.workers.fsdp_workers" in graph
    assert graph["hybridrl.trainer.main_ppo"], "main_ppo imports package modules at module level"


def test_no_module_level_import_cycles():
    graph = import_graph()
    cycles = strongly_connected(graph)
    assert not cycles, "module-level import cycles:\n" + describe_cycles(graph, cycles)


def test_no_cycles_hidden_by_function_level_imports():
    graph = import_graph(functions=True)
    cycles = [c for c in strongly_connected(graph) if tuple(c) not in ALLOWED_FUNCTION_LEVEL_CYCLES]
    assert not cycles, "import cycles through function-level imports:\n" + describe_cycles(graph, cycles)


def test_no_import_cycles_between_packages():
    """A folder's modules never import a folder that imports them back (e.g. rollout <-> sharding_manager)."""
    folders = package_graph(import_graph(parents=False))
    cycles = strongly_connected(folders)
    assert not cycles, "import cycles between packages:\n" + describe_cycles(folders, cycles)


def test_only_entry_points_and_recipes_import_the_trainer():
    """ARCHITECTURE.md §3: nothing imports ``trainer`` except entry points and recipes (workers included)."""
    graph = import_graph()
    upward = [
        (source, target)
        for source, targets in sorted(graph.items())
        if not (_in(source, f"{PACKAGE}.trainer") or _in(source, f"{PACKAGE}.recipes"))
        for target in sorted(targets)
        if _in(target, f"{PACKAGE}.trainer")
    ]
    assert not upward, f"module-level imports of hybridrl.trainer from below it: {upward}"


def test_only_recipes_import_recipes():
    graph = import_graph()
    wrong = [
        (source, target)
        for source, targets in sorted(graph.items())
        if not _in(source, f"{PACKAGE}.recipes")
        for target in sorted(targets)
        if _in(target, f"{PACKAGE}.recipes")
    ]
    assert not wrong, f"module-level imports of hybridrl.recipes from the package: {wrong}"


_CLASS_PATH = re.compile(rf"{PACKAGE}(\.\w+)+(:\w+)?")
# the shipped YAML files, a data package every layer may read
CONFIGS_PACKAGE = f"{PACKAGE}.configs"


def _string_class_paths(path: Path) -> Iterator[str]:
    """String constants (docstrings aside) that are a whole dotted ``hybridrl.`` path, ``"module"`` or
    ``"module:Class"``: what ``importlib`` / ``load_extern_type`` would resolve at run time."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if _CLASS_PATH.fullmatch(node.value):
                yield node.value


def test_utils_import_only_utils():
    """``utils`` is the ground floor: its modules import only ``hybridrl.utils.*`` (and third-party packages),
    at module level, inside functions, and through string class paths."""
    for functions in (False, True):
        graph = import_graph(functions=functions)
        wrong = [
            (source, target)
            for source, target in _edges_from(graph, f"{PACKAGE}.utils")
            if not _in(target, f"{PACKAGE}.utils")
        ]
        where = "inside functions" if functions else "at module level"
        assert not wrong, f"utils import modules above them {where}: {wrong}"
    files = module_files()
    by_string = [
        (module, path)
        for module, file in sorted(files.items())
        if _in(module, f"{PACKAGE}.utils")
        for path in _string_class_paths(file)
        if not any(_in(path.partition(":")[0], allowed) for allowed in (f"{PACKAGE}.utils", CONFIGS_PACKAGE))
    ]
    assert not by_string, f"utils name modules above them as strings: {by_string}"


# config -> algos: the ``algorithm.rollout_correction`` grammar (options, thresholds) is parsed by the math's own
# torch-free parser, so a config that validates is one the driver and the actor can run; a copy in config would be a
# second parser to keep in sync, and moving it into config would make the pure math import the config system.
# config -> generation.tool_parser (inside the check only): ``multi_turn.format`` is checked against the parsers'
# registry itself, so the config accepts exactly the formats that have a parser; a copy of the names would drift.
CONFIG_MAY_IMPORT = (
    f"{PACKAGE}.config",
    f"{PACKAGE}.utils",
    CONFIGS_PACKAGE,
    f"{PACKAGE}.algos.rollout_correction_config",
    f"{PACKAGE}.generation.tool_parser",
)
# The one config module naming classes above it: the table of worker classes per training strategy (``"module:Class"``
# strings). The trainer imports the class it selects; the config checks only ask whether a module is installed.
CONFIG_NAMES_WORKER_CLASSES = {f"{PACKAGE}.config.worker_classes"}


def test_config_imports_only_utils():
    """``hybridrl.config`` (loading, validation, batch plan, preflight) sits on ``utils`` and the YAML only (plus
    the one parser of CONFIG_MAY_IMPORT), at module level and inside functions."""
    for functions in (False, True):
        graph = import_graph(parents=False, functions=functions)
        wrong = [
            (source, target)
            for source, target in _edges_from(graph, f"{PACKAGE}.config")
            if not any(_in(target, allowed) for allowed in CONFIG_MAY_IMPORT)
        ]
        where = "inside functions" if functions else "at module level"
        assert not wrong, f"hybridrl.config imports {where} outside {CONFIG_MAY_IMPORT}: {wrong}"
    assert import_graph()[f"{PACKAGE}.algos"] == set(), "the algos package __init__ config runs imports nothing"
    files = module_files()
    by_string = [
        (module, path)
        for module, file in sorted(files.items())
        if _in(module, f"{PACKAGE}.config") and module not in CONFIG_NAMES_WORKER_CLASSES
        for path in _string_class_paths(file)
        if not any(_in(path.partition(":")[0], allowed) for allowed in CONFIG_MAY_IMPORT)
    ]
    assert not by_string, f"hybridrl.config names modules outside {CONFIG_MAY_IMPORT} as strings: {by_string}"


def test_models_import_only_utils_and_protocol():
    """``models`` (model-specific code) is a low layer: the workers, trainer, serving and agent loop ask it."""
    graph = import_graph(functions=True)  # a lazy import upwards would be a hidden dependency all the same
    allowed = (f"{PACKAGE}.models", f"{PACKAGE}.protocol", f"{PACKAGE}.utils")
    wrong = [
        (source, target)
        for source, target in _edges_from(graph, f"{PACKAGE}.models")
        if not any(_in(target, prefix) for prefix in allowed)
    ]
    assert not wrong, f"models imports outside protocol/utils: {wrong}"


def test_single_controller_imports_only_protocol_and_utils():
    graph = import_graph()
    allowed = (f"{PACKAGE}.single_controller", f"{PACKAGE}.protocol", f"{PACKAGE}.utils")
    wrong = [
        (source, target)
        for source, target in _edges_from(graph, f"{PACKAGE}.single_controller")
        if not any(_in(target, prefix) for prefix in allowed)
    ]
    assert not wrong, f"single_controller imports outside protocol/utils: {wrong}"


def test_leaves_import_no_other_package_module():
    """``utils.torch_functional`` and ``utils.seqlen_balancing`` are leaves (the protocol may use them)."""
    graph = import_graph()
    for leaf in (f"{PACKAGE}.utils.torch_functional", f"{PACKAGE}.utils.seqlen_balancing"):
        assert graph[leaf] == set(), f"{leaf} imports {sorted(graph[leaf])}"


def test_rollout_and_sharding_manager_point_one_way():
    """The sharding manager drives the rollout engine; the rollout package never imports it."""
    graph = import_graph()
    back = [
        (source, target)
        for source, target in _edges_from(graph, f"{PACKAGE}.workers.rollout")
        if _in(target, f"{PACKAGE}.workers.sharding_manager")
    ]
    assert not back, f"workers.rollout imports workers.sharding_manager: {back}"


# ---------------------------------------------------------------------------- generation, serving, agent loops


def string_targets(path: Path, known: set[str]) -> set[str]:
    """The package modules named by a string class path of ``path`` (``_string_class_paths``: a ``_target_``,
    ``"hybridrl.x.y.Class"``, ``"module:Class"``, a module name for ``importlib``): the longest known module
    prefix of each."""
    targets = set()
    for value in _string_class_paths(path):
        parts = value.replace(":", ".").split(".")
        prefixes = (".".join(parts[:end]) for end in range(len(parts), 1, -1))
        targets.update(next(([p] for p in prefixes if p in known), []))
    return targets


def every_reference(source_prefix: str) -> Iterator[tuple[str, str, str]]:
    """``(module, target, how)`` for every package module ``source_prefix``'s modules import (at module level, in
    functions) or name in a string."""
    files = module_files()
    imports = import_graph(functions=True)
    for module, path in sorted(files.items()):
        if not _in(module, source_prefix):
            continue
        for target in sorted(imports[module]):
            yield module, target, "import"
        for target in sorted(string_targets(path, set(files)) - {module}):
            yield module, target, "string"


def _between(first: str, second: str) -> list[tuple[str, str, str]]:
    return [edge for edge in every_reference(first) if _in(edge[1], second)] + [
        edge for edge in every_reference(second) if _in(edge[1], first)
    ]


def test_serving_and_the_agent_loops_never_reference_each_other():
    """``hybridrl.serving`` and ``hybridrl.experimental`` build on ``hybridrl.generation``; what needs both
    (the OpenAI-client agent loop) lives above them, in ``hybridrl.agents``."""
    wrong = _between(f"{PACKAGE}.serving", f"{PACKAGE}.experimental")
    assert not wrong, f"serving <-> experimental references (module, target, how): {wrong}"


def test_generation_references_none_of_its_users():
    users = [f"{PACKAGE}.{name}" for name in ("serving", "experimental", "agents", "workers", "trainer")]
    wrong = [edge for edge in every_reference(f"{PACKAGE}.generation") if any(_in(edge[1], u) for u in users)]
    assert not wrong, f"hybridrl.generation references a package built on it (module, target, how): {wrong}"


def test_string_references_are_found(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        'REGISTRY = {"x": {"_target_": "hybridrl.serving.training_endpoint.TrainingEndpoint"}}\n'
        'MODULE = "hybridrl.experimental.agent_loop"\n'
        '"""A docstring naming hybridrl.serving is prose, not a reference."""\n'
    )
    known = set(module_files())
    assert string_targets(planted, known) == {
        f"{PACKAGE}.serving.training_endpoint",
        f"{PACKAGE}.experimental.agent_loop",
    }


if __name__ == "__main__":
    for title, graph in (
        ("module-level imports", import_graph()),
        ("module- and function-level imports", import_graph(functions=True)),
        ("packages, module-level imports", package_graph(import_graph(parents=False))),
        ("packages, module- and function-level imports", package_graph(import_graph(parents=False, functions=True))),
    ):
        found = strongly_connected(graph)
        print(f"{title}: {len(found)} cycles (strongly connected components)")
        if found:
            print(describe_cycles(graph, found))

"""The house's layering, checked on the source: no import cycle among harness modules (imports
inside functions included), no module importing one from a higher layer, no private name (one
with a leading underscore, modules included) imported from another module, no module over 400
lines. Data flows one way (shared/design/architecture.md; issues 18 and 37)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[1] / "harness"

# Lowest first. A module may import its own layer and those below, never above. Packages stand
# for their modules unless a module is named on its own.
LAYERS = [
    # facts and pure helpers: no harness imports of their own (backends.cudnn.lib: a ctypes binding)
    {"problem", "precision", "student_t", "stats", "locks", "threads", "contention", "cpu_memory",
     "cache_dir", "setup_budget", "ahead",
     "backends.cudnn.lib",
     "epilogue", "workspace_limit"},
    # rnn: the recurrent problem family and its float64 recurrence; families: which kinds exist;
    # draws: random test data on the process's cores
    {"problem_text", "rnn", "families", "draws"},
    # host_cores: whether the host gave a CPU point its cores (remembered per CPU, as cpu_peaks)
    {"env", "sweep", "cpu_peaks", "host_cores"},
    {"measurement", "suite.checks", "reference", "verdict", "rnn.oracle", "oracles"},
    {"suite"},                # its loader, axes and overrides

    {"models"},
    {"schema"},
    # call_bound: how long a verified call kept the GPU busy at the least
    # graph_timer: the replays of a CUDA graph of the calls, timed by timer.time_cuda
    {"timer", "graph_timer", "stopping", "stream_hold", "call_bound", "backends.base", "store",
     "hang_cache", "plan_cache"},
    {"memory", "backends", "backends.cpu", "backends.cudnn", "backends.torch", "backends.fake"},
    # race: the plans of a point; verified_once: a later process takes the first's verdict
    {"executor", "point_timing", "process_split", "race", "verified_once"},
    {"worker"},
    # runoff: a point's finalists prepared again before the answer; batches: the runner's cuts
    {"runoff", "batches"},
    {"runner"},
    {"cluster", "env_worker", "ab"},  # ab: two environments' worker processes, interleaved
    {"analysis", "runs", "export", "compare", "peaks", "plan"},
    {"report"},
    {"cli", "pytest_plugin"},
]
# Modules allowed over the size limit, with their size when allowed (none now: issue 18 split
# cli, compare, report/figures, suite, problem and store).
OVERSIZE: dict[str, int] = {}
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    for path in HARNESS.rglob("*.py"):
        parts = path.relative_to(HARNESS).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imports(path: Path, top_level_only: bool = False) -> set[str]:
    """The harness modules `path` imports (by their name under harness/)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}".removeprefix(
                "harness.") in MODULES else node.module for a in node.names]
        else:
            continue
        found |= {n.removeprefix("harness.") for n in names
                  if n.startswith("harness.") and n.removeprefix("harness.") in MODULES}
    return found


def _layer(module: str) -> int:
    parts = module.split(".")
    for length in range(len(parts), 0, -1):
        prefix = ".".join(parts[:length])
        for rank, layer in enumerate(LAYERS):
            if prefix in layer:
                return rank
    raise AssertionError(f"harness.{module} is in no layer of tests/test_layers.py: add it")


def test_every_module_has_a_layer():
    for module in MODULES:
        if module:
            _layer(module)


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m))
def test_no_module_imports_from_a_higher_layer(module):
    mine = _layer(module)
    upward = sorted(t for t in _imports(MODULES[module]) if _layer(t) > mine)
    assert not upward, f"harness.{module} (layer {mine}) imports {upward} from above"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as a path (first module repeated at the end), or None."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path + [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [node])):
                return found
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module, [])):
            return found
    return None


def _import_graph(top_level_only: bool) -> dict[str, set[str]]:
    return {m: _imports(p, top_level_only) - {m} for m, p in MODULES.items() if m}


def test_no_import_cycle_among_module_level_imports():
    cycle = _cycle(_import_graph(top_level_only=True))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_import_cycle_counting_imports_inside_functions():
    # A lazy import keeps start-up light; it must not hide a circle of modules needing each other.
    cycle = _cycle(_import_graph(top_level_only=False))
    assert cycle is None, "import cycle (lazy imports included): " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(source: str) -> list[str]:
    """Names with a leading underscore that `source` imports from a harness module: a private
    function or class, or a private module (`harness.backends.cpu._blas`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
            names = node.module.split(".") + [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            names = [part for a in node.names if a.name.startswith("harness")
                     for part in a.name.split(".")]
        else:
            continue
        found += [f"{getattr(node, 'module', None) or ''}:{n}" for n in names if _private(n)]
    return found


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m))
def test_no_private_name_is_imported_from_another_module(module):
    found = private_imports(MODULES[module].read_text(encoding="utf-8"))
    assert not found, f"harness.{module} imports private names {found}: make them public"


def test_the_private_import_check_sees_names_and_modules():
    assert private_imports("from harness.cli.common import _say, warn") == [
        "harness.cli.common:_say"]
    assert private_imports("from harness.backends.cpu import _blas") == [
        "harness.backends.cpu:_blas"]
    assert private_imports("import harness.backends._x") == [":_x"]
    assert private_imports("from harness.cli.common import __all__, say") == []
    assert private_imports("from os import _exit") == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m))
def test_modules_stay_small(module):
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    limit = OVERSIZE.get(module, MAX_LINES)
    assert lines <= limit, f"harness.{module} has {lines} lines (limit {limit}): split it"

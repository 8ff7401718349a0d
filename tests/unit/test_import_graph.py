"""The layers import one way: idflow (the CLI) -> flows (Prefect) -> pipeline (the library), with no circles.

Read from the source with `ast`, every import counted wherever it stands (inside functions too: a lazy import is
still a dependency), except those under `if TYPE_CHECKING:`, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

PACKAGES = ("idflow", "flows", "pipeline")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(tree: ast.AST) -> list[str]:
    """Every module name an import statement of `tree` names (`from a import b` gives `a` and `a.b`)."""
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(edges between this tree's modules, every top-level package each module imports)."""
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    external: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for name in _imported_names(ast.parse(path.read_text(encoding="utf-8"))):
            external[module].add(name.split(".")[0])
            if name in modules and name != module:
                edges[module].add(name)
    return edges, external


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def test_the_graph_is_read_from_the_real_tree() -> None:
    edges, external = _graph()
    assert "idflow.cli" in edges and "pipeline.run.engine" in edges["flows.extract"]
    assert "prefect" in external["flows.extract"]


def test_no_import_circles() -> None:
    edges, _ = _graph()
    assert _circles(edges) == []


def test_pipeline_imports_neither_flows_nor_the_cli_nor_prefect() -> None:
    _, external = _graph()
    offenders = {m: sorted(external[m] & {"flows", "idflow", "prefect", "prefect_dask"})
                 for m in external if m.startswith("pipeline")}
    assert {m: names for m, names in offenders.items() if names} == {}


def test_flows_do_not_import_the_cli() -> None:
    _, external = _graph()
    assert sorted(m for m in external if m.startswith("flows") and "idflow" in external[m]) == []


def test_a_circle_is_found_when_there_is_one() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def _room(module: str) -> str:
    """The room a module stands in: its role package under `pipeline/` (`pipeline.store`), a top-level module of
    `pipeline/` itself (`pipeline.settings`), else its top-level package (`flows`)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "pipeline" and len(parts) > 1 else parts[0]


def _room_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for module, targets in edges.items():
        rooms.setdefault(_room(module), set()).update(_room(t) for t in targets if _room(t) != _room(module))
    return rooms


def test_no_import_runs_back_up_a_floor() -> None:
    """The role packages form floors: a package may import the ones below it, never one that imports it back
    (directly or through others), so the floor plan reads one way, as the run does."""
    edges, _ = _graph()
    assert _circles(_room_edges(edges)) == []


def test_a_room_import_running_back_up_is_found() -> None:
    edges = {"pipeline.store.parquet": {"pipeline.review.corrections"},
             "pipeline.review.queue": {"pipeline.store.parquet"}, "pipeline.review.corrections": set()}
    assert _circles(_room_edges(edges)) == [["pipeline.review", "pipeline.store"]]


def test_pipeline_top_level_keeps_only_the_data_model_and_the_settings() -> None:
    """At most 8 modules stand at the top of pipeline/ (the data model, the settings and what every stage shares);
    everything else lives in the role package a newcomer would look in."""
    top = sorted(p.name for p in (REPO / "pipeline").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 8, top


def test_no_two_modules_share_a_file_name() -> None:
    """A file name names one module: `grep`, a traceback or a review comment never leaves a reader guessing."""
    names: dict[str, list[str]] = {}
    for path in sorted((REPO / "pipeline").rglob("*.py")):
        if path.name != "__init__.py":
            names.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}

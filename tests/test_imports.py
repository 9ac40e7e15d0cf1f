"""Import structure of the package: no cycles, no import up the declared layers, and the serving path
free of the CLI, the benchmark, the profiler and the trainer. Read from the source with ``ast`` (function-level imports and
``TYPE_CHECKING`` blocks included), so nothing is imported to check it.

    .venv/bin/python -m pytest -q tests/test_imports.py
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "minispark"
#: What runs when a model decodes (generate, chat): the engine and everything it is built from.
SERVING = ("chat", "core.identity", "model.checkpoint", "model.draft_context", "model.draft_config", "model.drafter_dir",
           "model.draft_heads", "model.draft_model", "serving", "serving.accept", "serving.batch_schedule", "serving.batched",
           "serving.builder", "serving.conversation",
           "serving.draft_block", "serving.draft_skip", "serving.draft_tree", "serving.drafters", "serving.drafters.base",
           "serving.drafters.dspark", "serving.drafters.hybrid", "serving.drafters.lookup", "serving.engine", "serving.generate",
           "serving.ngram", "target.sampling", "serving.schedule", "serving.sps", "target.loading",
           "server", "server.app", "server.protocol", "server.worker")
#: Modules the serving path must never reach.
FORBIDDEN = ("measuring.bench", "measuring.bench_report", "cli", "measuring.profiler", "training.train", "training.trainer")


#: The layers, bottom up (docs/modules.md), each with the layers it may import besides its own: a graph, not a
#: line (serving and data are two branches on the model; neither imports the other).
#: Each layer is a tuple of top-level names under minispark/ ("" is the package itself).
LAYERS = (
    ("core", ("", "core"), ()),
    ("target", ("target",), ("core",)),
    ("model", ("model",), ("core", "target")),
    ("serving", ("serving",), ("core", "target", "model")),
    ("data", ("data",), ("core", "target", "model")),
    ("training", ("training",), ("core", "target", "model", "data")),
    ("measuring", ("measuring",), ("core", "target", "model", "serving", "data", "training")),
    ("app", ("cli", "chat", "demo", "server", "wording"),
     ("core", "target", "model", "serving", "data", "training", "measuring")),
)


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of ``module`` (a dotted name under minispark)."""
    top = module.split(".")[0]
    for index, (_, names, _) in enumerate(LAYERS):
        if top in names:
            return index
    raise AssertionError(f"minispark.{module} belongs to no declared layer: add it to LAYERS")


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    """Every import of a layer its importer may not import."""
    def allowed(a: str, b: str) -> bool:
        mine, theirs = LAYERS[layer_of(a)], LAYERS[layer_of(b)]
        return mine[0] == theirs[0] or theirs[0] in mine[2]

    return [f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
            for a, deps in sorted(edges.items()) for b in sorted(deps) if not allowed(a, b)]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports anywhere in its body (a submodule's package too)."""
    found = set()
    me = module_name(path)
    package = me.rpartition(".")[0] if path.name != "__init__.py" else me
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x
                base = ".".join(filter(None, ["minispark", package, base]))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            if not name.startswith("minispark."):
                continue
            name = name.removeprefix("minispark.")
            while name and name not in modules:  # minispark.x.func → minispark.x
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
                parent = name.rpartition(".")[0]
                # importing a.b runs a/__init__ first, unless the importer lies inside a: then a/__init__ began
                # before it did (cli/__init__ imports cli.decode, which imports cli.app: no cycle through cli)
                if parent and not me.startswith(parent + "."):
                    found.add(parent)
    found.discard(me)
    return found


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py") if module_name(p)}
    return {name: imports(path, set(files)) for name, path in files.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def reachable(edges: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` reaches, each with the module that first imports it."""
    seen, todo = {start: ""}, [start]
    while todo:
        node = todo.pop()
        for nxt in sorted(edges.get(node, ())):
            if nxt not in seen:
                seen[nxt] = node
                todo.append(nxt)
    return seen


def test_the_graph_is_read() -> None:
    edges = graph()
    engine = edges["serving.engine"]
    assert "serving.schedule" in engine and "serving.drafters" in engine
    # a submodule's package too, unless the importer lies inside that package
    assert "serving" in edges["cli.decode"] and "cli" not in edges["cli.decode"] and "serving" not in engine
    assert set(SERVING) <= set(edges) and set(FORBIDDEN) <= set(edges)


def test_no_import_cycles() -> None:
    assert find_cycle(graph()) is None, " → ".join(find_cycle(graph()) or [])


def test_a_cycle_is_caught() -> None:
    """Negative control: the same check finds a cycle when one is added."""
    edges = graph()
    edges["target.sampling"] = edges["target.sampling"] | {"serving.engine"}
    assert find_cycle(edges) is not None


def test_no_import_runs_up_the_layers() -> None:
    assert upward_imports(graph()) == []


def test_an_upward_import_is_caught() -> None:
    """Negative control: a lower layer importing a higher one is named."""
    edges = graph()
    edges["target.sampling"] = edges["target.sampling"] | {"serving.engine"}
    edges["data.prompts"] = edges["data.prompts"] | {"serving.engine"}  # a branch beside, not below
    assert upward_imports(edges) == ["data.prompts (data) imports serving.engine (serving)",
                                     "target.sampling (target) imports serving.engine (serving)"]


def test_each_layer_may_import_only_layers_below_it() -> None:
    """The declared graph is acyclic and its order is a topological one (docs/modules.md lists it so)."""
    names = [name for name, _, _ in LAYERS]
    for index, (_, _, below) in enumerate(LAYERS):
        assert all(names.index(b) < index for b in below), LAYERS[index]


def test_the_module_map_lists_the_layers_in_order() -> None:
    readme = (PACKAGE.parent / "docs" / "modules.md").read_text()
    block = readme.split("# Module map", 1)[1].split("```", 2)[1]
    rows = [line for line in block.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    firsts = [row.split()[0].rstrip(",/") for row in rows]  # each row opens with its layer's first name
    found = [layer_of(first.removesuffix(".py")) for first in firsts]
    assert found == sorted(found) and set(found) == set(range(len(LAYERS))), firsts


def test_serving_never_imports_cli_bench_profiler_or_trainer() -> None:
    edges = graph()
    for module in SERVING:
        seen = reachable(edges, module)
        for bad in FORBIDDEN:
            assert bad not in seen, f"{module} reaches {bad} (imported by {seen.get(bad)})"


def test_no_test_module_imports_another() -> None:
    """Shared test helpers live in ``tests/helpers.py`` (fixtures in ``conftest.py``), never in a test module."""
    tests = Path(__file__).resolve().parent
    offenders = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            offenders += [f"{path.relative_to(tests)}: {n}" for n in names
                          if n.startswith("tests.") and n.rpartition(".")[2].startswith("test_")]
    assert not offenders, offenders

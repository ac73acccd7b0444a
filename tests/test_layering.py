"""The package's layering (docs/architecture.md) holds: no import from a lower floor to a higher
one, no import circle between modules, and the CLI imports no heavy library at import time.

Imports are read statically (``ast``), every ``import`` / ``from ... import`` anywhere in a module
(also inside functions: a lazy import against the layering is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "contrastive_bert"

# Floor of every top-level part of the package; a module may import only its own floor or lower.
FLOORS: dict[str, int] = {
    "models": 0, "encoder": 0, "benchmarking": 0, "lazy": 0, "data": 0, "queue": 0, "topk_search": 0, "memory_bank": 0, "corpus_mining": 0, "embeddings": 0,
    "embedding_store": 0, "vector_index": 0, "onnx_encoder": 0, "autocast_encoder": 0,
    "logging_setup": 0,
    "heads": 1, "evaluation": 1,
    "losses": 2,
    "inference": 3,
    "training": 4,
    "cli": 5,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def internal_imports(path: Path) -> set[str]:
    """Every ``contrastive_bert...`` module ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "contrastive_bert"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "contrastive_bert":
                continue
            found.add(target)
            for alias in node.names:  # `from contrastive_bert.losses import queue_infonce` imports a module
                candidate = f"{target}.{alias.name}"
                if (PACKAGE_ROOT.parent / Path(*candidate.split("."))).with_suffix(".py").is_file():
                    found.add(candidate)
    return found


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


MODULES = {module_name(p): p for p in sorted(PACKAGE_ROOT.rglob("*.py"))}


def test_every_part_has_a_floor():
    parts = {part_of(m) for m in MODULES} - {""}
    assert parts <= set(FLOORS), f"parts without a floor in FLOORS / docs/architecture.md: {sorted(parts - set(FLOORS))}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_against_the_layering(module):
    if not part_of(module):
        return
    floor = FLOORS[part_of(module)]
    upward = sorted(
        target for target in internal_imports(MODULES[module])
        if part_of(target) and FLOORS.get(part_of(target), 99) > floor
    )
    assert not upward, f"{module} (floor {floor}) imports higher floors: {upward}"


def _module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = set()
        for target in internal_imports(path):
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != module and not module.startswith(target + "."):
                # importing a package's __init__ from inside that package is how Python loads it
                targets.add(target)
        graph[module] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``graph`` (depth-first search), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_detects_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circles():
    # Package __init__ files that re-export their submodules are left out: they import downwards
    # into their own package, which is not a circle between concepts.
    graph = {m: {t for t in ts if not (t == m.rpartition(".")[0])} for m, ts in _module_graph().items()}
    cycle = find_cycle(graph)
    assert cycle is None, f"import circle: {' -> '.join(cycle)}"


def test_cli_modules_import_no_heavy_library_at_module_level():
    heavy = {"torch", "transformers", "sentence_transformers", "datasets", "mteb", "faiss", "numpy", "sklearn"}
    for module, path in MODULES.items():
        if part_of(module) != "cli":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:  # module level only: imports inside handlers run when a subcommand runs
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            bad = [n for n in names if n.split(".")[0] in heavy]
            assert not bad, f"{module} imports {bad} at module level (slows `contrastive-bert --help`)"

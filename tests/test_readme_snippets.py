"""The Python snippets of the README and docs are valid Python whose imports resolve and whose calls of
this package's classes and functions use keyword arguments they take, so a user who copies one does not
stop at a renamed name (they are not run: most need data and minutes of training)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SNIPPETS = [(page.relative_to(ROOT).as_posix(), index, code)
            for page in PAGES
            for index, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S))]


def test_the_pages_hold_snippets():
    assert sum(page == "README.md" for page, _, _ in SNIPPETS) >= 4


@pytest.mark.parametrize(("page", "index", "code"), SNIPPETS, ids=[f"{p}#{i}" for p, i, _ in SNIPPETS])
def test_a_snippet_parses_and_imports_what_exists(page, index, code):
    where = f"{page} python block {index}"
    tree = ast.parse(code, filename=where)
    imported = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), (
                    f"{where}: 'from {node.module} import {alias.name}': no such name")
                if node.module.startswith("contrastive_bert") and hasattr(module, alias.name):
                    imported[alias.asname or alias.name] = getattr(module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imported:
            parameters = inspect.signature(imported[node.func.id]).parameters
            if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
                continue
            for keyword in node.keywords:
                assert keyword.arg is None or keyword.arg in parameters, (
                    f"{where}: {node.func.id}(... {keyword.arg}=...): it takes no such argument")

"""Lazy package exports: a package's names import their module on first use.

The CLI builds its parser and checks a recipe (loss options, task names) before any model
loads; importing torch, sentence-transformers or scikit-learn for that would cost seconds.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``: ``exports`` maps each exported name to the
    submodule (relative to ``package``) that defines it."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    return __getattr__

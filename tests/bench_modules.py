"""Load a script of eval/ as a module (eval/ is not a package), for the tests of its pieces."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EVAL = Path(__file__).resolve().parents[1] / "eval"


def load_bench(name: str, alias: str | None = None) -> ModuleType:
    """``eval/<name>.py`` imported under ``alias`` (default ``<name>_under_test``), not left in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location(alias or f"{name}_under_test", EVAL / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module

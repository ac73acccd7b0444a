"""No benchmark script and no test edits ``sys.path`` (issue 40): what benches share lives in the
package, and the tests import the renderer's modules through pytest's ``pythonpath`` (pyproject.toml)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EDIT = re.compile(r"sys\.path\.(insert|append|extend)|sys\.path\s*[+]?=")


def test_no_script_of_eval_and_no_test_edits_sys_path():
    files = sorted((ROOT / "eval").glob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    edits = [str(path.relative_to(ROOT)) for path in files if path.name != Path(__file__).name
             and EDIT.search(path.read_text(encoding="utf-8"))]
    assert not edits, f"these files edit sys.path: {edits}"

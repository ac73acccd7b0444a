"""No result figure in the README's prose is typed by hand (issue 38): its template,
docs/templates/README.md.in, holds no decimal number outside code blocks, generated blocks and
template values ({{v ...}}, {{d ...}}), so every score in the README comes from eval/results/*.json."""

from __future__ import annotations

import re
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1] / "docs" / "templates" / "README.md.in"
DECIMAL = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?![\w.])")  # 73.52, +2.85; not versions (2.13.0) or file names


def prose(text: str) -> str:
    """The template without fenced code, generated blocks (their markers and contents) and template values."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<!-- ([\w-]+): generated.*?<!-- /\1 -->", "", text, flags=re.S)
    text = re.sub(r"\{\{.*?\}\}", "", text, flags=re.S)
    return re.sub(r"`[^`]*`", "", text)  # inline code: flags and option values


def test_the_readme_prose_types_no_result_figure():
    typed = DECIMAL.findall(prose(TEMPLATE.read_text(encoding="utf-8")))
    assert not typed, f"typed figures in docs/templates/README.md.in (use {{{{v FILE PATH}}}}): {typed}"


def test_the_check_sees_a_typed_figure():
    assert DECIMAL.findall(prose("SciFact reaches 73.52 nDCG@10, {{v default_run runs.scifact.after}}.")) == ["73.52"]
    assert DECIMAL.findall(prose("`--lr 5.0` and ```\nscore 1.5\n``` and torch 2.13.0")) == []

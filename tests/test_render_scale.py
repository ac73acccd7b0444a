"""The encode table of scale.json in docs/results.md: a cell measured with ONNX Runtime's memory pattern
is marked and explained; once every such cell is measured again, no row is marked and the note says
only what the encoder does; hand-built JSON."""

from __future__ import annotations

from pathlib import Path

import render_scale
from render_values import Results

ROOT = Path(__file__).resolve().parents[1]


def _results(*cells: dict) -> Results:
    results = Results(ROOT / "nowhere")
    results["scale"] = {"cells": {"encode": list(cells)}, "quality": {"torch": {"ndcg_at_10": 64.51, "minus_torch": 0.0}}}
    return results


def _cell(backend: str, speed: float, **extra) -> dict:
    return {"documents": 1000, "backend": backend, "documents_per_second": speed, "peak_rss_mib": 2000.0, **extra}


def test_a_cell_measured_with_the_memory_pattern_is_marked_and_explained():
    text = render_scale.table_scale_encode(_results(_cell("torch", 31.6), _cell("onnx-int8", 31.6, onnx_memory_pattern=True)))
    assert "| 1,000 | torch | 31.6 | 2000 | 64.51 | +0.00 |  |" in text
    assert "| 1,000 | onnx-int8 (memory pattern on) | 31.6 | 2000 |  |  |  |" in text
    assert text.endswith(render_scale.ONNX_MEMORY_PATTERN_MARKED)


def test_without_marked_cells_the_note_does_not_speak_of_them():
    text = render_scale.table_scale_encode(_results(_cell("torch", 31.6), _cell("onnx-int8", 54.9)))
    assert "| 1,000 | onnx-int8 | 54.9 | 2000 |  |  |  |" in text
    assert text.endswith(render_scale.ONNX_MEMORY_PATTERN) and "marked" not in text

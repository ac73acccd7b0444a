"""emotion's full-data regime (issue 38) in the rendered docs: the probe columns appear only for runs
that scored a linear probe, and the README's verdict table names the regime's data; hand-built JSON."""

from __future__ import annotations

from pathlib import Path

import render_docs
import render_readme
from render_values import Results

ROOT = Path(__file__).resolve().parents[1]


def _stat(*values):
    mean = sum(values) / len(values)
    return {"mean": mean, "std": 0.0, "values": list(values)}


def _results():
    ce = {"chosen_on_dev": {"options": {"learning_rate": 5e-5}}, "dev": {"accuracy": 90.0}, "test": {"accuracy": _stat(91.0)},
          "seeds": [0]}
    probed = {**ce, "probe_test_accuracy": _stat(92.5), "head_minus_probe": _stat(-1.5)}
    results = Results(ROOT / "nowhere")
    results["acl_quality"] = {"settings": {"emotion/full16k": {"ce": probed}, "emotion/full": {"ce": ce}},
                              "comparisons": {}}
    return results


def test_the_probe_columns_show_only_where_runs_scored_a_probe():
    full16k = render_docs.table_acl(_results(), "emotion", "full16k")
    assert "| label head − probe |" in full16k and "| 92.50 | -1.50 |" in full16k
    sample = render_docs.table_acl(_results(), "emotion", "full")
    assert "linear probe" not in sample and "head − probe" not in sample
    assert sample.splitlines()[0].count("|") == full16k.splitlines()[0].count("|") - 2  # the two probe columns fewer


def test_the_verdict_table_names_the_full_data_regime():
    text = render_readme.table_acl_verdict(_results())
    assert "| emotion | all of train (16,000 rows) | not run yet |" in text

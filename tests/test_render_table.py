"""The one benchmark table of the generated docs (scripts/render_table.py): on a small hand-made
entries mapping it draws exactly the markdown expected, and a Table reads its entries from a results file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from render_table import Column, Table, benchmark_table, cell, per_key  # noqa: E402
from render_values import Results  # noqa: E402

ENTRIES = {  # the shared result shape, cut down: an untrained row (one value) and two trained ones (over seeds)
    "untrained": {"loss": None, "dev": {"accuracy": 61.0}, "test": {"accuracy": 60.5}},
    "ce": {"loss": "acl", "dev": {"accuracy": 80.25}, "gated_share": 0.125,
           "test": {"accuracy": {"mean": 79.5, "std": 0.25, "values": [79.25, 79.5, 79.75]}}},
    "new": {"loss": "acl", "dev": {"accuracy": 81.0}, "test": {"accuracy": {"mean": 80.0, "std": 0.5, "values": [79.5, 80.5]}}},
}


def test_benchmark_table_draws_a_row_per_entry_and_a_cell_per_column():
    columns = [Column("dev", "dev.accuracy"), Column("test: mean ± std (seeds)", "test.accuracy", "seeds"),
               Column("gated", "gated_share", "{:.1%}"), Column("trains", "loss", lambda loss: f"`{loss}`"),
               Column("CE only", "dev.accuracy", ".0f", only=("ce",))]
    assert benchmark_table(ENTRIES, columns, {"untrained": "untrained", "ce": "CE"}, unlabelled="`{}`") == "\n".join([
        "| method | dev | test: mean ± std (seeds) | gated | trains | CE only |",
        "|---|---|---|---|---|---|",
        "| untrained | 61.00 | 60.50 |  |  |  |",
        "| CE | 80.25 | 79.50 ± 0.25 (3) | 12.5% | `acl` | 80 |",
        "| `new` | 81.00 | 80.00 ± 0.50 (2) |  | `acl` |  |"])


def test_benchmark_table_label_columns_from_a_function_or_none():
    rows = {("emotion", "full"): {"32": 1.5, "1": 2}, ("sst2", "10-shot"): {"32": 0.25}}
    assert benchmark_table(rows, per_key(["32", "1"], header="batch {}"), lambda key: key, first=["data set", "regime"]) == "\n".join([
        "| data set | regime | batch 32 | batch 1 |", "|---|---|---|---|",
        "| emotion | full | 1.50 | 2 |", "| sst2 | 10-shot | 0.25 |  |"])
    assert benchmark_table(rows, per_key(["32"]), None) == "| 32 |\n|---|\n| 1.50 |\n| 0.25 |"


def test_cell_prints_by_its_spec():
    stat = {"mean": 2.0, "std": 0.5, "values": [1.5, 2.5]}
    assert [cell(None), cell(stat), cell(stat, "seeds"), cell(stat, "mean.0f"), cell(2.5, "mean"), cell(1.234, "{:.1f}x"),
            cell(0.125, "{:.1%}"), cell(3080), cell(3, lambda v: f"<{v}>")] == [
        "", "2.00 ± 0.50", "2.00 ± 0.50 (2)", "2", "2.50", "1.2x", "12.5%", "3,080", "<3>"]


def test_table_reads_its_entries_from_a_results_file_by_the_template_arguments(tmp_path):
    (tmp_path / "bench.json").write_text(json.dumps({"settings": {"a/full": ENTRIES}}))
    results = Results(tmp_path)
    described = Table("bench:settings.{0}/{1}", [Column("dev", "dev.accuracy")], {"ce": "CE"}, skip=("new",), missing="*No {0} {1} yet.*")
    assert described(results, "a", "full") == "| method | dev |\n|---|---|\n| untrained | 61.00 |\n| CE | 80.25 |"
    assert described(results, "b", "full") == "*No b full yet.*"
    with pytest.raises(ValueError, match="expected 2 argument"):
        described(results, "a")
    with pytest.raises(ValueError, match="no entries"):
        Table("bench:settings.nowhere", [Column("dev", "dev.accuracy")])(results)

"""The template values' sources (scripts/render_values.py): a run log read by its keys, a key that
holds a dot, and both through a template, on hand-built files whose figures are written here."""

from __future__ import annotations

import json

import pytest
from render_docs import render_template
from render_values import Results, lookup


def _write_log(path, records) -> None:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")


def test_a_run_log_is_read_by_its_keys_the_later_record_winning(tmp_path):
    _write_log(tmp_path / "bench_runs.jsonl", [
        {"key": "scifact/mnrl/0/0", "test": {"ndcg_at_10": 67.5}},
        {"key": "scifact/mnrl/1/0", "test": {"ndcg_at_10": 71.25}},
        {"key": "scifact/mnrl/0/0", "test": {"ndcg_at_10": 68.0}},  # the run redone
    ])
    results = Results(tmp_path)
    assert lookup(results["bench_runs"], "scifact/mnrl/0/0.test.ndcg_at_10") == 68.0
    assert lookup(results["bench_runs"], "scifact/mnrl/1/0.test.ndcg_at_10") == 71.25
    assert not results.has("bench_runs")  # a run log is no results file to link to


def test_a_json_file_comes_before_a_run_log_of_the_same_stem(tmp_path):
    (tmp_path / "bench.json").write_text(json.dumps({"a": 1.5}), encoding="utf-8")
    _write_log(tmp_path / "bench.jsonl", [{"key": "a", "x": 2}])
    assert Results(tmp_path)["bench"] == {"a": 1.5}


def test_a_stem_without_a_file_names_both_places(tmp_path):
    with pytest.raises(ValueError, match=r"nothing\.json does not exist \(nor a run log nothing\.jsonl\)"):
        Results(tmp_path)["nothing"]


def test_a_key_holding_a_dot_is_found():
    data = {"results": {"within_0.1": 0.55, "anchors_with_any_within_0.1": 0.16, "within_0": {"x": 1}}, "list": [10, 20]}
    assert lookup(data, "results.within_0.1") == 0.55
    assert lookup(data, "results.anchors_with_any_within_0.1") == 0.16
    assert lookup(data, "results.within_0.x") == 1  # the shortest key first: "within_0", then "x"
    assert lookup(data, "list.1") == 20
    with pytest.raises(ValueError, match="no key 'within_0'"):
        lookup({"results": {"within_0.1": 1}}, "results.within_0.2")
    assert lookup({"results": {}}, "results.within_0.1", strict=False) is None


def test_a_template_quotes_a_run_and_a_difference_of_runs(tmp_path):
    _write_log(tmp_path / "bench_runs.jsonl", [
        {"key": "s/m/0/0", "dev": {"ndcg_at_10": 70.488}, "test": {"ndcg_at_10": 67.798}},
        {"key": "s/m/1/0", "dev": {"ndcg_at_10": 69.710}, "test": {"ndcg_at_10": 71.278}},
    ])
    (tmp_path / "diag.json").write_text(json.dumps({"sts": {"within_0.1": 0.1587}}), encoding="utf-8")
    text = ("dev {{d bench_runs s/m/1/0.dev.ndcg_at_10 bench_runs s/m/0/0.dev.ndcg_at_10|.1f}}, "
            "test {{d bench_runs s/m/1/0.test.ndcg_at_10 bench_runs s/m/0/0.test.ndcg_at_10|.1f}}, "
            "run {{v bench_runs s/m/0/0.test.ndcg_at_10}}, share {{v diag sts.within_0.1|.0%}}")
    # 69.710 - 70.488 = -0.778; 71.278 - 67.798 = 3.480
    assert render_template(text, Results(tmp_path)) == "dev -0.8, test +3.5, run 67.80, share 16%"

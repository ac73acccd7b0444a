"""The generated pages (docs/results.md, docs/results_archive.md, data/*.md, the README's standings
table) equal what scripts/render_docs.py renders now from eval/results/*.json and the DatasetSpecs,
and the renderer's pieces give the values they should."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contrastive_bert.data.spec import DatasetSpec, MtebCard

ROOT = Path(__file__).resolve().parents[1]

import render_data_cards  # noqa: E402
import render_docs  # noqa: E402
import render_readme  # noqa: E402
import render_values  # noqa: E402


def test_generated_pages_are_current():
    stale = [str(path.relative_to(ROOT)) for path in render_docs.stale_pages()]
    assert not stale, f"out of date: {', '.join(stale)}; run: python scripts/render_docs.py"


def test_every_builtin_data_set_has_a_card_with_its_licence():
    for spec, _ in render_data_cards.builtin_specs():
        card = (ROOT / "data" / f"{spec.name}.md").read_text(encoding="utf-8")
        assert f"# `{spec.name}`" in card
        assert f"**Licence**: {spec.licence or 'not stated'}" in card


def test_readme_standings_link_their_files_and_quote_them():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    results = render_values.Results()
    pairs = results["pairs_quality"]["settings"]["sts"]["cosent"]["test"]["main_score"]
    assert f"CoSENT {pairs['mean']:.2f} ± {pairs['std']:.2f}" in readme
    for _, stem, *_ in render_readme.STANDINGS:
        assert f"(eval/results/{stem}.json)" in readme
        assert (ROOT / "eval" / "results" / f"{stem}.json").is_file()


def test_fmt_cells():
    assert render_values.fmt({"mean": 86.5701, "std": 0.0524, "values": [1, 2, 3]}, seeds=True) == "86.57 ± 0.05 (3)"
    assert render_values.fmt({"mean": 86.5701, "std": 0.0524}) == "86.57 ± 0.05"
    assert render_values.fmt(68.7) == "68.70"
    assert render_values.fmt(3080) == "3,080"
    assert render_values.fmt(None) == ""
    assert render_values.fmt(0.25, ".1%") == "25.0%"


def test_lookup_follows_keys_and_list_indices_and_names_a_missing_key():
    data = {"a": {"10-shot": [{"x": 1.5}]}}
    assert render_values.lookup(data, "a.10-shot.0.x") == 1.5
    with pytest.raises(ValueError, match="'y'"):
        render_values.lookup(data, "a.10-shot.0.y")


def _results(tmp_path: Path, files: dict) -> object:
    for stem, data in files.items():
        (tmp_path / f"{stem}.json").write_text(json.dumps(data))
    return render_values.Results(tmp_path)


def test_template_values_differences_and_links(tmp_path):
    results = _results(tmp_path, {"bench": {"m": {"a": {"mean": 38.78, "std": 3.99}, "b": {"mean": 34.14, "std": 5.43}}}})
    text = "A {{v bench m.a}}, B {{v bench m.b.mean|.1f}}, gain {{d bench m.a bench m.b|.1f}}, loss {{d bench m.b bench m.a}}, {{link bench}}."
    assert render_docs.render_template(text, results) == (
        "A 38.78 ± 3.99, B 34.1, gain +4.6, loss -4.64, [`bench.json`](../eval/results/bench.json).")


def test_template_refuses_a_missing_file_or_table(tmp_path):
    results = _results(tmp_path, {})
    with pytest.raises(ValueError, match="does not exist"):
        render_docs.render_template("{{v nowhere a.b}}", results)
    with pytest.raises(ValueError, match="unknown table"):
        render_docs.render_template("{{table nowhere}}", results)


def test_retrieval_table_is_rendered_from_the_file_shape(tmp_path):
    results = _results(tmp_path, {})
    assert "Not run yet" in render_docs.table_retrieval(results)
    stat = lambda m, s: {"mean": m, "std": s, "values": [m - s, m, m + s]}  # noqa: E731
    shots = {"banking77": 60.25, "emotion": 39.5, "sst2": 70.0}
    results = _results(tmp_path, {"retrieval_quality": {
        "protocol": {"epochs": 3},
        "scifact": {
            "untrained": {"dev": {"ndcg_at_10": 67.0}, "test": {"ndcg_at_10": 64.5, "map_at_100": 60.25, "recall_at_100": 92.5},
                          "stsb": 82.0, "zero_shot": shots, "zero_shot_mean": 56.5},
            "methods": {"mnrl": {
                "options": {"scale": 20.0, "learning_rate": 2e-05},
                "chosen_on_dev": {"config": 0, "configs_tried": 1, "configs_planned": 3},
                "dev": {"ndcg_at_10": 70.5},
                "test": {"ndcg_at_10": stat(66.25, 0.75), "map_at_100": stat(61.5, 0.5), "recall_at_100": stat(92.0, 1.0)},
                "stsb": stat(82.5, 0.0), "zero_shot": {k: stat(v, 0.0) for k, v in shots.items()},
                "zero_shot_mean": stat(56.25, 0.0), "train_seconds": stat(900.4, 0.0), "rows_seconds": stat(150.6, 0.0),
                "peak_rss_mb": stat(2100.2, 0.0)}},
            "queue_diagnosis": {"queue_hard/0/0": {
                "options": {"temperature": 0.05, "miner": {"range_max": 100}, "hard_negative_share": None},
                "learning_rate": 2e-05, "dev_ndcg_at_10": 63.34, "last_loss": 2.55, "steps_with_full_queue": 40,
                "full": {"hard_relevant": 0.125, "queue_relevant": 0.01, "age": 12.25, "gap": 0.0512, "distinct": 0.5, "weight": 22.75},
                "thirds": []}},
            "missing_runs": {"mnrl": 4}},
        "environment": {"torch": "2.13"}}})
    assert render_docs.table_retrieval(results) == "\n".join([
        "*scifact*", "",
        "| method | chosen on dev (configs run/planned) | dev nDCG@10 | test nDCG@10: mean ± std (seeds) | test MAP@100 "
        "| test Recall@100 | STS-B test | zero-shot mean (B77 / emotion / SST-2) | mining s | train s | peak MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        "| untrained |  | 67.00 | 64.50 | 60.25 | 92.50 | 82.00 | 56.5 (60.2 / 39.5 / 70.0) |  |  |  |",
        "| MNRL (ST) | scale 20.0, lr 2e-05 (1/3) | 70.50 | 66.25 ± 0.75 (3) | 61.50 | 92.00 | 82.50 | 56.2 (60.2 / 39.5 / 70.0) "
        "| 151 | 900 | 2100 |",
        "", "Runs still missing (configurations + seeds of the plan): `mnrl` 4"])
    # the queue diagnosis: shares in percent, the miner's settings inline, unset options left out
    assert render_docs.table_retrieval_queue_diagnosis(results).splitlines()[2] == (
        "| scifact/queue_hard/0/0 | temperature 0.05, miner.range_max 100, lr 2e-05 | 63.34 | 2.55 | 40 | 12.5% | 1.0% "
        "| 12.2 | 0.051 | 0.50 | 22.8 |")
    # a run whose queue never filled shows its last third, said so
    diagnosis = results["retrieval_quality"]["scifact"]["queue_diagnosis"]["queue_hard/0/0"]
    diagnosis.update(steps_with_full_queue=0, full={key: None for key in diagnosis["full"]},
                     thirds=[{"fill": 144.0, "age": 2.5}, {"fill": 640.0, "hard_relevant": 0.0775, "age": 6.5, "gap": 0.128, "distinct": 0.95}])
    diagnosis["options"]["queue_size"] = 1024
    assert render_docs.table_retrieval_queue_diagnosis(results).splitlines()[2] == (
        "| scifact/queue_hard/0/0 | temperature 0.05, miner.range_max 100, queue_size 1024, lr 2e-05 | 63.34 | 2.55 "
        "| 0 (last third shown: 640 of 1024 rows filled) | 7.8% |  | 6.5 | 0.128 | 0.95 |  |")


def test_retrieval_standing_pairs_ours_with_the_best_baseline_by_seed(tmp_path):
    stat = lambda values: {"mean": sum(values) / len(values), "std": 0.5, "values": values}  # noqa: E731
    method = lambda baseline, values: {"baseline": baseline, "test": {"ndcg_at_10": stat(values)}}  # noqa: E731
    block = {"untrained": {"test": {"ndcg_at_10": 64.5}},
             "methods": {"mnrl_st_mined": method(True, [70.0, 71.0, 72.0]), "mnrl_corpus_mined": method(False, [71.0, 71.5, 73.0])},
             "verdict": {"baseline": "mnrl_st_mined", "ours": "mnrl_corpus_mined", "pending": False,
                         "ours_minus_baseline": {"mean": 0.83, "std": 0.29, "seeds": [0, 1, 2], "seeds_won": 3}}}
    results = _results(tmp_path, {"retrieval_quality": {"scifact": block}})
    row = render_readme.retrieval_standing(results)
    assert row[:4] == ["SciFact test nDCG@10 (dev-chosen; untrained 64.50)",
                       "MNRL on `mine_hard_negatives` triplets 71.00 ± 0.50 (3)",
                       "MNRL on corpus-mined triplets (ours, no queue) 71.83 ± 0.50 (3)", "+0.83 ± 0.29, 3 of 3 seeds"]
    block["verdict"]["pending"] = True  # seeds still to run: the difference on the seeds both have, said as such
    block["verdict"]["ours_minus_baseline"] = {"mean": 1.0, "std": 0.0, "seeds": [0], "seeds_won": 1}
    results = _results(tmp_path, {"retrieval_quality": {"scifact": block}})
    assert render_readme.retrieval_standing(results)[3] == "+1.00 at seed 0, paired (seeds pending)"
    block["verdict"]["ours_minus_baseline"] = None  # no seed in common: the difference of the means
    results = _results(tmp_path, {"retrieval_quality": {"scifact": block}})
    assert render_readme.retrieval_standing(results)[3] == "+0.83 (seeds pending)"


def test_nfcorpus_gets_its_own_standings_row_named_by_its_protocol_once_both_sides_ran(tmp_path):
    stat = lambda values: {"mean": sum(values) / len(values), "std": 0.0, "values": values}  # noqa: E731
    block = {"untrained": {"test": {"ndcg_at_10": 31.59}}, "methods": {"mnrl": {"baseline": True, "test": {"ndcg_at_10": stat([33.0])}}},
             "protocol": {"follows": "scifact"},
             "verdict": {"baseline": "mnrl", "ours": None, "pending": True}}
    results = _results(tmp_path, {"retrieval_quality": {"nfcorpus_cpu": block}})
    assert render_readme.RETRIEVAL_STANDINGS == ("scifact", "nfcorpus_cpu")
    assert render_readme.retrieval_standing(results, "nfcorpus_cpu")[2] == "not run yet"
    assert render_readme.retrieval_standing(results, "nfcorpus_cpu", partial=False) is None  # the README waits for ours
    block["methods"]["mnrl_corpus_mined"] = {"baseline": False, "test": {"ndcg_at_10": stat([34.5])}}
    block["verdict"].update(ours="mnrl_corpus_mined", ours_minus_baseline={"mean": 1.5, "std": 0.0, "seeds": [0], "seeds_won": 1})
    results = _results(tmp_path, {"retrieval_quality": {"nfcorpus_cpu": block}})
    assert render_readme.retrieval_standing(results, "nfcorpus_cpu", partial=False)[:4] == [
        "NFCorpus (CPU protocol: 1 epoch, one positive per query) test nDCG@10 (configurations chosen on SciFact's dev; untrained 31.59)",
        "MNRL 33.00 ± 0.00 (1)", "MNRL on corpus-mined triplets (ours, no queue) 34.50 ± 0.00 (1)",
        "+1.50 at seed 0, paired (seeds pending)"]


def test_readme_standings_need_their_markers(tmp_path):
    with pytest.raises(ValueError, match="markers"):
        render_readme.render_readme("# no markers here\n", render_values.Results(tmp_path))


def test_data_card_is_written_from_the_spec():
    spec = DatasetSpec(name="headlines", task_type="pair-score", description="News headline pairs",
                       hub_id="someone/headlines", hub_revision="0123abcd", licence="CC-BY-4.0",
                       citation="@article{h, title={Headlines}}", reference="https://example.org/h",
                       mteb=MtebCard("LocalHeadlinesSTS", domains=("News",)))
    card = render_data_cards.data_card(spec, "News headlines: pairs with a 0-5 score.")
    assert card.startswith("# `headlines`: News headlines\n")
    assert "- **Hugging Face hub** (used when no data root is given): `someone/headlines`, revision `0123abcd`" in card
    assert "- **Licence**: CC-BY-4.0" in card
    assert "```bibtex\n@article{h, title={Headlines}}\n```" in card
    assert "local task `LocalHeadlinesSTS`; domains News" in card


def test_spec_card_fields_default_to_none():
    spec = DatasetSpec(name="x", task_type="pairs", description="x", hub_id="someone/x")
    assert (spec.licence, spec.citation, spec.hub_revision) == (None, None, None)
    card = render_data_cards.data_card(spec, None)
    assert "revision not pinned" in card and "**Licence**: not stated" in card

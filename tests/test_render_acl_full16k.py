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
    assert "| emotion | all of train (16,000 rows) | running |" in text  # its CE has a run
    assert "| emotion | a 3,000-row sample of train | running |" in text


def _sentence_results(block: dict, verdict: dict) -> Results:
    results = Results(ROOT / "nowhere")
    results["early_exit"] = {"datasets": {"emotion": {"stage1": {"test_accuracy": 86.25}}}}
    results["acl_quality"] = {"settings": {"emotion/full16k": block}, "comparisons": {"emotion/full16k": verdict}}
    return results


def _entry(*test: float, stsb: float | None = None) -> dict:
    entry = {"test": {"accuracy": {"mean": sum(test) / len(test), "std": 1.0, "values": list(test)}}, "seeds": list(range(len(test)))}
    return {**entry, "general": {"stsb": {"mean": stsb, "std": 0.0, "values": [stsb]}}} if stsb is not None else entry


def test_the_full_data_sentence_before_any_run_quotes_the_recipes_earlier_head():
    text = render_readme.table_emotion_full_data(_sentence_results({}, {}))
    assert text == "On all 16,000 emotion rows the recipe's label head reaches only 86.25: that verdict is being re-measured at full data"


def test_the_full_data_sentence_while_seeds_run_lists_seed_0_and_the_order_effect():
    block = {"logreg": _entry(68.8), "acl_embed_encoded": _entry(92.75), "ce": _entry(91.5)}
    text = render_readme.table_emotion_full_data(_sentence_results(block, {"picked_for_seeds": None}))
    assert ("(seed 0, test accuracy at each method's better dev setting among those run): ACL-Embed with encoded names 92.75, "
            "CE 91.50 (a logistic regression on the untrained embeddings: 68.80); the recipe's earlier 86.25 was trained in "
            "batches grouped by label. The seeds") in text
    effect = {"group_by_label": {"test": 87.0}, "class_mixed": {"test": 92.75}}
    text = render_readme.table_emotion_full_data(_sentence_results(block, {"batch_order_effect": effect}))
    assert "; the same encoded-names run in batches grouped by label, the order the recipe's 86.25 came from: 87.00." in text
    # a method with seeds 1-2 running still shows its seed-0 figure, not the mean so far
    block["ce"] = _entry(91.5, 93.5)
    text = render_readme.table_emotion_full_data(_sentence_results(block, {"picked_for_seeds": ["ce", "acl_embed"]}))
    assert "ACL-Embed with encoded names 92.75, CE 91.50 (a logistic" in text


def test_the_full_data_sentence_states_the_verdict_once_the_picked_rows_have_every_seed():
    block = {"ce": _entry(91.0, 92.0, 93.0, stsb=78.0), "supcon": _entry(90.0), "acl_embed": _entry(91.0),
             "acl_embed_encoded": _entry(92.0, 93.0, 94.0, stsb=52.3)}
    # encoded - CE by seed: +1, +1, +1 -> mean 1, std 0, 3 of 3 won: clear
    diff = {"mean": 1.0, "std": 0.0, "values": [1.0, 1.0, 1.0], "seeds": [0, 1, 2], "seeds_won": 3, "clear": True}
    verdict = {"picked_for_seeds": ["ce", "acl_embed_encoded"], "methods_complete": ["acl_embed_encoded", "ce"],
               "best_acl": "acl_embed_encoded", "best_acl_vs_ce": diff}
    text = render_readme.table_emotion_full_data(_sentence_results(block, verdict))
    assert text == ("On all 16,000 emotion rows (3 seeds, each method's rates chosen on dev): ACL-Embed with encoded names "
                    "93.00 ± 1.00 against CE 92.00 ± 1.00, +1.00 ± 0.00, 3 of 3 seeds: ACL-Embed with encoded names beats CE at full "
                    "data too; "
                    "STS-B after training 78.0 → 52.3")
    # a gain inside the noise (2 of 3 seeds) is said as one; a clear loss names the baseline as better
    noisy = {**diff, "values": [2.0, -1.0, 2.0], "std": 1.73, "seeds_won": 2, "clear": False}
    text = render_readme.table_emotion_full_data(_sentence_results(block, {**verdict, "best_acl_vs_ce": noisy}))
    assert ": at full data the difference is within the seed noise;" in text
    lost = {**diff, "mean": -1.0, "values": [-1.0] * 3, "seeds_won": 0}
    text = render_readme.table_emotion_full_data(_sentence_results(block, {**verdict, "best_acl_vs_ce": lost}))
    assert ": at full data CE is better;" in text
    # the picked rows complete but the verdict without their difference (not expected): the seed-0 sentence, not a blank
    text = render_readme.table_emotion_full_data(_sentence_results(block, {**verdict, "best_acl_vs_ce": None}))
    assert text.startswith("On all 16,000 emotion rows, re-measured in class-mixed batches (seed 0,")


def test_the_verdict_table_says_running_once_a_trained_method_has_a_run_even_if_only_others_are_pending():
    # the encoded method has both dev runs (its seeds wait on the pick, so it is not pending); the others not run
    block = {"logreg": _entry(68.8), "acl_embed_encoded": _entry(92.75)}
    verdict = {"pending": {"ce": "not run", "supcon": "not run", "acl_embed": "not run"}, "methods_complete": []}
    text = render_readme.table_acl_verdict(_sentence_results(block, verdict))
    assert "| emotion | all of train (16,000 rows) | running |" in text
    text = render_readme.table_acl_verdict(_sentence_results({"logreg": _entry(68.8)}, verdict))
    assert "| emotion | all of train (16,000 rows) | not run yet |" in text  # an untrained baseline is no start


def test_the_early_exit_notes_name_a_superseded_round_and_vanish_without_one():
    results = Results(ROOT / "nowhere")
    results["early_exit"] = {"datasets": {"banking77": {"superseded": "round 0; round 1 replaces it", "stage1_batch_order": "group_by_label"},
                                          "emotion": {}}}
    assert render_readme.table_early_exit_round(results, "banking77") == (
        " (stage 1 trained in sentence-transformers' group_by_label batch order, before the recipe as it is now; the re-measure is queued)")
    assert render_readme.table_early_exit_round(results, "emotion") == ""
    assert render_readme.table_early_exit_rounds(results).startswith(" The Banking77 figures below come from stage-1 models")
    results["early_exit"]["datasets"]["banking77"] = {}
    assert render_readme.table_early_exit_rounds(results) == ""


def test_the_verdict_table_says_why_full16k_has_no_supcon_difference():
    """Seeds 1-2 went to CE and ACL-Embed: SupCon has seed 0 alone, so no paired difference to show."""
    block = {"ce": _entry(92.9, 92.8, 92.4), "acl_embed": _entry(92.5, 92.4, 92.6), "supcon": _entry(92.6)}
    verdict = {"methods_complete": ["acl_embed", "ce"], "pending": {}, "best": "ce",
               "best_test_accuracy": block["ce"]["test"]["accuracy"], "best_on_dev": "acl_embed", "best_acl": "acl_embed"}
    text = render_readme.table_acl_verdict(_sentence_results(block, verdict))
    row = next(line for line in text.splitlines() if "| all of train (16,000 rows) |" in line)
    assert "(dev picks ACL-Embed) | (is CE) | (SupCon not picked for seeds 1-2) | (SupCon not picked for seeds 1-2) |" in row


def test_the_pending_column_shows_only_while_something_is_pending():
    results = _results()
    done = {"best": "ce", "best_test_accuracy": _stat(91.0), "pending": {}}
    results["acl_quality"]["comparisons"] = {"emotion/full16k": done}
    assert "| pending |" not in render_readme.table_acl_verdict(results).splitlines()[0]
    results["acl_quality"]["comparisons"] = {"emotion/full16k": {**done, "pending": {"supcon": "seeds 1-2"}}}
    text = render_readme.table_acl_verdict(results)
    assert text.splitlines()[0].endswith("| pending |") and "CE + SupCon: seeds 1-2 |" in text

"""scripts/render_readme.py's ``standings_table`` and ``retrieval_standing`` on a hand-built ``Results``
(in memory: only the files and paths STANDINGS reads): every row's strings exactly, the baseline of
two picked by its dev score (not its test mean), the difference of the means with its sign, and the
retrieval rows from a hand-written verdict (issue 38, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

from render_readme import retrieval_standing, standings_table  # noqa: E402
from render_values import Results  # noqa: E402


def stat(mean: float, std: float, n: int = 3) -> dict:
    return {"mean": mean, "std": std, "values": [mean] * n}


def entry(metric: str, mean: float, std: float, dev: float | None = None) -> dict:
    out = {"test": {metric: stat(mean, std)}}
    if dev is not None:
        out["dev"] = {metric: dev}
    return out


def acl(ce: tuple, supcon: tuple, ours_name: str, ours: tuple) -> dict:
    """One ACL block: (test mean, std, dev accuracy or None) of CE, SupCon and ours."""
    return {"ce": entry("accuracy", *ce), "supcon": entry("accuracy", *supcon), ours_name: entry("accuracy", *ours)}


def _results(tmp_path: Path) -> Results:
    results = Results(tmp_path)  # an empty folder: no memory_budget.json, so no memory-budget row
    results["pairs_quality"] = {"settings": {
        "sts": {"cosent": entry("main_score", 84.0, 1.0, 85.0), "queue_cosent": entry("main_score", 85.0, 1.0, 85.0)},
        "answer_selection": {"mnrl": entry("mrr", 60.0, 1.0, 62.0), "queue_hard": entry("mrr", 58.5, 2.0, 61.0),
                             "mnrl_qa_negatives": entry("mrr", 62.25, 0.5, 63.0),
                             "queue_qa_negatives": entry("mrr", 63.0, 0.0, 64.0)}}}
    results["acl_quality"] = {"settings": {
        # CE has the better test mean (87 > 86), SupCon the better dev (86 > 85): SupCon is shown
        "emotion/full": acl((87.0, 0.5, 85.0), (86.0, 1.0, 86.0), "acl_embed_encoded", (88.0, 0.25, 88.5)),
        # SupCon has the better test mean (92 > 91), CE the better dev (90 > 89): CE is shown
        "banking77/full": acl((91.0, 0.5, 90.0), (92.0, 0.5, 89.0), "acl_embed", (91.5, 0.5, 90.5)),
        # equal dev (80 = 80): the first, CE, though SupCon's test mean is higher
        "sst2/full": acl((85.0, 1.0, 80.0), (86.0, 1.0, 80.0), "acl_embed", (85.25, 0.75, 80.0)),
        # neither has a dev score: the better test mean, SupCon (72 > 70)
        "banking77/10-shot": acl((70.0, 2.0, None), (72.0, 1.5, None), "acl_embed", (71.0, 1.0, None)),
        # SupCon better on dev (45 > 40), worse on test (40.5 < 41)
        "emotion/10-shot": acl((41.0, 3.0, 40.0), (40.5, 2.5, 45.0), "acl_embed_encoded", (43.0, 2.0, 44.0)),
    }}
    results["bench_zero_shot"] = {"settings": {"unseen20": {
        "ce_encoded_tuned": {"dev": {"unseen10": 78.0}, "test": {"heldout20": stat(80.0, 1.0)}},
        "acl_embed_encoded_tuned": {"dev": {"unseen10": 79.0}, "test": {"heldout20": stat(82.5, 0.5)}}}}}
    results["retrieval_quality"] = {
        "scifact": {
            "untrained": {"test": {"ndcg_at_10": 58.0}}, "protocol": {"follows": None},
            "methods": {"mnrl_st_mined": {"baseline": True, "test": {"ndcg_at_10": stat(69.0, 3.6056)}},
                        "queue_hard": {"baseline": False, "test": {"ndcg_at_10": stat(71.0, 1.0)}}},
            "verdict": {"baseline": "mnrl_st_mined", "ours": "queue_hard", "pending": False,
                        "ours_minus_baseline": {"mean": 2.0, "std": 3.0, "values": [2.0, -1.0, 5.0], "seeds": [0, 1, 2],
                                                "seeds_won": 2}}},
        "nfcorpus_cpu": {
            "untrained": {"test": {"ndcg_at_10": 31.59}}, "protocol": {"follows": "scifact"},
            "methods": {"mnrl": {"baseline": True, "test": {"ndcg_at_10": {"mean": 33.5, "std": 0.7071, "values": [33.0, 34.0]}}},
                        "mnrl_corpus_mined": {"baseline": False,
                                              "test": {"ndcg_at_10": {"mean": 33.0, "std": 0.7071, "values": [33.5, 32.5]}}}},
            "verdict": {"baseline": "mnrl", "ours": "mnrl_corpus_mined", "pending": True,
                        "ours_minus_baseline": {"mean": -0.5, "std": 1.4142, "values": [0.5, -1.5], "seeds": [0, 1],
                                                "seeds_won": 1}}},
    }
    return results


PAIRS = "[`pairs_quality.json`](eval/results/pairs_quality.json)"
ACL = "[`acl_quality.json`](eval/results/acl_quality.json)"
ZERO = "[`bench_zero_shot.json`](eval/results/bench_zero_shot.json)"
RETRIEVAL = "[`retrieval_quality.json`](eval/results/retrieval_quality.json)"


def test_the_standings_rows_exactly(tmp_path):
    assert standings_table(_results(tmp_path)).splitlines() == [
        "| measured on | baseline (sentence-transformers' loss; labelled data: the better of CE and CE + SupCon) "
        "| this package | difference | file |",
        "|---|---|---|---|---|",
        # 85.00 - 84.00 = +1.00
        f"| STS-B test Spearman (3 epochs, dev-chosen, 3 seeds) | CoSENT 84.00 ± 1.00 | `queue_cosent` 85.00 ± 1.00 | +1.00 | {PAIRS} |",
        # 58.50 - 60.00 = -1.50: the sign shown
        "| Answer selection test MRR, pairs only | MNRL 60.00 ± 1.00 | `queue_infonce` + hard negatives 58.50 ± 2.00 "
        f"| -1.50 | {PAIRS} |",
        # 63.00 - 62.25 = +0.75
        "| Answer selection test MRR, labelled wrong answers as negatives | MNRL 62.25 ± 0.50 | `queue_infonce` 63.00 ± 0.00 "
        f"| +0.75 | {PAIRS} |",
        # SupCon by dev (86 > 85), though CE's test mean is higher: 88 - 86 = +2.00 (against CE it would be +1.00)
        "| Emotion, a 3,000-row sample of train, test acc. (3 seeds) | CE + SupCon 86.00 ± 1.00 "
        f"| ACL-Embed, encoded names 88.00 ± 0.25 | +2.00 | {ACL} |",
        # CE by dev (90 > 89), though SupCon's test mean is higher: 91.5 - 91 = +0.50 (against SupCon: -0.50)
        f"| Banking77, all of train, test acc. (3 seeds) | CE 91.00 ± 0.50 | ACL-Embed 91.50 ± 0.50 | +0.50 | {ACL} |",
        # equal dev: the first, CE: 85.25 - 85 = +0.25
        f"| SST-2, a 3,000-row sample of train, test acc. (3 seeds) | CE 85.00 ± 1.00 | ACL-Embed 85.25 ± 0.75 | +0.25 | {ACL} |",
        # no dev score: the better test mean, SupCon: 71 - 72 = -1.00
        "| Banking77, 10 examples per intent, test acc. (5 seeds) | CE + SupCon 72.00 ± 1.50 | ACL-Embed 71.00 ± 1.00 "
        f"| -1.00 | {ACL} |",
        # SupCon by dev (45 > 40), though its test mean is lower: 43 - 40.5 = +2.50 (against CE: +2.00)
        "| Emotion, 10 examples per class, test acc. (5 seeds) | CE + SupCon 40.50 ± 2.50 "
        f"| ACL-Embed, encoded names 43.00 ± 2.00 | +2.50 | {ACL} |",
        # 82.5 - 80 = +2.50
        "| Zero-shot on 20 unseen Banking77 intents, by name (both with encoded label names, tuned on 10 other intents) "
        f"| CE 80.00 ± 1.00 | ACL-Embed 82.50 ± 0.50 | +2.50 | {ZERO} |",
        # the verdict's paired difference: mean ± std, seeds won of seeds paired
        "| SciFact test nDCG@10 (dev-chosen; untrained 58.00) | MNRL on `mine_hard_negatives` triplets 69.00 ± 3.61 (3) "
        f"| `queue_infonce` + 8 queue hard negatives, pairs 71.00 ± 1.00 (3) | +2.00 ± 3.00, 2 of 3 seeds | {RETRIEVAL} |",
        # seeds pending: the paired mean on the seeds both have, said as such
        "| NFCorpus (CPU protocol: 1 epoch, one positive per query) test nDCG@10 (configurations chosen on SciFact's dev; "
        "untrained 31.59) | MNRL 33.50 ± 0.71 (2) | MNRL on corpus-mined triplets (ours, no queue) 33.00 ± 0.71 (2) "
        f"| -0.50 at seeds 0, 1, paired (seeds pending) | {RETRIEVAL} |",
    ]


def test_swapping_the_dev_scores_swaps_the_baseline_shown(tmp_path):
    """The pick follows dev alone: with emotion/full's dev scores swapped (CE 86, SupCon 85) CE is shown
    and the difference is 88 - 87 = +1.00."""
    results = _results(tmp_path)
    block = results["acl_quality"]["settings"]["emotion/full"]
    block["ce"]["dev"]["accuracy"], block["supcon"]["dev"]["accuracy"] = 86.0, 85.0
    row = standings_table(results).splitlines()[5]
    assert row == ("| Emotion, a 3,000-row sample of train, test acc. (3 seeds) | CE 87.00 ± 0.50 "
                   f"| ACL-Embed, encoded names 88.00 ± 0.25 | +1.00 | {ACL} |")


def test_retrieval_standing_while_seeds_are_pending_and_before_ours_runs(tmp_path):
    results = _results(tmp_path)
    verdict = results["retrieval_quality"]["scifact"]["verdict"]
    verdict.update(pending=True, ours_minus_baseline=None)  # no seed in common yet: the difference of the means, 71 - 69
    assert retrieval_standing(results)[3] == "+2.00 (seeds pending)"
    verdict.update(ours_minus_baseline={"mean": 2.0, "std": 0.0, "values": [2.0], "seeds": [0], "seeds_won": 1})
    assert retrieval_standing(results)[3] == "+2.00 at seed 0, paired (seeds pending)"
    verdict["ours"] = None
    assert retrieval_standing(results) == ["SciFact test nDCG@10 (dev-chosen; untrained 58.00)",
                                           "MNRL on `mine_hard_negatives` triplets 69.00 ± 3.61 (3)", "not run yet", "",
                                           RETRIEVAL]
    assert retrieval_standing(results, "scifact", partial=False) is None
    assert retrieval_standing(results, "nfcorpus") is None  # no such block


@pytest.mark.parametrize("setting", ["scifact", "nfcorpus_cpu"])
def test_no_retrieval_row_without_a_baseline(tmp_path, setting):
    results = _results(tmp_path)
    results["retrieval_quality"][setting]["verdict"]["baseline"] = None
    assert retrieval_standing(results, setting) is None


def test_the_emotion_row_moves_to_all_of_its_training_data_once_its_seeds_are_in(tmp_path):
    """emotion/full16k: CE + SupCon (dev 91) and ACL-Embed, encoded (dev 92) with 3 seeds, CE with one: the row
    reads the full data, SupCon the baseline (the only CE row with every seed): 92.5 - 91.25 = +1.25."""
    results = _results(tmp_path)
    settings = results["acl_quality"]["settings"]

    def run(mean, dev, seeds):
        return {"test": {"accuracy": {"mean": mean, "std": 0.5, "values": [mean] * len(seeds)}}, "dev": {"accuracy": dev},
                "seeds": seeds}

    settings["emotion/full16k"] = {"ce": run(90.0, 90.0, [0]), "supcon": run(91.25, 91.0, [0, 1, 2]),
                                   "acl_embed_encoded": run(92.5, 92.0, [0, 1, 2]), "acl_embed": run(91.0, 90.5, [0])}
    rows = standings_table(results).splitlines()
    assert ("| Emotion, all 16,000 training rows, test acc. (3 seeds) | CE + SupCon 91.25 ± 0.50 "
            f"| ACL-Embed, encoded names 92.50 ± 0.50 | +1.25 | {ACL} |") in rows
    assert not any("3,000-row sample of train, test acc." in row and "Emotion" in row for row in rows)
    settings["emotion/full16k"]["acl_embed_encoded"]["seeds"] = [0, 1]  # a seed to go: the sample's row stays
    assert any(row.startswith("| Emotion, a 3,000-row sample") for row in standings_table(results).splitlines())

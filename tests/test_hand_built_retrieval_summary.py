"""eval/bench_retrieval.py's ``summarize`` on a small hand-built run log (SciFact only): every method's
dev choice, the test means and sample stds, the verdict's baseline and ours, and the paired
differences are worked out by hand below and written as literal numbers, never taken from the
code under test (issue 38, item 5)."""

from __future__ import annotations

import math

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_retrieval")


def _scores(ndcg: float) -> dict:
    return {"ndcg_at_10": ndcg, "map_at_100": 0.0, "mrr_at_10": 0.0, "recall_at_100": 0.0}


def _general(stsb: float = 80.0, zero_shot: float = 50.0) -> dict:
    return {"stsb": stsb, "zero_shot": {"banking77": zero_shot, "emotion": zero_shot, "sst2": zero_shot},
            "zero_shot_mean": zero_shot}


def _record(bench, method: str, config: int, seed: int, dev: float, test: float, seconds: float = 100.0,
            stsb: float = 80.0) -> dict:
    options = dict(bench.METHODS[method].configs[config])
    learning_rate = options.pop("learning_rate")
    return {"key": f"scifact/{method}/{config}/{seed}", "setting": "scifact", "method": method, "config": config,
            "seed": seed, "learning_rate": learning_rate, "options": options, "miner": None, "steps": 10,
            "train_rows": 100, "train_seconds": seconds, "queue_probe": None, "last_loss": 1.0, "dry_run": False,
            "dev": _scores(dev), "test": _scores(test), "general": _general(stsb)}


# Seed 0: every configuration of every method (the decisive rows are judged from all of them).
# dev nDCG@10 per configuration; the chosen one (largest, first on ties) marked.
DEV = {
    "mnrl": (70.0, 72.0),                        # -> 1 (72)
    "mnrl_st_mined": (71.0, 73.0, 69.0),         # -> 1 (73): the best sentence-transformers row on dev
    "mnrl_corpus_mined": (66.0, 65.0),           # -> 0
    "queue_corpus_mined": (75.5, 75.5, 60.0, 60.0),  # -> 0 (a tie: the first)
    "queue_hard": (74.0, 76.0, 75.0),            # -> 1 (76): the best of ours on dev
    "mnrl_ance": (67.0, 68.0),                   # -> 1
    "queue_ance": (64.0, 63.0, 62.0),            # -> 0
    "gist": (72.5, 60.0),                        # -> 0 (72.5 < mnrl_st_mined's 73)
    "cached_mnrl": (50.0, 50.0),                 # -> 0
}
CHOSEN = {"mnrl": 1, "mnrl_st_mined": 1, "mnrl_corpus_mined": 0, "queue_corpus_mined": 0, "queue_hard": 1,
          "mnrl_ance": 1, "queue_ance": 0, "gist": 0, "cached_mnrl": 0}
# test nDCG@10 of the chosen configuration, seed 0 (its dev run) then, for the decisive rows, seeds 1 and 2;
# every configuration not chosen scores 40 on test, so a wrong choice moves a mean.
TEST = {"mnrl": (70.0, 71.0, 75.0), "mnrl_st_mined": (68.0, 73.0, 66.0), "queue_hard": (70.0, 72.0, 71.0),
        "mnrl_corpus_mined": (62.0,), "queue_corpus_mined": (63.0,), "mnrl_ance": (64.0,), "queue_ance": (61.0,),
        "gist": (65.0,), "cached_mnrl": (60.0,)}
SECONDS = {"queue_hard": (100.0, 110.0, 120.0)}
STSB = {"queue_hard": (80.0, 82.0, 84.0)}


def _log(bench, drop: tuple[str, int] | None = None) -> list[dict]:
    records = [{"key": "scifact/untrained/0/0", "setting": "scifact", "method": "untrained", "config": 0, "seed": 0,
                "dry_run": False, "dev": _scores(60.0), "test": _scores(58.0), "general": _general(83.0, 52.0)}]
    for method, scores in DEV.items():
        for config, dev in enumerate(scores):
            chosen = config == CHOSEN[method]
            records.append(_record(bench, method, config, 0, dev, TEST[method][0] if chosen else 40.0,
                                   SECONDS.get(method, (100.0,))[0], STSB.get(method, (80.0,))[0]))
    for method in ("mnrl_st_mined", "queue_hard", "mnrl"):
        for seed in (1, 2):
            if (method, seed) != drop:
                records.append(_record(bench, method, CHOSEN[method], seed, DEV[method][CHOSEN[method]], TEST[method][seed],
                                       SECONDS.get(method, (100.0,) * 3)[seed], STSB.get(method, (80.0,) * 3)[seed]))
    return records


def test_every_method_keeps_its_dev_choice_and_its_test_mean_and_sample_std(bench):
    summary = bench.summarize(_log(bench), [0, 1, 2])
    assert list(summary) == ["scifact"]  # no untrained record for the other settings: left out
    block = summary["scifact"]
    assert block["decisive"] == ["mnrl_st_mined", "queue_hard", "mnrl"]  # best ST on dev, best of ours, its ablation
    assert block["missing_runs"] == {}
    assert block["untrained"]["test"]["ndcg_at_10"] == 58.0 and block["untrained"]["stsb"] == 83.0
    methods = block["methods"]
    assert {name: row["chosen_on_dev"]["config"] for name, row in methods.items()} == CHOSEN
    assert methods["queue_hard"]["chosen_on_dev"]["dev_ndcg_at_10_by_config"] == {"0": 74.0, "1": 76.0, "2": 75.0}
    assert methods["queue_hard"]["chosen_on_dev"]["configs_tried"] == 3
    # configuration 1: in-batch negatives + the top-8 queue rows only, at 2e-5
    assert methods["queue_hard"]["options"]["learning_rate"] == 2e-5
    assert methods["queue_hard"]["options"]["use_queue_negatives"] is False
    assert methods["queue_corpus_mined"]["options"]["hard_negative_share"] == 0.15  # the tie goes to configuration 0
    assert methods["mnrl"]["options"] == {"scale": 20.0, "learning_rate": 5e-5}
    assert methods["queue_hard"]["dev"]["ndcg_at_10"] == 76.0
    # queue_hard: 70, 72, 71 -> mean 71; deviations -1, +1, 0 -> (1 + 1 + 0) / 2 = 1 -> std 1
    ours = methods["queue_hard"]["test"]["ndcg_at_10"]
    assert ours["mean"] == pytest.approx(71.0) and ours["std"] == pytest.approx(1.0) and ours["values"] == [70.0, 72.0, 71.0]
    # mnrl_st_mined: 68, 73, 66 -> mean 69; deviations -1, +4, -3 -> (1 + 16 + 9) / 2 = 13 -> std sqrt(13) = 3.6056
    theirs = methods["mnrl_st_mined"]["test"]["ndcg_at_10"]
    assert theirs["mean"] == pytest.approx(69.0) and theirs["std"] == pytest.approx(3.605551, abs=1e-6)
    # mnrl: 70, 71, 75 -> mean 72; deviations -2, -1, +3 -> (4 + 1 + 9) / 2 = 7 -> std sqrt(7) = 2.6458
    mnrl = methods["mnrl"]["test"]["ndcg_at_10"]
    assert mnrl["mean"] == pytest.approx(72.0) and mnrl["std"] == pytest.approx(2.645751, abs=1e-6)
    # one seed: its value, std 0
    assert methods["gist"]["test"]["ndcg_at_10"]["mean"] == 65.0 and methods["gist"]["test"]["ndcg_at_10"]["std"] == 0.0
    assert methods["gist"]["seeds"] == [0] and methods["queue_hard"]["seeds"] == [0, 1, 2]
    assert methods["queue_corpus_mined"]["test"]["ndcg_at_10"]["mean"] == 63.0  # configuration 1 (also 75.5 on dev) scored 40
    # train seconds 100, 110, 120 -> mean 110, std 10; STS-B 80, 82, 84 -> mean 82, std 2
    assert methods["queue_hard"]["train_seconds"]["mean"] == pytest.approx(110.0)
    assert methods["queue_hard"]["train_seconds"]["std"] == pytest.approx(10.0)
    assert methods["queue_hard"]["stsb"]["mean"] == pytest.approx(82.0) and methods["queue_hard"]["stsb"]["std"] == pytest.approx(2.0)


def test_the_verdict_pairs_ours_with_the_baseline_chosen_on_dev_seed_by_seed(bench):
    verdict = bench.summarize(_log(bench), [0, 1, 2])["scifact"]["verdict"]
    # the baseline is chosen on dev (mnrl_st_mined 73 > gist 72.5 > mnrl 72), not on test (mnrl's 72 > its 69);
    # ours: queue_hard (76); its ablation mnrl is 4 dev points below, more than one dev query's 100 / 81 = 1.23
    assert verdict["baseline"] == "mnrl_st_mined" and verdict["ours"] == "queue_hard"
    assert verdict["best_of_ours_on_dev"] == "queue_hard" and verdict["pending"] is False
    assert verdict["tie_dev_points"] == pytest.approx(1.234568, abs=1e-6)
    # queue_hard - mnrl_st_mined: 70 - 68 = +2, 72 - 73 = -1, 71 - 66 = +5 -> mean 2;
    # deviations 0, -3, +3 -> (0 + 9 + 9) / 2 = 9 -> std 3; won 2 of 3 (not clear: the signs differ)
    diff = verdict["ours_minus_baseline"]
    assert diff["values"] == pytest.approx([2.0, -1.0, 5.0]) and diff["seeds"] == [0, 1, 2]
    assert diff["mean"] == pytest.approx(2.0) and diff["std"] == pytest.approx(3.0)
    assert diff["seeds_won"] == 2 and diff["clear"] is False
    # queue_hard - mnrl (its ablation): 70 - 70 = 0, 72 - 71 = +1, 71 - 75 = -4 -> mean -1;
    # deviations +1, +2, -3 -> (1 + 4 + 9) / 2 = 7 -> std sqrt(7); a tie is no win: won 1
    ablation = verdict["ablations"]["mnrl"]
    assert ablation["values"] == pytest.approx([0.0, 1.0, -4.0]) and ablation["mean"] == pytest.approx(-1.0)
    assert ablation["std"] == pytest.approx(math.sqrt(7.0)) and ablation["seeds_won"] == 1
    # the parts on the seeds both have (seed 0 alone for the rows without more seeds)
    parts = verdict["parts"]
    assert parts["queue_corpus_mined"]["mnrl_corpus_mined"]["values"] == pytest.approx([1.0])   # 63 - 62
    assert parts["mnrl_ance"]["mnrl_corpus_mined"]["values"] == pytest.approx([2.0])            # 64 - 62
    assert parts["queue_ance"]["mnrl_ance"]["values"] == pytest.approx([-3.0])                  # 61 - 64
    assert parts["queue_ance"]["queue_corpus_mined"]["values"] == pytest.approx([-2.0])         # 61 - 63
    assert parts["queue_hard"]["mnrl"]["values"] == pytest.approx([0.0, 1.0, -4.0])
    assert parts["queue_ance"]["mnrl_ance"]["std"] == 0.0 and parts["queue_ance"]["mnrl_ance"]["seeds_won"] == 0
    # general ability of ours against the untrained model: STS-B mean 82 - 83 = -1; zero-shot mean 50 - 52 = -2
    assert verdict["general_vs_untrained"]["stsb"] == pytest.approx(-1.0)
    assert verdict["general_vs_untrained"]["zero_shot_mean"] == pytest.approx(-2.0)


def test_a_missing_seed_leaves_the_verdict_pending_and_pairs_the_seeds_both_have(bench):
    block = bench.summarize(_log(bench, drop=("queue_hard", 2)), [0, 1, 2])["scifact"]
    verdict = block["verdict"]
    assert verdict["pending"] is True and block["missing_runs"] == {"queue_hard": 1}
    # queue_hard 70, 72 -> mean 71; deviations -1, +1 -> (1 + 1) / 1 = 2 -> std sqrt(2)
    ours = block["methods"]["queue_hard"]["test"]["ndcg_at_10"]
    assert ours["mean"] == pytest.approx(71.0) and ours["std"] == pytest.approx(math.sqrt(2.0))
    # paired on seeds 0 and 1: +2, -1 -> mean 0.5; deviations +1.5, -1.5 -> 4.5 / 1 -> std sqrt(4.5) = 2.1213
    diff = verdict["ours_minus_baseline"]
    assert diff["seeds"] == [0, 1] and diff["values"] == pytest.approx([2.0, -1.0])
    assert diff["mean"] == pytest.approx(0.5) and diff["std"] == pytest.approx(2.121320, abs=1e-6) and diff["seeds_won"] == 1


def test_an_ablation_within_one_dev_query_is_recommended_over_the_best_of_ours(bench):
    """queue_corpus_mined best of ours on dev (80) and its ablation mnrl_corpus_mined 79.5: 0.5 < 100 / 81
    = 1.23 dev points apart, so the recipe trains the ablation (it costs less)."""
    records = [r for r in _log(bench) if r["method"] not in ("queue_corpus_mined", "mnrl_corpus_mined")]
    records += [_record(bench, "queue_corpus_mined", 0, 0, 80.0, 66.0), _record(bench, "queue_corpus_mined", 1, 0, 50.0, 40.0),
                _record(bench, "queue_corpus_mined", 2, 0, 50.0, 40.0), _record(bench, "queue_corpus_mined", 3, 0, 50.0, 40.0),
                _record(bench, "mnrl_corpus_mined", 0, 0, 79.5, 67.0), _record(bench, "mnrl_corpus_mined", 1, 0, 50.0, 40.0)]
    verdict = bench.summarize(records, [0, 1, 2])["scifact"]["verdict"]
    assert verdict["best_of_ours_on_dev"] == "queue_corpus_mined" and verdict["ours"] == "mnrl_corpus_mined"
    assert verdict["baseline"] == "mnrl_st_mined"
    assert verdict["decisive"] == ["mnrl_st_mined", "queue_corpus_mined", "mnrl_corpus_mined"]
    # only seed 0 of the new decisive rows is in: 67 - 68 = -1 at seed 0; pending
    assert verdict["ours_minus_baseline"]["values"] == pytest.approx([-1.0]) and verdict["pending"] is True


def test_ours_is_never_a_sentence_transformers_method(bench):
    """queue_hard best of ours on dev (76), and MNRL 75.5 on dev: the best sentence-transformers row on
    dev (75.5 > 73) and within 100 / 81 = 1.23 dev points of queue_hard (76 - 75.5 = 0.5), so
    ``recommended`` takes the ablation, MNRL, as ours: the README row would read MNRL against MNRL."""
    records = [r for r in _log(bench) if r["method"] != "mnrl"]
    records += [_record(bench, "mnrl", 0, 0, 70.0, 40.0)]
    records += [_record(bench, "mnrl", 1, seed, 75.5, test) for seed, test in zip((0, 1, 2), TEST["mnrl"])]
    verdict = bench.summarize(records, [0, 1, 2])["scifact"]["verdict"]
    assert verdict["baseline"] == "mnrl"
    assert verdict["ours"] != verdict["baseline"]
    assert not bench.METHODS[verdict["ours"]].fields["baseline"]

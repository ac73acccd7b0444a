"""eval/bench_pairs_quality.py's ``summarize`` on a small hand-built run log: each method's dev choice
(first on ties; among the configurations in while some are missing), its test mean and sample std
over the seeds in, the general-ability block, and the seed-by-seed pairing of two of its entries,
all worked out by hand and written as literal numbers (issue 38, item 5)."""

from __future__ import annotations

import math

import pytest
from bench_modules import load_bench

from contrastive_bert.benchmarking.protocol import paired_difference


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_pairs_quality")


def _general(stsb: float, banking77: float = 60.0, emotion: float = 40.0, sst2: float = 71.0) -> dict:
    return {"stsb": stsb, "zero_shot": {"banking77": banking77, "emotion": emotion, "sst2": sst2},
            "zero_shot_mean": (banking77 + emotion + sst2) / 3}


def _record(setting: str, method: str, config: int, seed: int, dev: float, test: float, extra: float,
            seconds: float | None = 300.0, general: dict | None = None, zero_shot: float = 60.0) -> dict:
    record = {"key": f"{setting}/{method}/{config}/{seed}", "setting": setting, "method": method, "config": config,
              "seed": seed, "dev": dev, "test": test,
              "test_extra": {"cosine_pearson": extra} if setting == "sts" else {"map": extra},
              "zero_shot_banking77": zero_shot, "general": general, "dry_run": False}
    if seconds is not None:  # the untrained rows train nothing
        record.update(steps=540, train_rows=6000, train_seconds=seconds, learning_rate=2e-5, options={})
    return record


def _log() -> dict[str, dict]:
    records = [
        # the untrained rows: scored once per setting
        _record("sts", "untrained", 0, 0, 80.0, 78.0, 77.0, seconds=None, general=_general(78.0)),
        _record("answer_selection", "untrained", 0, 0, 50.0, 49.0, 48.0, seconds=None, general=_general(78.0)),
        # cosent: dev 84.0, 84.5, 85.0 -> configuration 2 (scale 50, 2e-5); the others score 70 on test
        _record("sts", "cosent", 0, 0, 84.0, 70.0, 70.0, general=_general(80.0)),
        _record("sts", "cosent", 1, 0, 84.5, 70.0, 70.0, general=_general(80.0)),
        _record("sts", "cosent", 2, 0, 85.0, 83.0, 82.0, seconds=300.0, general=_general(84.0)),
        _record("sts", "cosent", 2, 1, 85.0, 84.0, 82.0, seconds=330.0, general=_general(85.0)),
        _record("sts", "cosent", 2, 2, 85.0, 85.0, 85.0, seconds=360.0, general=_general(86.0)),
        # queue_cosent: dev 85.0, 85.0, 84.0 -> configuration 0 (a tie: the first); seed 1 logged before the
        # general block existed (general None): the block falls back to zero-shot Banking77 alone
        _record("sts", "queue_cosent", 0, 0, 85.0, 85.0, 80.0, general=_general(82.0), zero_shot=61.0),
        _record("sts", "queue_cosent", 1, 0, 85.0, 60.0, 60.0, general=_general(82.0)),
        _record("sts", "queue_cosent", 2, 0, 84.0, 60.0, 60.0, general=_general(82.0)),
        _record("sts", "queue_cosent", 0, 1, 85.0, 84.0, 80.0, general=None, zero_shot=62.0),
        _record("sts", "queue_cosent", 0, 2, 85.0, 86.0, 80.0, general=_general(82.0), zero_shot=66.0),
        # mnrl on answer selection: configurations 0 and 1 in (dev 60, 62), configuration 2 not yet:
        # the choice so far is 1; seeds 0 and 1 of it in
        _record("answer_selection", "mnrl", 0, 0, 60.0, 40.0, 40.0),
        _record("answer_selection", "mnrl", 1, 0, 62.0, 55.0, 54.0),
        _record("answer_selection", "mnrl", 1, 1, 62.0, 57.0, 58.0),
    ]
    return {r["key"]: r for r in records}


def test_the_settings_hold_the_methods_with_runs_in_method_order(bench):
    summary = bench.summarize(_log(), (0, 1, 2))
    assert list(summary) == ["sts", "answer_selection"]
    assert list(summary["sts"]) == ["untrained", "cosent", "queue_cosent"]
    assert list(summary["answer_selection"]) == ["untrained", "mnrl"]
    untrained = summary["sts"]["untrained"]
    assert untrained["dev"] == {"main_score": 80.0} and untrained["seeds"] == [0]
    assert untrained["test"]["main_score"] == {"mean": 78.0, "std": 0.0, "values": [78.0]}
    assert untrained["cost"] == {}  # nothing trained, nothing timed
    assert summary["answer_selection"]["untrained"]["test"]["map"]["mean"] == 48.0


def test_each_method_keeps_its_dev_choice_and_its_test_mean_and_sample_std(bench):
    sts = bench.summarize(_log(), (0, 1, 2))["sts"]
    cosent = sts["cosent"]
    assert cosent["chosen_on_dev"]["config"] == 2
    assert cosent["chosen_on_dev"]["options"] == {"scale": 50.0, "learning_rate": 2e-5}
    assert cosent["chosen_on_dev"]["dev_by_config"] == {"0": 84.0, "1": 84.5, "2": 85.0}
    assert cosent["dev"] == {"main_score": 85.0} and cosent["seeds"] == [0, 1, 2] and cosent["seeds_planned"] == [0, 1, 2]
    # Spearman 83, 84, 85 -> mean 84; deviations -1, 0, +1 -> (1 + 0 + 1) / 2 = 1 -> std 1
    assert cosent["test"]["main_score"]["mean"] == pytest.approx(84.0)
    assert cosent["test"]["main_score"]["std"] == pytest.approx(1.0)
    # Pearson 82, 82, 85 -> mean 83; deviations -1, -1, +2 -> (1 + 1 + 4) / 2 = 3 -> std sqrt(3) = 1.7321
    assert cosent["test"]["cosine_pearson"]["mean"] == pytest.approx(83.0)
    assert cosent["test"]["cosine_pearson"]["std"] == pytest.approx(1.732051, abs=1e-6)
    # train seconds 300, 330, 360 -> mean 330, std 30; steps and rows: the first seed's
    assert cosent["cost"]["train_seconds"]["mean"] == pytest.approx(330.0)
    assert cosent["cost"]["train_seconds"]["std"] == pytest.approx(30.0)
    assert cosent["cost"]["steps"] == 540 and cosent["cost"]["train_rows"] == 6000
    # general: STS-B 84, 85, 86 -> mean 85, std 1; zero-shot mean (60 + 40 + 71) / 3 = 57 every seed -> std 0
    assert cosent["general"]["stsb"]["mean"] == pytest.approx(85.0) and cosent["general"]["stsb"]["std"] == pytest.approx(1.0)
    assert cosent["general"]["zero_shot_mean"]["mean"] == pytest.approx(57.0) and cosent["general"]["zero_shot_mean"]["std"] == 0.0
    assert cosent["baseline"] is True and cosent["loss"] == "cosent"

    queue = sts["queue_cosent"]
    assert queue["chosen_on_dev"]["config"] == 0  # 85.0 twice: the first
    assert queue["chosen_on_dev"]["options"] == {"infonce_weight": 10.0, "temperature": 0.05, "learning_rate": 2e-5}
    # 85, 84, 86 -> mean 85, std 1
    assert queue["test"]["main_score"]["mean"] == pytest.approx(85.0) and queue["test"]["main_score"]["std"] == pytest.approx(1.0)
    # one seed without the general block: zero-shot Banking77 alone, 61, 62, 66 -> mean 63;
    # deviations -2, -1, +3 -> (4 + 1 + 9) / 2 = 7 -> std sqrt(7) = 2.6458
    assert list(queue["general"]) == ["zero_shot_banking77"]
    assert queue["general"]["zero_shot_banking77"]["mean"] == pytest.approx(63.0)
    assert queue["general"]["zero_shot_banking77"]["std"] == pytest.approx(math.sqrt(7.0))


def test_a_partial_grid_chooses_among_the_configurations_in_and_counts_the_seeds_in(bench):
    mnrl = bench.summarize(_log(), (0, 1, 2))["answer_selection"]["mnrl"]
    assert mnrl["chosen_on_dev"]["config"] == 1  # 62 > 60; configuration 2 not run yet
    assert mnrl["chosen_on_dev"]["configs_tried"] == 2 and mnrl["chosen_on_dev"]["configs_planned"] == 3
    assert mnrl["dev"] == {"mrr": 62.0}
    assert mnrl["seeds"] == [0, 1] and mnrl["seeds_planned"] == [0, 1, 2]
    # MRR 55, 57 -> mean 56; deviations -1, +1 -> (1 + 1) / 1 = 2 -> std sqrt(2) = 1.4142
    assert mnrl["test"]["mrr"]["mean"] == pytest.approx(56.0) and mnrl["test"]["mrr"]["std"] == pytest.approx(1.414214, abs=1e-6)
    # MAP 54, 58 -> mean 56; deviations -2, +2 -> 8 / 1 -> std sqrt(8) = 2.8284
    assert mnrl["test"]["map"]["mean"] == pytest.approx(56.0) and mnrl["test"]["map"]["std"] == pytest.approx(2.828427, abs=1e-6)


def test_two_entries_pair_seed_by_seed(bench):
    """The entries keep seeds and values aligned, so queue_cosent minus CoSENT pairs by seed:
    85 - 83 = +2, 84 - 84 = 0, 86 - 85 = +1 -> mean 1; deviations +1, -1, 0 -> (1 + 1 + 0) / 2 = 1 -> std 1;
    won 2 (a tie is no win)."""
    sts = bench.summarize(_log(), (0, 1, 2))["sts"]
    diff = paired_difference(sts["queue_cosent"], sts["cosent"], "main_score")
    assert diff["values"] == pytest.approx([2.0, 0.0, 1.0]) and diff["seeds"] == [0, 1, 2]
    assert diff["mean"] == pytest.approx(1.0) and diff["std"] == pytest.approx(1.0) and diff["seeds_won"] == 2


def test_a_dry_run_record_is_left_out_of_the_summary(bench):
    """queue_cosent's seed 2 replaced by a dry run scoring 10: only seeds 0 and 1 are real runs."""
    log = _log()
    log["sts/queue_cosent/0/2"] = {**log["sts/queue_cosent/0/2"], "test": 10.0, "dry_run": True}
    queue = bench.summarize(log, (0, 1, 2))["sts"]["queue_cosent"]
    # without the dry run: seeds 0 and 1, 85 and 84 -> mean 84.5 (with it: (85 + 84 + 10) / 3 = 59.67)
    assert queue["seeds"] == [0, 1] and queue["test"]["main_score"]["mean"] == pytest.approx(84.5)

"""eval/bench_memory_budget.py: its plan (the cost rows take the large batch's dev choice; the
decisive rows), every method training through the package on a tiny model, and its summary on a
hand-built run log whose means, choices and paired differences are worked out by hand."""

from __future__ import annotations

import argparse
import copy

import datasets
import pytest

from bench_modules import load_bench
from contrastive_bert.training import retrieval_runs
from contrastive_bert.data.beir import RetrievalData


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_memory_budget")


def _record(bench, setting, method, config, seed, dev, test, seconds=100.0, peak=1000.0, ratio=None):
    options = dict(bench.METHODS[method].config(config)) if config < len(bench.METHODS[method].configs) else {}
    return {"key": bench.run_key(setting, method, config, seed), "setting": setting, "method": method, "config": config,
            "seed": seed, "options": options, "learning_rate": options.get("learning_rate"), "steps": 36, "train_rows": 747,
            "train_seconds": seconds, "seconds_per_step": seconds / 36,
            "memory": {"kind": "rss", "before_mb": 500.0, "peak_mb": peak, "training_mb": peak - 500.0},
            "gradient_norms": None if ratio is None else {"document_over_anchor": ratio},
            "dev": {"ndcg_at_10": dev, "map_at_100": 0.0, "mrr_at_10": 0.0, "recall_at_100": 0.0},
            "test": {"ndcg_at_10": test, "map_at_100": 0.0, "mrr_at_10": 0.0, "recall_at_100": 0.0},
            "general": {"stsb": 80.0, "zero_shot_mean": 50.0}}


def test_the_plan_runs_ours_beside_the_st_rows_and_the_cost_rows_take_the_large_batchs_choice(bench):
    plan = bench.grid(("scifact",), (0, 1, 2))
    first = [(r.method, r.config) for r in plan.plan({})]
    assert first == [(m, c) for c in (0, 1) for m in ("mnrl_accumulated", "mnrl_large", "queue_dual_step", "queue_fifo",
                                                      "queue_dual_fifo")]
    assert bench.METHODS["queue_dual_step"].config(0) == {**bench.QUEUE, "dual_bank": True, "bank_scope": "step",
                                                          "learning_rate": 5e-5}
    log = {}
    for method, dev in (("mnrl_large", (70.0, 71.0)),):  # 2e-5 wins on dev
        for config, score in enumerate(dev):
            record = _record(bench, "scifact", method, config, 0, score, score)
            log[record["key"]] = record
    cost_rows = [r for r in plan.plan(log) if r.method in ("cached_mnrl", "mnrl_large_checkpointing")]
    assert [(r.method, r.config, r.seed) for r in cost_rows] == [("cached_mnrl", 0, 0), ("mnrl_large_checkpointing", 0, 0)]
    assert plan.options(log, "scifact", bench.METHODS["cached_mnrl"], 0) == {"scale": 20.0, "mini_batch_size": 8,
                                                                            "learning_rate": 2e-5}


def test_summary_of_a_hand_built_log(bench):
    """Seed 0: every method's dev runs; the best ST row of 1-3 on dev is mnrl_large (2e-5: 72), the
    best of ours queue_dual_step (5e-5: 73), whose ablation is mnrl_accumulated. Seeds 1-2 of those
    three. By hand: dual step test 70, 71, 72 -> mean 71, std 1; mnrl_large 69, 71, 70 -> paired
    differences +1, 0, +2 -> mean 1, std 1, won 2 of 3."""
    dev = {"mnrl_accumulated": (68.0, 67.0), "mnrl_large": (71.0, 72.0), "queue_dual_step": (73.0, 60.0),
           "queue_fifo": (65.0, 66.0), "queue_dual_fifo": (70.0, 69.0)}
    records = [{"key": "scifact/untrained/0/0", "setting": "scifact", "method": "untrained",
                "dev": {"ndcg_at_10": 60.0}, "test": {"ndcg_at_10": 64.0}, "general": {"stsb": 82.0}}]
    test_seed0 = {"mnrl_large": 69.0, "queue_dual_step": 70.0, "mnrl_accumulated": 66.0}
    for method, scores in dev.items():
        for config, score in enumerate(scores):
            chosen = score == max(scores)
            records.append(_record(bench, "scifact", method, config, 0, score,
                                   test_seed0.get(method, 50.0) if chosen else 40.0, ratio=2.0 if method == "queue_fifo" else None))
    for method in ("cached_mnrl", "mnrl_large_checkpointing"):
        records.append(_record(bench, "scifact", method, 0, 0, 72.0, 69.0, seconds=200.0, peak=600.0))
    for seed, (ours, theirs, accumulated) in zip((1, 2), ((71.0, 71.0, 67.0), (72.0, 70.0, 66.0))):
        records.append(_record(bench, "scifact", "queue_dual_step", 0, seed, 73.0, ours))
        records.append(_record(bench, "scifact", "mnrl_large", 1, seed, 72.0, theirs))
        records.append(_record(bench, "scifact", "mnrl_accumulated", 0, seed, 68.0, accumulated))
    plan = bench.grid(("scifact",), (0, 1, 2))
    log = {r["key"]: r for r in records}
    assert plan.plan(log, settings=["scifact"]) == []
    full = bench.summarize(records, [0, 1, 2])
    # NFCorpus to go: the 3 decisive rows x 3 seeds
    assert full["conclusion"] == {"status": "pending", "missing_runs": 9, "dual_bank_recommended": False}
    summary = full["scifact"]
    assert summary["decisive"] == ["mnrl_large", "queue_dual_step", "mnrl_accumulated"]
    methods = summary["methods"]
    assert methods["queue_dual_step"]["test"]["ndcg_at_10"]["mean"] == pytest.approx(71.0)
    assert methods["queue_dual_step"]["test"]["ndcg_at_10"]["std"] == pytest.approx(1.0)
    assert methods["queue_dual_step"]["options"]["learning_rate"] == 5e-5
    assert methods["mnrl_large"]["options"]["learning_rate"] == 2e-5
    assert methods["cached_mnrl"]["peak_memory_mb"]["mean"] == 600.0 and methods["cached_mnrl"]["seeds"] == [0]
    assert methods["queue_fifo"]["gradient_norms"]["mean"] == 2.0
    verdict = summary["verdict"]
    assert verdict["baseline"] == "mnrl_large" and verdict["ours"] == "queue_dual_step" and not verdict["pending"]
    diff = verdict["ours_minus_baseline"]
    assert diff["values"] == pytest.approx([1.0, 0.0, 2.0]) and diff["mean"] == pytest.approx(1.0)
    assert diff["std"] == pytest.approx(1.0) and diff["seeds_won"] == 2
    assert verdict["ours_minus_accumulated_mnrl"]["values"] == pytest.approx([4.0, 4.0, 6.0])
    assert verdict["ours_minus_cached_mnrl"]["values"] == pytest.approx([1.0])


@pytest.mark.parametrize("name", ["mnrl_accumulated", "queue_dual_step", "queue_dual_fifo", "queue_fifo", "cached_mnrl",
                                  "mnrl_large_checkpointing"])
def test_every_method_trains_through_the_package(bench, name, monkeypatch, tiny_model):
    """Each row's recipe (micro-batch 8 x 8, or 64 at once; checkpointing; GradCache) trains two
    optimizer steps of a tiny model on 140 triplets; the queue rows record gradient norms."""
    monkeypatch.setattr(retrieval_runs, "base_model", lambda device, name="default": copy.deepcopy(tiny_model))
    monkeypatch.setattr(retrieval_runs, "score", lambda model, data, args: {"dev": {}, "test": {}, "general": {}})
    rows = datasets.Dataset.from_dict({"anchor": [f"question {i} about topic {i % 7}" for i in range(140)],
                                       "positive": [f"answer {i} on topic {i % 7}" for i in range(140)],
                                       "negative": [f"an unrelated text number {i}" for i in range(140)]})
    args = argparse.Namespace(device="cpu", data_dir=None, dry_run=True, rows_cache=None, model="default")
    ctx = retrieval_runs.TrainingRows(args, bench.PROTOCOLS)
    ctx.rows[("scifact", "corpus_mined", "{}")] = (rows, 0.0, False)
    ctx.data["scifact"] = RetrievalData(corpus={"d0": "answer 0 on topic 0"}, queries={"q0": "question 0 about topic 0"},
                                        qrels={"train": {"q0": {"d0": 1}}})
    method = bench.METHODS[name]
    options = {"learning_rate": 5e-5, **method.config(0)} if method.builds_on else method.config(0)
    record = bench.run_one("scifact", name, options, 0, 0, ctx)
    assert record["steps"] == 2 and record["memory"]["peak_mb"] >= record["memory"]["before_mb"] > 0
    assert record["gradient_accumulation_steps"] == method.fields["gradient_accumulation_steps"]
    if method.loss == "queue_infonce":
        assert record["gradient_norms"]["calls"] == 16 and record["gradient_norms"]["document_over_anchor"] > 0


def test_the_timing_pass_times_steps_without_scoring(bench, monkeypatch, tiny_model):
    """``--timing``: a few optimizer steps per method, timed step by step (the first, warm-up, left
    out of the median), never scored; the summary keeps them apart from the grid."""
    monkeypatch.setattr(retrieval_runs, "base_model", lambda device, name="default": copy.deepcopy(tiny_model))
    monkeypatch.setattr(retrieval_runs, "score", lambda *a: (_ for _ in ()).throw(AssertionError("timing scores nothing")))
    rows = datasets.Dataset.from_dict({"anchor": [f"question {i}" for i in range(80)], "positive": [f"answer {i}" for i in range(80)],
                                       "negative": [f"other {i}" for i in range(80)]})
    args = argparse.Namespace(device="cpu", data_dir=None, dry_run=False, rows_cache=None, model="default")
    ctx = retrieval_runs.TrainingRows(args, bench.PROTOCOLS)
    ctx.rows[("scifact", "corpus_mined", "{}")] = (rows, 0.0, False)
    ctx.data["scifact"] = RetrievalData(corpus={"d0": "answer 0"}, queries={"q0": "question 0"}, qrels={"train": {"q0": {"d0": 1}}})
    record = bench.run_one("scifact", "queue_dual_step", {"learning_rate": 5e-5, **bench.METHODS["queue_dual_step"].config(0)},
                           0, 0, ctx, timing_steps=3)
    assert record["part"] == "timing" and record["steps"] == 3 and len(record["step_seconds"]) == 3
    assert record["median_step_seconds"] == sorted(record["step_seconds"][1:])[1]
    summary = bench.summarize([{**record, "key": bench.timing_key("queue_dual_step")}], [0])
    assert list(summary) == ["timing", "conclusion"] and summary["conclusion"]["status"] == "pending"
    assert summary["timing"]["queue_dual_step"] == {"median_step_seconds": record["median_step_seconds"], "steps": 3,
                                                    "load_average_1min": record["load_average_1min"]}


def _diff(values):
    """A paired difference by hand: mean, std (n - 1), clear when every seed agrees in sign and |mean| > std."""
    import statistics

    mean, std = statistics.mean(values), statistics.stdev(values)
    won = sum(v > 0 for v in values)
    return {"mean": mean, "std": std, "values": values, "seeds": list(range(len(values))), "seeds_won": won,
            "clear": won in (0, len(values)) and abs(mean) > std}


def _summary(ours, over_accumulated, over_cached, ours_seconds=21.8, cached_seconds=31.6):
    block = {"verdict": {"ours": ours, "ours_minus_accumulated_mnrl": _diff(over_accumulated),
                         "ours_minus_cached_mnrl": _diff(over_cached)}}
    return {"timing": {ours: {"median_step_seconds": ours_seconds}, "cached_mnrl": {"median_step_seconds": cached_seconds}},
            "scifact": block, "nfcorpus_cpu": copy.deepcopy(block)}


def test_the_conclusion_recommends_the_dual_bank_only_when_it_meets_every_condition(bench):
    """+1, +2, +3 over accumulated MNRL (mean 2 > std 1, all won: clear); -1, +1, 0 against CachedMNRL
    (not clearly below); 21.8 s < 31.6 s a step: recommended. Each condition failing alone turns it off."""
    good = bench.conclusion(_summary("queue_dual_step", [1.0, 2.0, 3.0], [-1.0, 1.0, 0.0]), 0)
    assert good["status"] == "final" and good["dual_bank_recommended"]
    assert good["checks"]["nfcorpus_cpu"] == {"ours_is_a_dual_bank": True, "beats_accumulated_mnrl": True,
                                              "matches_cached_mnrl": True, "faster_than_cached_mnrl": True}
    # within the noise of accumulated MNRL: -0.5, +1.5, +0.5 (one seed lost)
    noisy = bench.conclusion(_summary("queue_dual_step", [-0.5, 1.5, 0.5], [0.0, 1.0, 0.5]), 0)
    assert not noisy["dual_bank_recommended"] and not noisy["checks"]["scifact"]["beats_accumulated_mnrl"]
    # clearly below CachedMNRL: -2, -1.5, -2.5 (mean -2, std 0.5)
    below = bench.conclusion(_summary("queue_dual_step", [1.0, 2.0, 3.0], [-2.0, -1.5, -2.5]), 0)
    assert below["checks"]["scifact"]["matches_cached_mnrl"] is False and not below["dual_bank_recommended"]
    slower = bench.conclusion(_summary("queue_dual_step", [1.0, 2.0, 3.0], [0.0, 1.0, 0.5], ours_seconds=40.0), 0)
    assert slower["checks"]["scifact"]["faster_than_cached_mnrl"] is False and not slower["dual_bank_recommended"]
    fifo = bench.conclusion(_summary("queue_fifo", [1.0, 2.0, 3.0], [0.0, 1.0, 0.5]), 0)
    assert fifo["checks"]["scifact"]["ours_is_a_dual_bank"] is False and not fifo["dual_bank_recommended"]
    pending = _summary("queue_dual_step", [1.0, 2.0, 3.0], [0.0, 1.0, 0.5])
    assert bench.conclusion(pending, 6) == {"status": "pending", "missing_runs": 6, "dual_bank_recommended": False}
    del pending["nfcorpus_cpu"]  # NFCorpus not begun: pending even where the plan cannot count its runs yet
    assert bench.conclusion(pending, 0)["status"] == "pending"


def test_cost_comes_from_the_first_runs_kind_of_machine_only(bench):
    """A seed merged from a GPU bundle (CUDA peak 900 MiB, 10 s) beside CPU seeds (RSS 1,000 and 1,200
    MiB, 100 and 140 s): quality from all three seeds, cost from the two CPU runs (1,100 MiB, 120 s)."""
    records = [{"key": "scifact/untrained/0/0", "setting": "scifact", "method": "untrained",
                "dev": {"ndcg_at_10": 60.0}, "test": {"ndcg_at_10": 64.0}, "general": {"stsb": 82.0}}]
    for config, score in enumerate((70.0, 69.0)):
        records.append(_record(bench, "scifact", "mnrl_accumulated", config, 0, score, 70.0, seconds=100.0, peak=1000.0))
    records.append(_record(bench, "scifact", "mnrl_accumulated", 0, 1, 70.0, 71.0, seconds=140.0, peak=1200.0))
    gpu = _record(bench, "scifact", "mnrl_accumulated", 0, 2, 70.0, 72.0, seconds=10.0, peak=900.0)
    gpu["memory"]["kind"] = "cuda"
    records.append(gpu)
    row = bench.summarize(records, [0, 1, 2])["scifact"]["methods"]["mnrl_accumulated"]
    assert row["test"]["ndcg_at_10"]["mean"] == pytest.approx(71.0) and row["seeds"] == [0, 1, 2]
    assert row["peak_memory_mb"]["mean"] == pytest.approx(1100.0) and row["train_seconds"]["mean"] == pytest.approx(120.0)
    assert row["memory_kind"] == "rss" and row["cost_runs"] == 2

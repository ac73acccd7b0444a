"""contrastive_bert.benchmarking.protocol: the grid's order (configurations at the first seed, the
dev choice, then its seeds), ties, paired differences, the result shape; and every results file of
a benchmark on the protocol is rebuilt from its run log with the same figures."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from bench_modules import load_bench
from contrastive_bert.benchmarking.protocol import Grid, Method, Run, choose_on_dev, paired_difference

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "eval" / "results"


def _grid(separate_dev: bool = False, **kwargs) -> Grid:
    methods = [Method("untrained", seeds=(0,)), Method("a", "mnrl", ({"lr": 1}, {"lr": 2}, {"lr": 3}), separate_dev=separate_dev),
               Method("b", "cosent", ({"scale": 20},), settings=("s1",))]
    return Grid(methods, ["s1", "s2"], [0, 1, 2], key=lambda r: f"{r.setting}/{r.method}/{r.config}/{r.seed}/{r.phase}",
                dev_score=lambda record: record["dev"], **kwargs)


def _log(grid: Grid, runs: dict[Run, float]) -> dict[str, dict]:
    return {grid.key(run): {"dev": dev, "test": dev - 1, "seed": run.seed, "train_seconds": 10.0, "steps": 5} for run, dev in runs.items()}


def test_configurations_at_the_first_seed_then_the_dev_choice_at_the_others():
    grid = _grid()
    plan = grid.plan({}, settings=["s1"])
    assert [(r.method, r.config, r.seed) for r in plan] == [("untrained", 0, 0), ("a", 0, 0), ("a", 1, 0), ("a", 2, 0),
                                                             ("b", 0, 0), ("b", 0, 1), ("b", 0, 2)]
    log = _log(grid, {Run("s1", "a", 0, 0): 80.0, Run("s1", "a", 1, 0): 82.0})
    assert grid.chosen(log, "s1", grid.method("a")) is None  # a configuration still lacks its dev run
    assert grid.chosen(log, "s1", grid.method("a"), partial=True) == 1
    log.update(_log(grid, {Run("s1", "a", 2, 0): 81.0}))
    assert [(r.config, r.seed) for r in grid.plan(log, ["a"], ["s1"])] == [(1, 1), (1, 2)]
    assert grid.plan(log, ["b"], ["s2"]) == []  # b runs in s1 only


def test_ties_go_to_the_tie_break_then_the_first_configuration():
    assert choose_on_dev({0: 1.0, 1: 2.0, 2: 2.0}) == 1
    assert choose_on_dev({0: 1.0, 1: 2.0, 2: 2.0}, tie_break=lambda c: c) == 2
    assert choose_on_dev({}) is None


def test_separate_dev_runs_then_every_seed_of_the_choice():
    grid = _grid(separate_dev=True, tie_break=lambda method, config: -config.get("lr", 0))
    assert [(r.config, r.seed, r.phase) for r in grid.plan({}, ["a"], ["s1"])] == [(0, 0, "dev"), (1, 0, "dev"), (2, 0, "dev")]
    log = _log(grid, {Run("s1", "a", 0, 0, "dev"): 70.0, Run("s1", "a", 1, 0, "dev"): 75.0, Run("s1", "a", 2, 0, "dev"): 75.0})
    runs = grid.plan(log, ["a"], ["s1"])
    assert [(r.config, r.seed, r.phase, r.dev) for r in runs] == [(1, s, "test", 75.0) for s in (0, 1, 2)]  # tie: the smaller lr


def test_the_result_shape():
    grid = _grid()
    runs = {Run("s1", "a", c, 0): dev for c, dev in enumerate((80.0, 83.0, 81.0))}
    runs.update({Run("s1", "a", 1, 1): 84.0, Run("s1", "untrained", 0, 0): 70.0})
    results = grid.results(_log(grid, runs), test=lambda r: {"score": r["test"]}, dev=lambda r: {"score": r["dev"]})
    assert list(results) == ["s1"] and list(results["s1"]) == ["untrained", "a"]
    entry = results["s1"]["a"]
    assert entry["chosen_on_dev"] == {"config": 1, "options": {"lr": 2}, "configs_tried": 3, "configs_planned": 3,
                                      "dev_by_config": {"0": 80.0, "1": 83.0, "2": 81.0},
                                      "options_by_config": {"0": {"lr": 1}, "1": {"lr": 2}, "2": {"lr": 3}}}
    assert entry["dev"] == {"score": 83.0}
    assert entry["test"]["score"]["values"] == [82.0, 83.0] and entry["seeds"] == [0, 1] and entry["seeds_planned"] == [0, 1, 2]
    assert entry["cost"] == {"train_seconds": {"mean": 10.0, "std": 0.0, "values": [10.0, 10.0]}, "steps": 5}
    assert entry["loss"] == "mnrl" and results["s1"]["untrained"]["loss"] is None


def test_paired_difference_pairs_by_seed():
    a = {"seeds": [0, 1, 2], "test": {"acc": {"values": [80.0, 82.0, 84.0]}}}
    b = {"seeds": [2, 0, 1], "test": {"acc": {"values": [85.0, 79.0, 80.0]}}}
    diff = paired_difference(a, b, "acc")
    assert diff["values"] == [1.0, 2.0, -1.0] and diff["seeds_won"] == 2 and diff["clear"] is False
    assert diff["std"] == pytest.approx(statistics.stdev([1.0, 2.0, -1.0]))
    assert paired_difference(a, {"seeds": [5], "test": {"acc": {"values": [1.0]}}}, "acc") is None


# ----------------------------------------------------------------------------- the results files, from their run logs


def _bench(name: str):
    return load_bench(name, f"{name}_rebuilt")


def _records(log: str) -> list[dict]:
    return [json.loads(line) for line in (RESULTS / log).read_text(encoding="utf-8").splitlines() if line.strip()]


def _json(value):
    return json.loads(json.dumps(value))


def test_pairs_quality_json_is_its_run_log_summarised():
    bench = _bench("bench_pairs_quality")
    stored = json.loads((RESULTS / "pairs_quality.json").read_text(encoding="utf-8"))
    rebuilt = bench.summarize({r["key"]: r for r in _records("pairs_quality_runs.jsonl")})
    assert _json(rebuilt) == stored["settings"]


def test_bench_zero_shot_json_is_its_run_log_summarised():
    bench = _bench("bench_zero_shot")
    stored = json.loads((RESULTS / "bench_zero_shot.json").read_text(encoding="utf-8"))
    rebuilt = bench.summarize({r["key"]: r for r in _records("zero_shot_runs.jsonl")}, bench.parse_args([]))
    assert _json(rebuilt) == {k: v for k, v in stored.items() if k != "environment"}


def test_bench_zero_shot_keeps_its_run_keys():
    """Every run of the log is a run of the grid under the key it was logged with, so the log resumes."""
    bench = _bench("bench_zero_shot")
    args = bench.parse_args([])
    log = {r["key"]: r for r in _records("zero_shot_runs.jsonl")}
    grid = bench.grid(args)
    planned = {grid.key(run) for name in ["untrained", *bench.METHODS, *(f"{m}_tuned" for m in bench.METHODS)]
               for setting in grid.settings for run in [*grid.dev_runs(setting, grid.method(name)),
                                                        *grid.final_runs(log, setting, grid.method(name), grid.chosen(log, setting, grid.method(name)) or 0)]}
    planned.add(grid.key(bench.UNTRAINED_DEV))
    assert set(log) <= planned
    assert grid.plan(log, ["untrained", "ce_encoded_tuned", "acl_embed_encoded_tuned"]) == []  # nothing of --tune left to run


def test_pairs_quality_keeps_its_run_keys():
    bench = _bench("bench_pairs_quality")
    log = {r["key"]: r for r in _records("pairs_quality_runs.jsonl")}
    grid = bench.grid()
    known = {grid.key(run) for method in grid.methods for setting in grid.settings if method.runs_in(setting)
             for run in [*grid.dev_runs(setting, method), *grid.final_runs(log, setting, method, grid.chosen(log, setting, method) or 0)]}
    assert set(log) <= known


def test_acl_quality_json_is_its_run_log_summarised():
    """bench_acl rebuilds its files from its run log with the same figures; the label-name geometry
    needs the model and is left out."""
    bench = _bench("bench_acl")
    summary, protocol = bench.build_summary(_records("acl_quality_runs.jsonl"), bench.parse_args([]))
    for name, rebuilt in (("acl_quality.json", summary), ("acl_quality_protocol.json", protocol)):
        stored = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        assert _json(rebuilt) == {k: v for k, v in stored.items() if k not in ("environment", "label_names")}, name


def test_bench_acl_keeps_its_run_keys():
    """Every run of bench_acl's log is a run of its grids (CE's choice, the others' at CE's rate,
    ACL-Grad at ACL-Embed's) under the key it was logged with, and nothing of its blocks is left to run
    but the emotion grid on all 16,000 rows (issue 38)."""
    bench = _bench("bench_acl")
    log = {r["key"]: r for r in _records("acl_quality_runs.jsonl")}
    known = {bench.run_key(next(bench.plan_block("cost", "cost", log)))}
    for regime in bench.REGIMES:
        grid = bench.grid(regime)
        for setting in grid.settings:
            for method in grid.methods:
                config = grid.chosen(log, setting, method)
                runs = [*grid.dev_runs(setting, method, log), *grid.final_runs(log, setting, method, config or 0)]
                known |= {grid.key(replace(run, seed=seed)) for run in runs for seed in grid.seeds_of(method)}
    assert set(log) <= known
    assert bench.next_run([b for b in bench.BLOCKS if b != ("emotion", "full16k")], log) is None
    left = [spec for dataset, regime in bench.BLOCKS for spec in bench.plan_block(dataset, regime, log) if bench.run_key(spec) not in log]
    assert all(spec["regime"] == "full16k" for spec in left)


def test_a_select_gives_more_seeds_only_to_its_picks_in_their_order():
    """Beyond their dev runs only the methods the pick names, once every choice of the setting is made."""
    methods = [Method(name, "mnrl", ({"lr": 1}, {"lr": 2})) for name in ("a", "b", "c")]
    grid = Grid(methods, ["s1"], [0, 1, 2], key=lambda r: f"{r.setting}/{r.method}/{r.config}/{r.seed}",
                dev_score=lambda record: record["dev"], select={"s1": lambda scores: sorted(scores, key=scores.get, reverse=True)[:2]})
    log = _log(grid, {Run("s1", m, c, 0): dev for m, devs in (("a", (70.0, 71.0)), ("b", (80.0, 60.0))) for c, dev in enumerate(devs)})
    log.update(_log(grid, {Run("s1", "c", 0, 0): 75.0}))
    assert grid.selected(log, "s1") is None and [(r.method, r.config) for r in grid.plan(log)] == [("c", 1)]
    log.update(_log(grid, {Run("s1", "c", 1, 0): 74.0}))
    assert grid.selected(log, "s1") == ["b", "c"]
    assert [(r.method, r.config, r.seed) for r in grid.plan(log)] == [("b", 0, 1), ("b", 0, 2), ("c", 0, 1), ("c", 0, 2)]
    assert [r.seed for r in grid.planned(log, "s1", grid.method("a"))] == [0, 0]  # its dev runs alone


def test_a_following_setting_runs_the_followed_choices_at_every_seed_and_the_order_sorts():
    methods = [Method(name, "mnrl", ({"lr": 1}, {"lr": 2})) for name in ("a", "b")]
    grid = Grid(methods, ["s1", "s2"], [0, 1], key=lambda r: f"{r.setting}/{r.method}/{r.config}/{r.seed}",
                dev_score=lambda record: record["dev"], follows={"s2": "s1"}, select={"s2": lambda scores: ["b", "a"]},
                order=lambda run: (run.setting, run.seed))
    log = _log(grid, {Run("s1", "a", 0, 0): 70.0, Run("s1", "a", 1, 0): 71.0, Run("s1", "b", 0, 0): 80.0})
    assert grid.plan(log, settings=["s2"]) == []  # the followed choice of b is not made
    log.update(_log(grid, {Run("s1", "b", 1, 0): 60.0}))
    assert grid.chosen(log, "s2", grid.method("a")) == 1 and grid.dev_runs("s2", grid.method("a"), log) == []
    log.update(_log(grid, {Run("s2", "a", 1, 0): 50.0}))
    entry = grid.entry(log, "s2", grid.method("a"), test=lambda record: {"score": record["test"]})
    assert (entry["chosen_on_dev"]["config"], entry["chosen_on_dev"]["configs_tried"], entry["chosen_on_dev"]["configs_planned"]) == (1, 1, 1)
    del log[grid.key(Run("s2", "a", 1, 0))]
    assert [(r.method, r.config, r.seed) for r in grid.plan(log, settings=["s2"])] == [("b", 0, 0), ("a", 1, 0), ("b", 0, 1), ("a", 1, 1)]
    only_b = replace(grid, select={"s2": lambda scores: ["b"]})
    assert only_b.final_runs(log, "s2", only_b.method("a"), 1) == []  # not picked: no run, and no entry
    assert only_b.entry(log, "s2", only_b.method("a"), test=lambda record: {"score": record["test"]}) is None
    with pytest.raises(ValueError, match="follows"):
        Grid(methods, ["s1", "s2", "s3"], [0], key=grid.key, dev_score=grid.dev_score, follows={"s2": "s1", "s3": "s2"})

"""The retrieval benchmark's plan (the shared protocol's Grid): every method's configurations at seed
0 first, more seeds only for the decisive rows chosen on dev (best sentence-transformers method, best
of ours, its ablations), and the NFCorpus CPU setting trains SciFact's dev choices once SciFact's
grid is done; the same plan as the benchmark's own code made before (the run log resumes)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_retrieval", ROOT / "eval" / "bench_retrieval.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _grid(bench, dev: dict[str, list[float]]):
    records = []
    for name, values in dev.items():
        for config, value in enumerate(values):
            records.append({"key": bench.run_key("scifact", name, config, 0), "setting": "scifact", "method": name,
                            "config": config, "seed": 0, "dev": {"ndcg_at_10": value}})
    return {r["key"]: r for r in records}


def _plan(bench, settings: list[str], seeds: list[int], log, methods: list[str] | None = None) -> list[tuple[str, str, int, int]]:
    return [(r.setting, r.method, r.config, r.seed) for r in bench.grid(settings, seeds).plan(log, methods)]


def _dev_scores(bench, best: dict[str, tuple[int, float]]) -> dict[str, list[float]]:
    """Every method at 50 on every configuration except the given (config, score)."""
    out = {}
    for name, method in bench.METHODS.items():
        values = [50.0] * len(method.configs)
        if name in best:
            config, value = best[name]
            values[config] = value
        out[name] = values
    return out


def test_seeds_wait_for_the_whole_seed_0_grid(bench):
    scores = _dev_scores(bench, {})
    scores["cached_mnrl"] = scores["cached_mnrl"][:1]  # one configuration still to run
    log = _grid(bench, scores)
    assert bench.grid().selected(log, "scifact") is None
    todo = _plan(bench, ["scifact"], [0, 1, 2], log)
    assert todo == [("scifact", "cached_mnrl", 1, 0)]


def test_decisive_rows_are_the_dev_best_of_each_side_and_the_ablations(bench):
    log = _grid(bench, _dev_scores(bench, {"gist": (1, 60.0), "queue_corpus_mined": (2, 70.0), "mnrl_ance": (0, 65.0)}))
    assert bench.grid().selected(log, "scifact") == ["gist", "queue_corpus_mined", "mnrl_corpus_mined"]
    todo = _plan(bench, ["scifact"], [0, 1, 2], log)
    assert todo[:3] == [("scifact", "gist", 1, 1), ("scifact", "queue_corpus_mined", 2, 1), ("scifact", "mnrl_corpus_mined", 0, 1)]
    assert ("scifact", "queue_corpus_mined", 2, 1) in todo and ("scifact", "mnrl_corpus_mined", 0, 2) in todo
    assert len(todo) == 6


def test_the_decisive_rows_are_the_whole_settings_under_methods(bench):
    """``--methods`` narrows what runs, not what is decisive: the rows beyond seed 0 are the whole
    setting's dev picks (the old plan picked among the named methods alone)."""
    log = _grid(bench, _dev_scores(bench, {"gist": (1, 60.0), "queue_corpus_mined": (2, 70.0)}))
    assert _plan(bench, ["scifact"], [0, 1, 2], log, ["mnrl", "queue_corpus_mined"]) == [
        ("scifact", "queue_corpus_mined", 2, 1), ("scifact", "queue_corpus_mined", 2, 2)]


def test_nfcorpus_cpu_trains_scifacts_dev_choices(bench):
    assert bench.PROTOCOLS["nfcorpus_cpu"].epochs == 1 and bench.PROTOCOLS["nfcorpus_cpu"].max_positives == 1
    partial = _grid(bench, {"mnrl": [60.0]})
    grid = bench.grid()
    assert grid.selected(partial, "nfcorpus_cpu") is None  # SciFact's grid is not complete
    log = _grid(bench, _dev_scores(bench, {"mnrl_st_mined": (2, 61.0), "queue_hard": (1, 70.0), "mnrl_corpus_mined": (1, 69.0)}))
    runs = [(name, grid.chosen(log, "nfcorpus_cpu", grid.method(name))) for name in grid.selected(log, "nfcorpus_cpu")]
    assert runs == [("mnrl", 0), ("mnrl_st_mined", 2), ("queue_hard", 1), ("mnrl_corpus_mined", 1)]
    todo = _plan(bench, ["nfcorpus_cpu"], [0, 1, 2], log)
    assert todo[:4] == [("nfcorpus_cpu", name, config, 0) for name, config in runs] and len(todo) == 12


def test_a_one_epoch_setting_skips_a_refresh_that_would_never_run(bench):
    """ANCE re-mines before epochs 2, 3, ...: in NFCorpus's one epoch mnrl_ance would repeat
    mnrl_corpus_mined's run exactly, so the next of ours on SciFact's dev takes its place."""
    dev = {"mnrl_ance": (1, 74.2), "mnrl_corpus_mined": (1, 74.0), "queue_corpus_mined": (2, 73.0), "mnrl_st_mined": (1, 73.5)}
    log = _grid(bench, _dev_scores(bench, dev))
    assert bench.grid().selected(log, "nfcorpus_cpu") == ["mnrl", "mnrl_st_mined", "mnrl_corpus_mined", "queue_corpus_mined"]
    assert bench.followed_rows({name: score for name, (_, score) in dev.items()}, epochs=3)[2:] == ["mnrl_ance", "mnrl_corpus_mined"]


# ----------------------------------------------------------------------------- the plan before the move onto Grid
# bench_retrieval's own planning code as it was before it moved onto contrastive_bert.benchmarking.protocol
# (commit 3a78dae; only a method's baseline flag and ablations are now read from its protocol fields),
# kept as the reference: the benchmark resumes its run log, so the new plan must be the same experiment
# (the same runs, in the same order) on every log.

OLD_PRIORITY = (("scifact", "queue_corpus_mined", 1, 0), ("scifact", "queue_hard", 1, 0))


def _old_dev_choice(bench, setting, name, seed, records):
    tuning = {c: records.get(bench.run_key(setting, name, c, seed)) for c in range(len(bench.METHODS[name].configs))}
    if any(record is None for record in tuning.values()):
        return None
    chosen = max(tuning, key=lambda c: tuning[c]["dev"]["ndcg_at_10"])
    return chosen, tuning[chosen]["dev"]["ndcg_at_10"]


def _old_decisive_methods(bench, setting, methods, seed, records):
    choices = {name: _old_dev_choice(bench, setting, name, seed, records) for name in methods}
    if not methods or any(choice is None for choice in choices.values()):
        return []
    picked = []
    for baseline in (True, False):
        group = [name for name in methods if bench.METHODS[name].fields["baseline"] == baseline]
        if group:
            picked.append(max(group, key=lambda name: choices[name][1]))
    ours = picked[-1] if picked and not bench.METHODS[picked[-1]].fields["baseline"] else None
    for ablation in bench.METHODS[ours].fields["ablations"] if ours else ():
        if ablation in methods and ablation not in picked:
            picked.append(ablation)
    return picked


def _old_follower_runs(bench, setting, seeds, records):
    source = bench.PROTOCOLS[setting].follows
    choices = {name: _old_dev_choice(bench, source, name, seeds[0], records) for name in bench.METHODS}
    if any(choice is None for choice in choices.values()):
        return []
    ranked = sorted(bench.METHODS, key=lambda name: -choices[name][1])
    best_baseline = next(name for name in ranked if bench.METHODS[name].fields["baseline"])
    # one deliberate change since (fd4e126): a per-epoch refresh never runs in a one-epoch setting
    void = bench.PROTOCOLS[setting].epochs < 2
    ours = [name for name in ranked if not bench.METHODS[name].fields["baseline"] and not (void and bench.METHODS[name].fields["refresh"])][:2]
    return [(name, choices[name][0]) for name in dict.fromkeys(["mnrl", best_baseline, *ours])]


def _old_plan(bench, settings, methods, seeds, records):
    """The old ``plan``; its list repeated a PRIORITY run not yet done at its config-major place (only
    its first place ever ran), so the reference is the list without repeats."""
    order = [run for run in OLD_PRIORITY if run[0] in settings and run[1] in methods and run[3] in seeds]
    for setting in settings:
        if bench.PROTOCOLS[setting].follows:
            runs = [(m, c) for m, c in _old_follower_runs(bench, setting, seeds, records) if m in methods]
            order += [(setting, m, c, s) for s in seeds for m, c in runs]
            continue
        for config in range(max(len(bench.METHODS[m].configs) for m in methods)):
            order += [(setting, m, config, seeds[0]) for m in methods if config < len(bench.METHODS[m].configs)]
        decisive = []
        for m in _old_decisive_methods(bench, setting, methods, seeds[0], records):
            chosen = _old_dev_choice(bench, setting, m, seeds[0], records)[0]
            decisive += [(setting, m, chosen, s) for s in seeds[1:]]
        # one deliberate change since (d41bc0d): the decisive rows' seeds run seed by seed
        order += sorted(decisive, key=lambda run: seeds.index(run[3]))
    return list(dict.fromkeys(run for run in order if records.get(bench.run_key(*run)) is None))


def _records(bench, runs: dict[tuple[str, str, int, int], float]) -> dict[str, dict]:
    return {bench.run_key(*run): {"key": bench.run_key(*run), "setting": run[0], "method": run[1], "config": run[2],
                                  "seed": run[3], "dev": {"ndcg_at_10": dev}} for run, dev in runs.items()}


SETTINGS_ASKED = (["scifact", "nfcorpus_cpu"], ["nfcorpus_cpu"], ["scifact", "nfcorpus"], ["nfcorpus_cpu", "scifact"],
                  ["scifact", "nfcorpus", "nfcorpus_cpu"])


def _assert_same_plans(bench, records) -> None:
    for settings in SETTINGS_ASKED:
        for seeds in ([0, 1, 2], [0, 1]):
            assert _plan(bench, settings, seeds, records) == _old_plan(bench, settings, list(bench.METHODS), seeds, records), (settings, seeds)


def _seed_0_grid(bench, setting: str, dev=lambda name, config: 60.0 + config) -> dict:
    return {(setting, name, c, 0): dev(name, c) for name, method in bench.METHODS.items() for c in range(len(method.configs))}


def test_the_plan_of_the_current_run_log_is_the_old_plan(bench, tmp_path):
    from contrastive_bert.benchmarking import RunLog

    path = tmp_path / "retrieval_quality_runs.jsonl"
    path.write_bytes((ROOT / "eval" / "results" / "retrieval_quality_runs.jsonl").read_bytes())
    log = RunLog(path)
    assert len(log) >= 10 and _plan(bench, ["scifact", "nfcorpus_cpu"], [0, 1, 2], log) == []  # every planned run is in
    _assert_same_plans(bench, log)


def test_the_plan_of_an_empty_log_is_the_old_plan(bench):
    records = _records(bench, {})
    assert _plan(bench, ["scifact", "nfcorpus_cpu"], [0, 1, 2], records)[:2] == list(OLD_PRIORITY)
    _assert_same_plans(bench, records)


def test_the_plan_with_seed_0_runs_only_is_the_old_plan(bench):
    first = {(s, name, 0, 0): 60.0 for s in ("scifact", "nfcorpus") for name in bench.METHODS}
    _assert_same_plans(bench, _records(bench, first))
    almost = _seed_0_grid(bench, "scifact")
    del almost[("scifact", "cached_mnrl", 1, 0)]
    _assert_same_plans(bench, _records(bench, almost))


def test_the_plan_once_the_decisive_rows_are_chosen_is_the_old_plan(bench):
    dev = {"gist": (1, 70.0), "queue_ance": (2, 75.0), "mnrl_st_mined": (2, 71.0)}
    grid = _seed_0_grid(bench, "scifact", lambda name, c: dev[name][1] if name in dev and dev[name][0] == c else 60.0 + c)
    _assert_same_plans(bench, _records(bench, grid))
    grid.update({("scifact", "gist", 1, 1): 70.0, ("scifact", "mnrl_ance", 1, 2): 60.0})  # some seeds done
    _assert_same_plans(bench, _records(bench, grid))


def test_the_plan_of_nfcorpus_cpu_after_scifact_is_the_old_plan(bench):
    grid = _seed_0_grid(bench, "scifact", lambda name, c: {"queue_hard": 80.0, "mnrl_ance": 79.0, "mnrl": 81.0}.get(name, 50.0) - c)
    grid.update({("scifact", name, 0, seed): 70.0 for name in ("mnrl", "queue_hard", "mnrl") for seed in (1, 2)})
    _assert_same_plans(bench, _records(bench, grid))
    grid.update({("nfcorpus_cpu", "mnrl", 0, 0): 30.0, ("nfcorpus_cpu", "queue_hard", 0, 1): 31.0})
    _assert_same_plans(bench, _records(bench, grid))


def test_the_plan_of_random_logs_is_the_old_plan(bench):
    """Seeded random logs: any part of the seed-0 grids done (random dev scores, ties included), then
    any part of the later runs the old plan asked for."""
    import random

    rng = random.Random(29)
    every = [run for s in ("scifact", "nfcorpus") for run in _seed_0_grid(bench, s)]
    for _ in range(25):
        share = rng.choice([0.5, 0.95, 1.0])
        done = {run: float(rng.choice([60, 61, 62, rng.uniform(50, 80)])) for run in every if rng.random() < share}
        records = _records(bench, done)
        later = _old_plan(bench, ["scifact", "nfcorpus", "nfcorpus_cpu"], list(bench.METHODS), [0, 1, 2], records)
        done.update({run: rng.uniform(50, 80) for run in later if rng.random() < 0.4})
        _assert_same_plans(bench, _records(bench, done))


def test_retrieval_quality_json_is_its_run_log_summarised(bench):
    """The results file is rebuilt from the run log with the same shape and figures (the docs read it)."""
    results = ROOT / "eval" / "results"
    stored = json.loads((results / "retrieval_quality.json").read_text(encoding="utf-8"))
    records = [json.loads(line) for line in (results / "retrieval_quality_runs.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    rebuilt = json.loads(json.dumps(bench.summarize(records, stored["protocol"]["seeds"])))
    assert rebuilt == {k: v for k, v in stored.items() if k not in ("protocol", "methods_planned", "environment")}


def test_main_trains_the_plan_in_order_and_appends_under_the_run_keys(bench, monkeypatch, tmp_path):
    """The training loop (training and scoring faked): the untrained rows, then the plan's runs one
    by one under their keys, the summary rebuilt; exit 10 once nothing is left under --max-runs."""
    from contrastive_bert.benchmarking import RunLog

    general = {"stsb": 80.0, "zero_shot": {"banking77": 60.0, "emotion": 40.0, "sst2": 70.0}, "zero_shot_mean": 56.7}
    scores = lambda value: {m: value for m in bench.METRICS}  # noqa: E731
    monkeypatch.setattr(bench, "_untrained", lambda setting, ctx: {"setting": setting, "method": "untrained", "dry_run": False,
                                                                   "dev": scores(60.0), "test": scores(60.0), "general": general})
    monkeypatch.setattr(bench, "run_one", lambda setting, name, config, seed, ctx: {
        "setting": setting, "method": name, "config": config, "seed": seed, "learning_rate": 2e-5, "options": {}, "miner": None,
        "steps": 10, "train_rows": 100, "train_seconds": 1.0, "queue_probe": None, "last_loss": 1.0, "dry_run": False,
        "dev": scores(60.0 + config + len(name) / 100), "test": scores(61.0), "general": general})
    monkeypatch.setattr(bench, "plot", lambda summary, path: None)
    log_path, output = tmp_path / "runs.jsonl", tmp_path / "retrieval_quality.json"
    argv = ["--run-log", str(log_path), "--output", str(output), "--settings", "scifact,nfcorpus_cpu"]
    expected = _old_plan(bench, ["scifact", "nfcorpus_cpu"], list(bench.METHODS), [0, 1, 2], _records(bench, {}))[:4]
    assert bench.main([*argv, "--max-runs", "4"]) == 0
    assert RunLog(log_path).keys() == ["scifact/untrained/0/0", "nfcorpus_cpu/untrained/0/0", *(bench.run_key(*run) for run in expected)]
    assert bench.main([*argv, "--max-runs", "100"]) == bench.NOTHING_LEFT  # every planned run done
    log = RunLog(log_path)
    assert _plan(bench, ["scifact", "nfcorpus_cpu"], [0, 1, 2], log) == []
    assert len(log) == 2 + sum(len(m.configs) for m in bench.METHODS.values()) + 2 * 3 + 4 * 3  # 3 decisive rows, 4 followed ones
    summary = json.loads(output.read_text(encoding="utf-8"))
    assert summary["scifact"]["decisive"] == ["mnrl_st_mined", "queue_corpus_mined", "mnrl_corpus_mined"]
    assert not summary["scifact"]["missing_runs"] and not summary["nfcorpus_cpu"]["missing_runs"]


def test_dev_test_agreement_on_hand_made_runs(bench):
    """Four runs: dev and test rank them alike but for the two closest on dev, which test swaps."""
    runs = [{"dev": {"ndcg_at_10": d}, "test": {"ndcg_at_10": t}} for d, t in ((60.0, 61.0), (70.0, 72.0), (71.0, 71.5), (80.0, 79.0))]
    out = bench.dev_test_agreement(runs)
    # ranks dev 1 2 3 4, test 1 3 2 4: rho = 1 - 6 * 2 / (4 * 15) = 0.8; the one pair within 2 dev points (70, 71) swaps
    assert out == {"runs": 4, "spearman": pytest.approx(0.8), "pairs_within_2_dev_points": 1, "share_test_orders_alike": 0.0}
    assert bench.dev_test_agreement(runs[:2]) is None
    constant = [{"dev": {"ndcg_at_10": d}, "test": {"ndcg_at_10": 50.0}} for d in (1.0, 2.0, 3.0)]
    assert bench.dev_test_agreement(constant)["spearman"] is None  # no NaN in the results file


def test_mined_rows_are_mined_once_across_processes(bench, monkeypatch, tmp_path):
    """The rows cache: a second process (a new Context) reads the mined rows back, with the first
    mining's seconds, instead of mining again; other miner settings, dry runs and pair rows never
    share a cache entry."""
    import argparse

    import datasets

    import contrastive_bert.corpus_mining
    from contrastive_bert.training import retrieval_runs

    calls = []

    def mine(model, data, split, **options):
        calls.append(options)
        return datasets.Dataset.from_dict({"anchor": ["q1", "q2"], "positive": ["d1", "d2"], "negative": ["d9", "d8"]})

    monkeypatch.setattr(contrastive_bert.corpus_mining, "mine_corpus_negatives", mine)
    monkeypatch.setattr(retrieval_runs, "base_model", lambda device: None)
    args = argparse.Namespace(rows_cache=str(tmp_path / "cache"), dry_run=False, device="cpu", data_dir=None)
    first = bench.Context(args, data={"scifact": None})
    rows, seconds, cached = first.train_rows("scifact", "corpus_mined")
    assert len(calls) == 1 and not cached and rows["negative"] == ["d9", "d8"]
    assert first.train_rows("scifact", "corpus_mined") == (rows, seconds, False)  # this process: kept in memory
    again, again_seconds, cached = bench.Context(args, data={"scifact": None}).train_rows("scifact", "corpus_mined")
    assert len(calls) == 1 and cached and again_seconds == seconds and again.to_dict() == rows.to_dict()
    folder = lambda **changes: bench.rows_cache_folder(**{"root": args.rows_cache, "setting": "scifact",  # noqa: E731
                                                          "kind": "corpus_mined", "miner": None, "dry_run": False, **changes})
    assert folder().is_dir()
    assert len({folder(), folder(dry_run=True), folder(kind="st_mined"), folder(kind="st_mined", miner={"range_max": 50}),
                folder(setting="nfcorpus_cpu")}) == 5
    assert folder(kind="pairs") is None and folder(root=None) is None
    no_cache = argparse.Namespace(**{**vars(args), "rows_cache": None})
    assert bench.Context(no_cache, data={"scifact": None}).train_rows("scifact", "corpus_mined")[2] is False and len(calls) == 2

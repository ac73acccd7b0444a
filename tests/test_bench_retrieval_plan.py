"""The retrieval benchmark's plan: every method's configurations at seed 0 first, more seeds only
for the decisive rows chosen on dev (best sentence-transformers method, best of ours, its
ablations), and the NFCorpus CPU setting trains SciFact's dev choices once SciFact's grid is done."""

from __future__ import annotations

import importlib.util
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
    return bench._InMemoryLog(records)


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
    assert bench.decisive_methods("scifact", list(bench.METHODS), 0, log) == []
    todo = bench.plan(["scifact"], list(bench.METHODS), [0, 1, 2], log)
    assert todo == [("scifact", "cached_mnrl", 1, 0)]


def test_decisive_rows_are_the_dev_best_of_each_side_and_the_ablations(bench):
    log = _grid(bench, _dev_scores(bench, {"gist": (1, 60.0), "queue_corpus_mined": (2, 70.0), "mnrl_ance": (0, 65.0)}))
    decisive = bench.decisive_methods("scifact", list(bench.METHODS), 0, log)
    assert decisive == ["gist", "queue_corpus_mined", "mnrl_corpus_mined"]
    todo = bench.plan(["scifact"], list(bench.METHODS), [0, 1, 2], log)
    assert todo[:2] == [("scifact", "gist", 1, 1), ("scifact", "gist", 1, 2)]
    assert ("scifact", "queue_corpus_mined", 2, 1) in todo and ("scifact", "mnrl_corpus_mined", 0, 2) in todo
    assert len(todo) == 6


def test_nfcorpus_cpu_trains_scifacts_dev_choices(bench):
    assert bench.PROTOCOLS["nfcorpus_cpu"].epochs == 1 and bench.PROTOCOLS["nfcorpus_cpu"].max_positives == 1
    partial = _grid(bench, {"mnrl": [60.0]})
    assert bench.follower_runs("nfcorpus_cpu", [0, 1, 2], partial) == []  # SciFact's grid is not complete
    log = _grid(bench, _dev_scores(bench, {"mnrl_st_mined": (2, 61.0), "queue_hard": (1, 70.0), "mnrl_ance": (1, 69.0)}))
    runs = bench.follower_runs("nfcorpus_cpu", [0, 1, 2], log)
    assert runs == [("mnrl", 0), ("mnrl_st_mined", 2), ("queue_hard", 1), ("mnrl_ance", 1)]
    todo = bench.plan(["nfcorpus_cpu"], list(bench.METHODS), [0, 1, 2], log)
    assert todo[:4] == [("nfcorpus_cpu", name, config, 0) for name, config in runs] and len(todo) == 12

"""eval/bench_acl.py's verdict: paired differences by seed, the best method among complete ones, and
ACL-Grad's seed rule (more seeds only if it gated more than 5% of steps)."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "eval" / "bench_acl.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_acl_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def entry(seeds: list[int], accuracies: list[float], planned: list[int] | None = None, dev: float | None = None) -> dict:
    return {"seeds_done": seeds, "seeds_planned": planned or [0, 1, 2], "dev": {"accuracy": dev},
            "test": {"accuracy": {"mean": statistics.fmean(accuracies), "values": accuracies}}}


def test_paired_difference_pairs_by_seed(bench):
    a = entry([0, 1, 2], [80.0, 82.0, 84.0])
    b = entry([2, 0, 1], [85.0, 79.0, 80.0])  # listed in another order: paired by seed, not position
    diff = bench.paired_difference(a, b)
    assert diff["values"] == [1.0, 2.0, -1.0]
    assert diff["mean"] == pytest.approx(2 / 3)
    assert diff["std"] == pytest.approx(statistics.stdev([1.0, 2.0, -1.0]))
    assert diff["seeds_won"] == 2 and diff["clear"] is False
    clear = bench.paired_difference(entry([0, 1, 2], [81.0, 82.0, 83.0]), entry([0, 1, 2], [80.0, 80.5, 81.0]))
    assert clear["clear"] is True and clear["seeds_won"] == 3


def test_verdict_best_among_complete_methods(bench):
    regime = {"ce": entry([0, 1, 2], [80.0, 81.0, 82.0], dev=90.0), "supcon": entry([0, 1, 2], [82.0, 82.0, 83.0], dev=91.0),
              "acl_embed": entry([0, 1, 2], [81.0, 83.0, 82.0], dev=92.0),
              "acl_embed_encoded": entry([0], [99.0], dev=99.0)}  # one seed of three: pending, never "best"
    verdict = bench.verdict(regime, "full")
    assert verdict["best"] == "supcon"
    assert verdict["best_on_dev"] == "acl_embed"  # what dev alone picks may differ from test's best
    assert verdict["dev_accuracy"] == {"ce": 90.0, "supcon": 91.0, "acl_embed": 92.0}
    assert verdict["best_vs_ce"]["values"] == [2.0, 1.0, 1.0]
    assert "best_vs_supcon" not in verdict
    assert verdict["best_acl"] == "acl_embed"
    assert verdict["best_acl_vs_supcon"]["values"] == [-1.0, 1.0, -1.0]
    assert verdict["pending"] == {"acl_embed_encoded": "1 of 3 seeds", "acl_embed_grad": "not run"}


def test_acl_grad_runs_more_seeds_only_when_it_gates(bench):
    best = {"dataset": "emotion", "regime": "full", "method": "acl_embed_grad", "seed": 0, "learning_rate": 1e-4,
            "contrastive_weight": 0.5, "temperature": 0.1}
    assert bench.final_seeds("acl_embed_grad", "full", {}, best) == [0]
    quiet = {bench.run_key(best): {"gated_share": 0.02}}
    assert bench.final_seeds("acl_embed_grad", "full", quiet, best) == [0]
    gating = {bench.run_key(best): {"gated_share": 0.2}}
    assert bench.final_seeds("acl_embed_grad", "full", gating, best) == [0, 1, 2]
    assert bench.final_seeds("ce", "full", {}, best) == [0, 1, 2]

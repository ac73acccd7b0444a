"""eval/bench_acl.py's verdict (the best method among complete ones, paired by seed) and its grid on the
shared protocol: the choices that build on each other's, and ACL-Grad's seed rule (more seeds only if
it gated more than 5% of steps)."""

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
    """A method's entry in the shared result shape (contrastive_bert.benchmarking.protocol)."""
    return {"seeds": seeds, "seeds_planned": planned or [0, 1, 2], "dev": {"accuracy": dev},
            "test": {"accuracy": {"mean": statistics.fmean(accuracies), "values": accuracies}}}


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
    """ACL-Grad runs at ACL-Embed's choice (itself at CE's learning rate), seed 0 first, the other
    seeds only if that run gated more than 5% of its steps."""
    grid = bench.grid("full")
    log: dict[str, dict] = {}

    def add(method: str, config: int, dev: float, **fields) -> None:
        run = grid.dev_runs("emotion", grid.method(method), log)[config] if method != "acl_embed_grad" else \
            grid.final_runs(log, "emotion", grid.method(method), 0)[0]
        log[grid.key(run)] = {**bench.spec_of(run, "full"), "dev": {"accuracy": dev}, **fields}

    grad = grid.method("acl_embed_grad")
    assert grid.final_runs(log, "emotion", grad, 0) == []  # CE has not chosen its learning rate yet
    add("ce", 0, 80.0)
    add("ce", 1, 81.0)  # CE picks lr 2e-4: ACL-Embed's configurations run at it
    assert [bench.spec_of(r, "full")["learning_rate"] for r in grid.dev_runs("emotion", grid.method("acl_embed"), log)] == [2e-4, 2e-4]
    add("acl_embed", 0, 82.0)
    add("acl_embed", 1, 81.5)
    first = grid.final_runs(log, "emotion", grad, 0)
    assert [r.seed for r in first] == [0]
    assert bench.spec_of(first[0], "full") == {"dataset": "emotion", "regime": "full", "method": "acl_embed_grad", "seed": 0,
                                               "learning_rate": 2e-4, "contrastive_weight": 0.1, "temperature": 0.3}
    add("acl_embed_grad", 0, 82.0, gated_share=0.02)
    assert [r.seed for r in grid.final_runs(log, "emotion", grad, 0)] == [0]
    add("acl_embed_grad", 0, 82.0, gated_share=0.2)
    assert [r.seed for r in grid.final_runs(log, "emotion", grad, 0)] == [0, 1, 2]
    assert [r.seed for r in grid.final_runs(log, "emotion", grid.method("ce"), 1)] == [0, 1, 2]

"""eval/bench_acl.py's ``full16k`` regime (emotion on all 16,000 training rows, issue 38) on a hand-built run
log: each method's choice between its two rate settings on dev (seed 0), the pick of the rows that run
seeds 1-2 (the better of CE / CE + SupCon on dev, the better ACL row on dev), the plan's order, the test
means and sample stds, the paired differences, the label head against the linear probe of its own
embeddings, and the batch order's effect (the encoded method at the sample's setting in the class-mixed
order minus the group_by_label order), all worked out by hand and written as literal numbers."""

from __future__ import annotations

import argparse

import pytest
from bench_modules import load_bench

ARGS = argparse.Namespace(max_steps=None, eval_rows=None)

# the two rate settings every method tries on dev (an encoded head has no parameters: the encoder's rate alone)
FAST, SLOW = {"learning_rate": 2e-4, "head_learning_rate": 5e-3}, {"learning_rate": 5e-5, "head_learning_rate": 1e-3}
SUPCON, ACL = {"contrastive_weight": 0.1, "temperature": 0.3}, {"contrastive_weight": 0.5, "temperature": 0.1}
CONFIGS = {
    "ce": (FAST, SLOW),
    "supcon": ({**FAST, **SUPCON}, {**SLOW, **SUPCON}),
    "acl_embed": ({**FAST, **ACL}, {**SLOW, **ACL}),
    "acl_embed_encoded": ({"learning_rate": 2e-4, **ACL}, {"learning_rate": 5e-5, **ACL}),
}
TWIN = "acl_embed_encoded_group_by_label"


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_acl", "bench_acl_full16k")


def _record(bench, method: str, seed: int, dev: float, test: float, config: dict | None = None,
            probe: tuple[float, float] | None = None) -> dict:
    """One run as the benchmark logs it (macro-F1 10 points under accuracy; ``probe``: its linear probe's
    dev and test accuracy)."""
    spec = {"dataset": "emotion", "regime": "full16k", "method": method, "seed": seed, **(config or {})}
    record = {**spec, "key": bench.run_key(spec), "train_rows": 16000, "epochs": 3, "steps": 1497, "train_seconds": 1200.0,
              "dev": {"accuracy": dev, "macro_f1": dev - 10.0}, "test": {"accuracy": test, "macro_f1": test - 10.0}}
    if probe is not None:
        record["probe"] = {"dev": {"accuracy": probe[0], "macro_f1": 0.0}, "test": {"accuracy": probe[1], "macro_f1": 0.0}}
    return record


def _dev_runs(bench) -> list[dict]:
    """Seed 0 of everything: the configuration not chosen scores 50 on test (it must never count)."""
    return [
        _record(bench, "logreg", 0, 60.0, 61.0),
        # CE: dev 88 (fast) < 89 (slow) -> slow
        _record(bench, "ce", 0, 88.0, 50.0, CONFIGS["ce"][0]),
        _record(bench, "ce", 0, 89.0, 88.0, CONFIGS["ce"][1], probe=(90.0, 90.5)),
        # SupCon: dev 89.5 (fast) > 88.5 (slow) -> fast; better than CE's 89 on dev: SupCon runs seeds 1-2
        _record(bench, "supcon", 0, 89.5, 89.0, CONFIGS["supcon"][0], probe=(90.0, 90.0)),
        _record(bench, "supcon", 0, 88.5, 50.0, CONFIGS["supcon"][1]),
        # ACL-Embed: dev 90 and 90 -> the first (fast)
        _record(bench, "acl_embed", 0, 90.0, 89.5, CONFIGS["acl_embed"][0], probe=(91.0, 91.0)),
        _record(bench, "acl_embed", 0, 90.0, 50.0, CONFIGS["acl_embed"][1]),
        # encoded names: dev 86 at the sample's 2e-4, 91 at 5e-5 -> slow; better than ACL-Embed's 90: seeds 1-2
        _record(bench, "acl_embed_encoded", 0, 86.0, 87.5, CONFIGS["acl_embed_encoded"][0], probe=(91.0, 91.5)),
        _record(bench, "acl_embed_encoded", 0, 91.0, 91.0, CONFIGS["acl_embed_encoded"][1], probe=(92.0, 92.5)),
        # the encoded method at the sample's setting in the group_by_label order: dev 84, test 85
        _record(bench, TWIN, 0, 84.0, 85.0, {"batch_order": "group_by_label", **CONFIGS["acl_embed_encoded"][0]}, probe=(90.0, 90.5)),
    ]


def _log(bench) -> list[dict]:
    return [*_dev_runs(bench),
            _record(bench, "supcon", 1, 89.5, 90.0, CONFIGS["supcon"][0], probe=(90.0, 91.0)),
            _record(bench, "supcon", 2, 89.5, 91.0, CONFIGS["supcon"][0], probe=(90.0, 91.0)),
            _record(bench, "acl_embed_encoded", 1, 91.0, 93.0, CONFIGS["acl_embed_encoded"][1], probe=(92.0, 93.0)),
            _record(bench, "acl_embed_encoded", 2, 91.0, 92.0, CONFIGS["acl_embed_encoded"][1], probe=(92.0, 93.5))]


def _runs(records: list[dict]) -> dict[str, dict]:
    return {r["key"]: r for r in records}


def test_the_plan_runs_the_encoded_method_and_the_baselines_first_then_the_twin_then_the_picks_seeds(bench):
    assert [(s["method"], s.get("learning_rate")) for s in bench.plan_block("emotion", "full16k", {})] == [
        ("logreg", None), ("acl_embed_encoded", 2e-4), ("acl_embed_encoded", 5e-5), ("ce", 2e-4), ("ce", 5e-5),
        ("supcon", 2e-4), ("supcon", 5e-5), ("acl_embed", 2e-4), ("acl_embed", 5e-5), (TWIN, 2e-4)]
    # every dev run in but the twin's: no pick yet, so no seeds 1-2; the twin is next
    records = [r for r in _dev_runs(bench) if r["method"] != TWIN]
    assert bench.next_run(bench.BLOCKS, _runs(records)) == {"dataset": "emotion", "regime": "full16k", "method": TWIN, "seed": 0,
                                                            "batch_order": "group_by_label", **CONFIGS["acl_embed_encoded"][0]}
    # all seed-0 runs in: SupCon's and the encoded method's chosen settings at seeds 1 and 2, in that order
    runs = _runs(_dev_runs(bench))
    left = [spec for spec in bench.plan_block("emotion", "full16k", runs) if bench.run_key(spec) not in runs]
    assert [(s["method"], s["seed"], s["learning_rate"]) for s in left] == [
        ("supcon", 1, 2e-4), ("supcon", 2, 2e-4), ("acl_embed_encoded", 1, 5e-5), ("acl_embed_encoded", 2, 5e-5)]
    assert bench.next_run([("emotion", "full16k")], _runs(_log(bench))) is None  # 14 runs: the grid is done


def test_the_choices_on_dev_the_means_stds_and_the_probe_are_by_hand(bench):
    summary, protocol = bench.build_summary(_log(bench), ARGS)
    assert list(summary["settings"]) == ["emotion/full16k"]
    block = summary["settings"]["emotion/full16k"]
    assert list(block) == ["logreg", "ce", "supcon", "acl_embed", "acl_embed_encoded", TWIN]
    assert block["ce"]["chosen_on_dev"]["options"] == {"learning_rate": 5e-5, "head_learning_rate": 1e-3}
    assert block["ce"]["chosen_on_dev"]["dev_by_config"] == {"0": 88.0, "1": 89.0}
    assert block["supcon"]["chosen_on_dev"]["options"] == {"learning_rate": 2e-4, "head_learning_rate": 5e-3, **SUPCON}
    assert block["acl_embed"]["chosen_on_dev"]["config"] == 0  # a tie on dev: the first
    assert block["acl_embed_encoded"]["chosen_on_dev"]["options"] == {"learning_rate": 5e-5, **ACL}
    # seeds: 1-2 for the picks only; the others keep their dev run
    assert {m: block[m]["seeds_planned"] for m in block} == {"logreg": [0], "ce": [0], "supcon": [0, 1, 2], "acl_embed": [0],
                                                            "acl_embed_encoded": [0, 1, 2], TWIN: [0]}
    # SupCon 89, 90, 91 -> mean 90; deviations -1, 0, +1 -> 2 / 2 = 1 -> std 1
    assert block["supcon"]["test"]["accuracy"]["mean"] == pytest.approx(90.0) and block["supcon"]["test"]["accuracy"]["std"] == pytest.approx(1.0)
    # encoded 91, 93, 92 -> mean 92, std 1; macro-F1 81, 83, 82 -> mean 82
    encoded = block["acl_embed_encoded"]
    assert encoded["test"]["accuracy"]["mean"] == pytest.approx(92.0) and encoded["test"]["accuracy"]["std"] == pytest.approx(1.0)
    assert encoded["test"]["macro_f1"]["mean"] == pytest.approx(82.0)
    # CE's one seed at 5e-5: 88
    assert block["ce"]["test"]["accuracy"] == {"mean": 88.0, "std": 0.0, "values": [88.0]}
    # probe of the encoded runs 92.5, 93, 93.5 -> mean 93, deviations -0.5, 0, 0.5 -> 0.5 / 2 -> std 0.5;
    # head - probe: 91 - 92.5 = -1.5, 93 - 93 = 0, 92 - 93.5 = -1.5 -> mean -1; deviations -0.5, +1, -0.5
    # -> 1.5 / 2 = 0.75 -> std 0.8660; dev of the probe at seed 0: 92
    assert encoded["probe_test_accuracy"]["mean"] == pytest.approx(93.0) and encoded["probe_test_accuracy"]["std"] == pytest.approx(0.5)
    assert encoded["head_minus_probe"]["values"] == pytest.approx([-1.5, 0.0, -1.5])
    assert encoded["head_minus_probe"]["mean"] == pytest.approx(-1.0) and encoded["head_minus_probe"]["std"] == pytest.approx(0.866025, abs=1e-6)
    assert encoded["probe_dev_accuracy"] == 92.0
    assert "probe_test_accuracy" not in block["logreg"]  # no probe of its own
    assert protocol["protocol"]["full16k"]["seeds"] == [0, 1, 2]


def test_the_verdict_and_the_batch_order_effect_are_by_hand(bench):
    summary, _ = bench.build_summary(_log(bench), ARGS)
    verdict = summary["comparisons"]["emotion/full16k"]
    # complete (3 seeds): the two picks; CE and ACL-Embed have their one planned seed: neither complete nor pending
    assert verdict["methods_complete"] == ["acl_embed_encoded", "supcon"] and verdict["pending"] == {}
    assert verdict["picked_for_seeds"] == ["supcon", "acl_embed_encoded"]  # SupCon 89.5 > CE 89; encoded 91 > ACL-Embed 90
    assert verdict["best"] == "acl_embed_encoded" and verdict["best_on_dev"] == "acl_embed_encoded"
    assert verdict["dev_accuracy"] == {"supcon": 89.5, "acl_embed_encoded": 91.0}
    # encoded - SupCon: 91 - 89 = 2, 93 - 90 = 3, 92 - 91 = 1 -> mean 2, std 1, won 3 of 3, |2| > 1: clear
    vs_supcon = verdict["best_vs_supcon"]
    assert vs_supcon["values"] == pytest.approx([2.0, 3.0, 1.0]) and vs_supcon["mean"] == pytest.approx(2.0)
    assert vs_supcon["std"] == pytest.approx(1.0) and vs_supcon["clear"] is True
    assert "best_vs_ce" not in verdict and verdict["best_acl"] == "acl_embed_encoded"
    assert verdict["best_acl_vs_supcon"]["mean"] == pytest.approx(2.0)
    # the encoded method at 2e-4, seed 0: class-mixed order dev 86 / test 87.5 against group_by_label 84 / 85
    effect = verdict["batch_order_effect"]
    assert effect["options"] == {"learning_rate": 2e-4, **ACL} and effect["seed"] == 0
    assert effect["class_mixed"] == {"dev": 86.0, "test": 87.5, "test_macro_f1": 77.5, "probe_test": 91.5}
    assert effect["group_by_label"] == {"dev": 84.0, "test": 85.0, "test_macro_f1": 75.0, "probe_test": 90.5}
    assert effect["test_difference"] == pytest.approx(2.5) and effect["dev_difference"] == pytest.approx(2.0)


def test_a_partial_grid_names_what_is_pending_and_has_no_order_effect_yet(bench):
    """No SupCon run, ACL-Embed's slow setting missing, no twin: no pick yet, so every method has its seed 0
    alone planned; pending are the dev runs still to come."""
    records = [r for r in _dev_runs(bench) if r["method"] not in (TWIN, "supcon")
               and not (r["method"] == "acl_embed" and r["learning_rate"] == 5e-5)]
    summary, _ = bench.build_summary(records, ARGS)
    verdict = summary["comparisons"]["emotion/full16k"]
    assert verdict["methods_complete"] == [] and verdict["batch_order_effect"] is None
    assert verdict["pending"] == {"acl_embed": "1 of 2 configurations on dev", "supcon": "not run"}
    assert verdict["pending_why"] == bench.PENDING_WHY
    # every dev run in but the twin's: still no pick; then all in: the picks wait on their seeds 1-2
    assert verdict["picked_for_seeds"] is None
    summary, _ = bench.build_summary([r for r in _dev_runs(bench) if r["method"] != TWIN], ARGS)
    verdict = summary["comparisons"]["emotion/full16k"]
    assert verdict["pending"] == {TWIN: "not run (the pick of the rows for seeds 1-2 waits on it)"}
    assert verdict["picked_for_seeds"] is None
    summary, _ = bench.build_summary(_dev_runs(bench), ARGS)
    verdict = summary["comparisons"]["emotion/full16k"]
    assert verdict["pending"] == {"supcon": "1 of 3 seeds", "acl_embed_encoded": "1 of 3 seeds"}
    assert verdict["picked_for_seeds"] == ["supcon", "acl_embed_encoded"]

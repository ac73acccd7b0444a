"""eval/bench_acl.py's ``build_summary`` (``settings`` and the ``comparisons`` its ``verdict`` builds) on a
small hand-built run log of emotion (full, 3 seeds): the choices on dev that build on each other's
(CE's learning rate, then each contrastive method's (lambda, tau) at it), the test means and sample
stds, the best method on test and on dev, and the paired differences over CE and SupCon, all worked
out by hand and written as literal numbers (issue 38, item 5)."""

from __future__ import annotations

import argparse
import math

import pytest
from bench_modules import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_acl")


ARGS = argparse.Namespace(max_steps=None, eval_rows=None)


def _record(bench, method: str, seed: int, dev: float, test: float, learning_rate: float | None = None,
            pair: tuple[float, float] | None = None, dataset: str = "emotion", regime: str = "full", **fields) -> dict:
    """One run as the benchmark logs it: its spec (whose fields make the key), dev and test scores
    (macro-F1 10 points under accuracy)."""
    spec = {"dataset": dataset, "regime": regime, "method": method, "seed": seed}
    if learning_rate is not None:
        spec["learning_rate"] = learning_rate
    if pair is not None:
        spec.update(contrastive_weight=pair[0], temperature=pair[1])
    return {**spec, "key": bench.run_key(spec), "train_rows": 3000, "epochs": 3, "steps": 270, "train_seconds": 200.0,
            "dev": {"accuracy": dev, "macro_f1": dev - 10.0}, "test": {"accuracy": test, "macro_f1": test - 10.0}, **fields}


# The chosen configurations: CE 2e-4; SupCon (0.1, 0.3) (a tie on dev: the first); ACL-Embed and its
# encoded-names variant (0.5, 0.1) and (0.1, 0.3); ACL-Grad at ACL-Embed's choice.
LR = 2e-4
TEST = {"ce": (84.0, 85.0, 86.0), "supcon": (86.0, 91.0, 87.0), "acl_embed": (88.0, 90.0, 89.0),
        "acl_embed_encoded": (85.0, 86.0, 84.0)}


def _log(bench) -> list[dict]:
    records = [
        _record(bench, "logreg", 0, 70.0, 69.0),  # deterministic on the full train set: one seed
        # CE: dev 85 at 1e-4, 86 at 2e-4 -> 2e-4; the configuration not chosen scores 50 on test
        _record(bench, "ce", 0, 85.0, 50.0, learning_rate=1e-4),
        # SupCon at CE's 2e-4: dev 86.5 and 86.5 -> (0.1, 0.3), the first
        _record(bench, "supcon", 0, 86.5, 50.0, LR, (0.5, 0.1)),
        # ACL-Embed at 2e-4: dev 87 at (0.1, 0.3), 88 at (0.5, 0.1) -> (0.5, 0.1)
        _record(bench, "acl_embed", 0, 87.0, 50.0, LR, (0.1, 0.3)),
        # ACL-Embed, encoded names, at 2e-4: dev 89 at (0.1, 0.3) (the best dev of all), 80 at (0.5, 0.1)
        _record(bench, "acl_embed_encoded", 0, 80.0, 50.0, LR, (0.5, 0.1)),
        # ACL-Grad at ACL-Embed's choice: it gated 2% of its steps (<= 5%), so seed 0 alone is planned;
        # its 95 on test must not make it the best (one seed of three)
        _record(bench, "acl_embed_grad", 0, 88.5, 95.0, LR, (0.5, 0.1), gated_share=0.02),
    ]
    dev = {"ce": 86.0, "supcon": 86.5, "acl_embed": 88.0, "acl_embed_encoded": 89.0}
    pairs = {"ce": None, "supcon": (0.1, 0.3), "acl_embed": (0.5, 0.1), "acl_embed_encoded": (0.1, 0.3)}
    for method, tests in TEST.items():
        for seed, test in enumerate(tests):  # the chosen configuration's seed 0 is also its dev run
            records.append(_record(bench, method, seed, dev[method], test, LR, pairs[method]))
    return records


def test_the_choices_on_dev_build_on_each_other_and_the_means_and_stds_are_by_hand(bench):
    summary, _ = bench.build_summary(_log(bench), ARGS)
    assert list(summary["settings"]) == ["emotion/full"]
    block = summary["settings"]["emotion/full"]
    assert list(block) == ["logreg", "ce", "supcon", "acl_embed", "acl_embed_encoded", "acl_embed_grad"]
    assert block["ce"]["chosen_on_dev"]["options"] == {"learning_rate": 2e-4}
    assert block["ce"]["chosen_on_dev"]["dev_by_config"] == {"0": 85.0, "1": 86.0}
    assert block["supcon"]["chosen_on_dev"]["options"] == {"learning_rate": 2e-4, "contrastive_weight": 0.1, "temperature": 0.3}
    assert block["acl_embed"]["chosen_on_dev"]["options"] == {"learning_rate": 2e-4, "contrastive_weight": 0.5, "temperature": 0.1}
    assert block["acl_embed_encoded"]["chosen_on_dev"]["config"] == 0
    assert block["acl_embed_grad"]["chosen_on_dev"]["options"] == {"learning_rate": 2e-4, "contrastive_weight": 0.5,
                                                                   "temperature": 0.1}
    assert block["acl_embed_grad"]["seeds"] == [0] and block["acl_embed_grad"]["seeds_planned"] == [0]
    assert block["logreg"]["seeds"] == [0] and block["logreg"]["test"]["accuracy"] == {"mean": 69.0, "std": 0.0, "values": [69.0]}
    # CE 84, 85, 86 -> mean 85; deviations -1, 0, +1 -> 2 / 2 = 1 -> std 1
    assert block["ce"]["test"]["accuracy"]["mean"] == pytest.approx(85.0) and block["ce"]["test"]["accuracy"]["std"] == pytest.approx(1.0)
    # macro-F1 74, 75, 76 -> mean 75, std 1
    assert block["ce"]["test"]["macro_f1"]["mean"] == pytest.approx(75.0)
    # SupCon 86, 91, 87 -> mean 88; deviations -2, +3, -1 -> (4 + 9 + 1) / 2 = 7 -> std sqrt(7) = 2.6458
    supcon = block["supcon"]["test"]["accuracy"]
    assert supcon["mean"] == pytest.approx(88.0) and supcon["std"] == pytest.approx(2.645751, abs=1e-6)
    # ACL-Embed 88, 90, 89 -> mean 89, std 1; encoded 85, 86, 84 -> mean 85, std 1
    assert block["acl_embed"]["test"]["accuracy"]["mean"] == pytest.approx(89.0)
    assert block["acl_embed_encoded"]["test"]["accuracy"]["mean"] == pytest.approx(85.0)
    assert block["acl_embed"]["dev"]["accuracy"] == 88.0
    assert block["ce"]["cost"]["epochs"] == 3 and block["ce"]["cost"]["train_seconds"]["mean"] == pytest.approx(200.0)
    assert block["acl_embed_grad"]["gated_share"] == pytest.approx(0.02)


def test_the_verdict_best_on_test_best_on_dev_and_the_paired_differences(bench):
    summary, _ = bench.build_summary(_log(bench), ARGS)
    verdict = summary["comparisons"]["emotion/full"]
    # ACL-Grad has its one planned seed: neither complete nor pending
    assert verdict["methods_complete"] == ["acl_embed", "acl_embed_encoded", "ce", "supcon"]
    assert verdict["pending"] == {} and "pending_why" not in verdict
    # best on test: ACL-Embed (89 > SupCon 88 > CE 85 = encoded 85); dev alone picks the encoded variant (89)
    assert verdict["best"] == "acl_embed"
    assert verdict["best_test_accuracy"]["mean"] == pytest.approx(89.0) and verdict["best_test_accuracy"]["std"] == pytest.approx(1.0)
    assert verdict["best_on_dev"] == "acl_embed_encoded"
    assert verdict["dev_accuracy"] == {"ce": 86.0, "supcon": 86.5, "acl_embed": 88.0, "acl_embed_encoded": 89.0}
    # ACL-Embed - CE: 88 - 84 = +4, 90 - 85 = +5, 89 - 86 = +3 -> mean 4; deviations 0, +1, -1 -> 2 / 2 = 1 -> std 1;
    # won 3 of 3, |4| > 1: clear
    vs_ce = verdict["best_vs_ce"]
    assert vs_ce["values"] == pytest.approx([4.0, 5.0, 3.0]) and vs_ce["mean"] == pytest.approx(4.0)
    assert vs_ce["std"] == pytest.approx(1.0) and vs_ce["seeds_won"] == 3 and vs_ce["clear"] is True
    # ACL-Embed - SupCon: 88 - 86 = +2, 90 - 91 = -1, 89 - 87 = +2 -> mean 1; deviations +1, -2, +1 -> 6 / 2 = 3
    # -> std sqrt(3) = 1.7321; won 2 of 3: not clear
    vs_supcon = verdict["best_vs_supcon"]
    assert vs_supcon["values"] == pytest.approx([2.0, -1.0, 2.0]) and vs_supcon["mean"] == pytest.approx(1.0)
    assert vs_supcon["std"] == pytest.approx(math.sqrt(3.0)) and vs_supcon["seeds_won"] == 2 and vs_supcon["clear"] is False
    # the best ACL variant (ACL-Embed 89 > encoded 85; ACL-Grad incomplete) is the best: the same differences
    assert verdict["best_acl"] == "acl_embed"
    assert verdict["best_acl_vs_supcon"]["values"] == pytest.approx([2.0, -1.0, 2.0])
    assert verdict["best_acl_vs_ce"]["mean"] == pytest.approx(4.0)


def test_a_grad_run_that_gates_plans_every_seed_and_stays_pending_until_they_are_in(bench):
    records = [r for r in _log(bench) if r["method"] != "acl_embed_grad"]
    records.append(_record(bench, "acl_embed_grad", 0, 88.5, 95.0, LR, (0.5, 0.1), gated_share=0.2))  # 20% > 5%
    summary, _ = bench.build_summary(records, ARGS)
    assert summary["settings"]["emotion/full"]["acl_embed_grad"]["seeds_planned"] == [0, 1, 2]
    verdict = summary["comparisons"]["emotion/full"]
    assert verdict["pending"] == {"acl_embed_grad": "1 of 3 seeds"} and verdict["best"] == "acl_embed"


def test_a_block_without_a_complete_method_names_what_is_pending(bench):
    """Banking77 10-shot (5 seeds): CE's three learning rates at seed 0 (dev 50, 55, 52 -> 2e-4) and its
    seed 1; nothing else run."""
    records = [_record(bench, "ce", 0, dev, 40.0 + i, lr, dataset="banking77", regime="10-shot")
               for i, (lr, dev) in enumerate(((1e-4, 50.0), (2e-4, 55.0), (5e-4, 52.0)))]
    records.append(_record(bench, "ce", 1, 55.0, 44.0, 2e-4, dataset="banking77", regime="10-shot"))
    summary, _ = bench.build_summary(records, ARGS)
    ce = summary["settings"]["banking77/10-shot"]["ce"]
    # seeds 0 and 1 of 2e-4: 41, 44 -> mean 42.5; deviations -1.5, +1.5 -> 4.5 / 1 -> std sqrt(4.5) = 2.1213
    assert ce["seeds"] == [0, 1] and ce["seeds_planned"] == [0, 1, 2, 3, 4]
    assert ce["test"]["accuracy"]["mean"] == pytest.approx(42.5) and ce["test"]["accuracy"]["std"] == pytest.approx(2.121320, abs=1e-6)
    verdict = summary["comparisons"]["banking77/10-shot"]
    assert verdict["methods_complete"] == [] and "best" not in verdict and verdict["seeds"] == [0, 1, 2, 3, 4]
    assert verdict["pending"] == {"ce": "2 of 5 seeds", "supcon": "not run", "acl_embed": "not run",
                                  "acl_embed_encoded": "not run", "acl_embed_grad": "not run"}
    assert verdict["pending_why"] == bench.PENDING_WHY


def test_a_dry_run_record_is_left_out_of_the_summary(bench):
    records = _log(bench)
    records[-1] = {**records[-1], "test": {"accuracy": 10.0, "macro_f1": 0.0}, "dry_run": True}  # acl_embed_encoded, seed 2
    summary, _ = bench.build_summary(records, ARGS)
    encoded = summary["settings"]["emotion/full"]["acl_embed_encoded"]
    # without the dry run: seeds 0 and 1, 85 and 86 -> mean 85.5, and the method is pending (2 of 3 seeds)
    assert encoded["seeds"] == [0, 1] and encoded["test"]["accuracy"]["mean"] == pytest.approx(85.5)

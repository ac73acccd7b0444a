"""The README's memory-budget standing row and paragraph, rendered from a hand-built
memory_budget.json: the figures they must show are written here by hand."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import render_readme  # noqa: E402
from render_values import Results  # noqa: E402


def _stat(*values):
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 if len(values) > 1 else 0.0
    return {"mean": mean, "std": std, "values": list(values)}


def _results(seeds_ours=(71.0,), seeds_theirs=(70.0,), pending=True, timing=None):
    diffs = [a - b for a, b in zip(seeds_ours, seeds_theirs)]
    tried = {"configs_tried": 2 if not pending else 1, "configs_planned": 2}
    methods = {
        "mnrl_accumulated": {"test": {"ndcg_at_10": _stat(69.0)}, "seconds_per_step": _stat(30.0), "chosen_on_dev": tried},
        "queue_dual_step": {"test": {"ndcg_at_10": _stat(*seeds_ours)}, "seconds_per_step": _stat(31.0), "chosen_on_dev": tried},
        "mnrl_large": {"test": {"ndcg_at_10": _stat(*seeds_theirs)}, "seconds_per_step": _stat(40.0), "chosen_on_dev": tried},
    }
    verdict = {"baseline": "mnrl_large", "ours": "queue_dual_step", "pending": pending,
               "ours_minus_baseline": {**_stat(*diffs), "seeds": list(range(len(diffs))), "seeds_won": sum(d > 0 for d in diffs)}}
    results = Results(ROOT / "nowhere")
    results["memory_budget"] = {"scifact": {"verdict": verdict, "methods": methods, "missing_runs": 7,
                                            "untrained": {"test": {"ndcg_at_10": 64.5}}},
                                **({"timing": timing} if timing else {})}
    return results


def test_the_paragraph_while_the_grid_runs():
    text = render_readme.memory_budget_paragraph(_results())
    assert "untrained 64.50" in text
    assert "MNRL, 8 x 8 accumulated (ST) 69.00 ± 0.00 (1) (30 s a step on a shared machine)" in text
    assert "dual bank per step (ContAccum) 71.00 ± 0.00 (1)" in text
    assert text.endswith("The grid is still running (7 runs of its plan to go); no verdict yet.")


def test_the_paragraph_with_the_timing_pass_and_a_verdict():
    # ours 71, 72, 70 against 70, 70, 71: differences +1, +2, -1 -> mean 0.67, sample std 1.53, 2 of 3 won
    timing = {"queue_dual_step": {"median_step_seconds": 25.25, "peak_memory_mb": 2560.0}}
    text = render_readme.memory_budget_paragraph(_results((71.0, 72.0, 70.0), (70.0, 70.0, 71.0), pending=False, timing=timing))
    assert "(ContAccum) 71.00 ± 1.00 (3) (25.2 s a step, 2.5 GiB)" in text
    assert text.endswith("minus MNRL, batch 64 (ST; large memory), paired by seed: +0.67 ± 1.53, 2 of 3 seeds.")


def test_the_standing_row_says_seeds_pending_until_it_has_three():
    row = render_readme.memory_budget_standing(_results())
    assert "chosen on dev among the learning rates run so far" in row[0]
    assert row[1] == "MNRL, batch 64, large memory 70.00 ± 0.00 (1)"
    assert row[2] == "`queue_infonce`, 8 x 8, dual bank per step (ContAccum) 71.00 ± 0.00 (1)"
    assert row[3] == "+1.00 at seed 0, paired (seeds pending)"
    done = render_readme.memory_budget_standing(_results((71.0, 72.0, 70.0), (70.0, 70.0, 71.0), pending=False))
    assert done[3] == "+0.67 ± 1.53, 2 of 3 seeds" and "(dev-chosen;" in done[0]

"""eval/bench_early_exit.py's logic on hand-made numbers (no training): the dev choice, the mean ± std
over stage-2 seeds, the fixed-truncation row, the old results kept, and the truncated
AdaptiveLayerLoss model answering through the same head it was trained with (tiny model)."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_early_exit", ROOT / "eval" / "bench_early_exit.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_early_exit"] = module
    spec.loader.exec_module(module)
    return module


def _timed(full_cpu: float, chosen_cpu: float, accuracy: float, full_accuracy: float, layers: float) -> dict:
    def row(cpu, acc, avg):
        return {"accuracy": acc, "throughput": cpu * 0.9, "cpu_throughput": cpu, "avg_layers": avg}

    return {size: {"full": row(full_cpu / k, full_accuracy, 6.0), "chosen": row(chosen_cpu / k, accuracy, layers)}
            for size, k in (("32", 1), ("1", 2))}


def _stage2(seed: int, choice: tuple | None, accuracy: float, full: float, layers: float, speedup: float, exits: dict) -> dict:
    record = {"dataset": "banking77", "part": "stage2", "seed": seed,
              "dev_sweep": {"exits": exits, "full": {"accuracy": 94.0}, "sweep": []},
              "test_sweep": {"exits": exits, "full": {"accuracy": full}, "sweep": []},
              "dev_choice": None if choice is None else {"criterion": choice[0], "threshold": choice[1], "accuracy": 93.5,
                                                         "avg_layers": layers}}
    if choice is not None:
        record["test_timed"] = _timed(100.0, 100.0 * speedup, accuracy, full, layers)
    return record


def test_dev_choice_is_the_fewest_layers_within_a_point(bench):
    """Answered from every head's probabilities: margin 0.05 leaves everyone at layer 2 but loses 2
    points on dev; margin 0.3 keeps the loss under a point at fewer layers than confidence 0.9."""
    from contrastive_bert.inference.early_exit import choose_exit_setting, simulated_sweep

    gold = np.array([0] * 10)
    # layer 2: rows 0-7 sure and right, rows 8-9 wrong with margin 0.2; layer 4 (final): all right
    p2 = np.array([[0.9, 0.1]] * 8 + [[0.4, 0.6]] * 2)
    p3 = np.array([[0.9, 0.1]] * 8 + [[0.45, 0.55]] * 2)  # margin 0.1 at layer 3
    p4 = np.array([[0.8, 0.2]] * 10)
    sweep = simulated_sweep({2: p2, 3: p3, 4: p4}, gold, [("margin", 0.05), ("margin", 0.3), ("confidence", 0.95)])
    by_setting = {(s["criterion"], s["threshold"]): s for s in sweep["sweep"]}
    assert by_setting[("margin", 0.05)] == {"criterion": "margin", "threshold": 0.05, "accuracy": 80.0, "avg_layers": 2.0}
    assert by_setting[("margin", 0.3)]["accuracy"] == 100.0 and by_setting[("margin", 0.3)]["avg_layers"] == pytest.approx(2.4)
    chosen = choose_exit_setting(sweep)
    assert (chosen["criterion"], chosen["threshold"], chosen["accuracy_loss"]) == ("margin", 0.3, 0.0)
    assert "margin 0.05" in bench.PROTOCOL["settings"]  # the benchmark sweeps below the old choice (margin 0.1)


def test_seeds_aggregate_to_mean_and_std(bench):
    exits = {2: 88.0, 3: 90.0, 6: 93.0}
    records = [
        _stage2(2, ("margin", 0.1), 92.0, 93.5, 2.2, 2.6, exits),
        _stage2(0, ("margin", 0.1), 93.0, 93.5, 2.0, 3.0, exits),
        _stage2(1, ("margin", 0.2), 92.5, 93.5, 2.3, 2.8, exits),
        _stage2(3, None, 0.0, 93.5, 6.0, 1.0, exits),  # no setting within a point on dev
    ]
    out = bench.aggregate_seeds(records)
    assert out["seeds"] == [0, 1, 2, 3] and out["seeds_without_a_setting_within_1_point"] == [3]
    assert out["same_setting_every_seed"] is False
    test = out["test"]
    assert test["accuracy_loss"]["values"] == [0.5, 1.0, 1.5]
    assert test["accuracy_loss"]["mean"] == 1.0 and test["accuracy_loss"]["std"] == pytest.approx(0.5)
    assert test["avg_layers"]["mean"] == pytest.approx(2.167, abs=1e-3)
    assert test["speedup"]["32"]["cpu"]["values"] == [3.0, 2.8, 2.6] and test["speedup"]["32"]["cpu"]["mean"] == pytest.approx(2.8)
    assert test["speedup"]["1"]["wall"]["mean"] == pytest.approx(2.8)
    assert out["exit_accuracy_test"]["3"] == {"mean": 90.0, "std": 0.0, "values": [90.0] * 4}


def test_truncation_depths_round_and_neighbours(bench):
    assert bench.truncation_depths(2.4, 6) == {"avg_layers": 2.4, "rounded": 2, "neighbours": [2, 3]}
    assert bench.truncation_depths(2.5, 6)["rounded"] == 3
    assert bench.truncation_depths(3.0, 6)["neighbours"] == [3]
    assert bench.truncation_depths(0.7, 6) == {"avg_layers": 0.7, "rounded": 1, "neighbours": [1]}
    with pytest.raises(ValueError, match="^avg_layers: "):
        bench.truncation_depths(7.0, 6)


def test_truncation_row_from_an_adaptive_record(bench):
    adaptive = {"test_exits": {"1": 60.0, "2": 80.0, "3": 90.0, "4": 91.0, "5": 92.0, "6": 93.0},
                "test_timed": {"32": {"full": {"throughput": 100.0, "cpu_throughput": 100.0},
                                      "truncated": {"2": {"throughput": 290.0, "cpu_throughput": 300.0},
                                                    "3": {"throughput": 190.0, "cpu_throughput": 200.0}}}}}
    row = bench.truncation_row(adaptive, 2.25, reference_accuracy=93.4)
    assert [r["depth"] for r in row["rows"]] == [2, 3] and [r["rounded"] for r in row["rows"]] == [True, False]
    assert row["rows"][0]["loss_vs_own_full"] == 13.0 and row["rows"][0]["loss_vs_multi_exit_full"] == pytest.approx(13.4)
    assert row["rows"][0]["speedup"] == {"32": {"cpu": 3.0, "wall": 2.9}}
    mixed = row["mixed_at_avg_layers"]  # a quarter of the rows at depth 3: 0.75 x 80 + 0.25 x 90
    # and its speed: time per row 0.75 / 3 + 0.25 / 2 of the full model's (CPU), 0.75 / 2.9 + 0.25 / 1.9 (wall)
    assert mixed == {"depths": [2, 3], "share_at_deeper": 0.25, "accuracy": 82.5, "loss_vs_own_full": 10.5,
                     "speedup": {"32": {"cpu": 2.667, "wall": 2.563}}}
    table = bench.dataset_table("banking77", {"test_accuracy": 93.4}, {"test": None, "exit_accuracy_test": {"2": {"mean": 88.0}}},
                                row, adaptive)
    names = [r["row"] for r in table]
    assert names[0].startswith("full model") and "its exit on layer 2" in names[1]
    assert any("truncated to 2 layers (rounded average)" in n for n in names)
    assert any("mixed to 2.25 layers" in n for n in names) and names[-1] == "AdaptiveLayerLoss model, all layers"


def test_stage1_against_the_classifier_recipe(bench):
    acl = {"comparisons": {"banking77/full": {"best_on_dev": "ce"}},
           "settings": {"banking77/full": {"ce": {"test": {"accuracy": {"values": [93.77, 93.18, 93.21]}}, "cost": {"train_rows": 9002},
                                                  "seeds": [0, 1, 2]}}}}
    reference = bench.reference_accuracy(acl, "banking77")
    assert reference["method"] == "ce" and reference["test_accuracy"]["mean"] == pytest.approx(93.39)
    assert bench.reference_accuracy(acl, "emotion") is None
    close = bench.compare_stage1({"test_accuracy": 93.0, "dev_accuracy": 94.0}, reference)
    far = bench.compare_stage1({"test_accuracy": 88.67, "dev_accuracy": 90.2}, reference)
    assert close["within_noise"] is True and far["within_noise"] is False and far["difference"] == pytest.approx(-4.72)


def test_stage1_reference_is_the_setting_with_the_most_training_rows(bench):
    """Emotion's recipe trains on all 16,000 rows: its reference is emotion/full16k's dev pick (free label
    vectors, 92.48), not the 3,000-row sample's (encoded names, 90.43), whatever order the settings come in."""
    def setting(method, values, rows):
        return {method: {"test": {"accuracy": {"values": values}}, "cost": {"train_rows": rows}, "seeds": [0, 1, 2]}}

    acl = {"comparisons": {"emotion/full": {"best_on_dev": "acl_embed_encoded"}, "emotion/full16k": {"best_on_dev": "acl_embed"},
                           "emotion/10-shot": {"best_on_dev": "acl_embed_encoded"}},
           "settings": {"emotion/full": setting("acl_embed_encoded", [90.85, 90.5, 89.95], 3000),
                        "emotion/full16k": setting("acl_embed", [92.4, 92.5, 92.55], 16000),
                        "emotion/10-shot": setting("acl_embed_encoded", [50.0, 47.0, 48.0], 60)}}
    reference = bench.reference_accuracy(acl, "emotion")
    assert (reference["setting"], reference["method"], reference["train_rows"]) == ("emotion/full16k", "acl_embed", 16000)
    assert reference["test_accuracy"]["mean"] == 92.48  # (92.4 + 92.5 + 92.55) / 3, rounded to 2 places
    del acl["settings"]["emotion/full16k"]
    assert bench.reference_accuracy(acl, "emotion")["setting"] == "emotion/full"  # the 10-shot set is no full setting


def test_old_results_kept_under_their_own_key(bench, tmp_path):
    from contrastive_bert.benchmarking import RunLog

    old = {"dataset": "banking77", "dev_choice": {"criterion": "margin"}, "batch_sizes": {"32": {"full": {"accuracy": 88.67}}},
           "environment": {"date": "2026-12-04"}}
    converted = bench.convert_old(old)
    assert converted["batch_sizes"] == old["batch_sizes"] and converted["environment"] == old["environment"]
    assert "300 steps" in converted["note"]
    log = RunLog(tmp_path / "runs.jsonl")
    log.append({"dataset": "banking77", "part": "stage1"}, {"dataset": "banking77", "part": "stage1", "test_accuracy": 93.4,
                                                             "dev_accuracy": 94.1})
    for seed, loss in ((0, 0.5), (1, 0.7)):
        record = _stage2(seed, ("margin", 0.1), 93.4 - loss, 93.4, 2.1, 2.7, {2: 88.0, 6: 93.4})
        log.append({"dataset": "banking77", "part": "stage2", "seed": seed}, record)
    result = bench.assemble(log, old, None, {"seeds": [0, 1]})
    assert result[bench.OLD_KEY] == converted
    assert result["pending"] == ["banking77", "emotion"]  # no truncation model yet; emotion not started
    block = result["datasets"]["banking77"]
    assert block["early_exit"]["test"]["accuracy_loss"]["mean"] == pytest.approx(0.6)
    again = bench.assemble(log, {**result, "environment": {}}, None, {})
    assert again[bench.OLD_KEY] == converted  # a file already converted keeps its block


def test_truncated_adaptive_model_answers_through_its_own_head(tiny_model):
    """The fixed-truncation row's model: every layer's pooled embedding classified by the one label
    head AdaptiveLayerLoss trained it with; truncating to d layers gives exactly those logits."""
    from contrastive_bert.heads.exits import add_exit_heads, tie_exits_to_label_head
    from contrastive_bert.heads.label_embedding import find_label_head
    from contrastive_bert.inference.early_exit import EarlyExitClassifier
    from contrastive_bert.losses import adaptive_layer_baseline

    labels = ["a", "b", "c"]
    texts = [" ".join(["word"] * n) for n in (1, 3, 6, 2, 9)]
    model = copy.deepcopy(tiny_model)
    adaptive_layer_baseline(model, labels, mode="ce")  # attaches the label head the loss trains on every layer
    head = find_label_head(model)
    heads = add_exit_heads(model, labels, head_type="linear")
    tie_exits_to_label_head(heads, head)
    model.eval()
    features = model.preprocess(texts)
    with torch.no_grad():
        states = model[0].auto_model(**{k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids")},
                                     output_hidden_states=True).hidden_states
        for depth in (1, 2):
            pooled = model[1]({"token_embeddings": states[depth], "attention_mask": features["attention_mask"]})["sentence_embedding"]
            expected = head.logits(pooled).softmax(-1)
            got = EarlyExitClassifier(model, "none", batch_size=2).predict_truncated(texts, depth)
            torch.testing.assert_close(torch.from_numpy(got.probabilities), expected, atol=1e-5, rtol=1e-4)


def _stage1(recipe: dict, test: float, batch_order: str | None = None, round_: int = 0) -> dict:
    record = {"dataset": "emotion", "part": "stage1", "test_accuracy": test, "dev_accuracy": test + 1.0,
              "recipe": {**recipe, "output_dir": f"work/emotion-{round_}/stage-1", "data_dir": None}}
    if batch_order is not None:
        record["batch_order"] = batch_order
    return {**record, "round": round_} if round_ else record


def test_a_changed_recipe_or_batch_order_starts_a_new_round_whose_results_replace_the_old_once_complete(bench, tmp_path):
    from contrastive_bert.benchmarking import RunLog

    recipe = {"loss": "acl", "learning_rate": 2e-4, "epochs": 3.0, "seed": 42}
    log = RunLog(tmp_path / "runs.jsonl")
    # round 0: logged before records named their batch order (so: group_by_label)
    log.append(bench.part_key("emotion", "stage1"), _stage1(recipe, 86.25))
    for seed in (0, 1):
        log.append(bench.part_key("emotion", "stage2", seed=seed),
                   {**_stage2(seed, ("margin", 0.1), 90.0, 86.25, 2.0, 2.4, {2: 90.0, 6: 86.25}), "dataset": "emotion"})
    # the same recipe and order (the output folder does not count): round 0; a new order or learning rate: round 1
    assert bench.recipe_round(log, "emotion", bench.trained_setting({**recipe, "output_dir": "elsewhere"}, "group_by_label")) == 0
    now = bench.trained_setting(recipe, "class_mixed_batches")
    assert bench.recipe_round(log, "emotion", now) == 1
    assert bench.recipe_round(log, "emotion", bench.trained_setting({**recipe, "learning_rate": 5e-5}, "group_by_label")) == 1
    assert bench.recipe_round(log, "banking77", now) == 0  # no runs yet: the first round
    assert bench.part_key("emotion", "stage2", 1, seed=0) == {"dataset": "emotion", "part": "stage2", "seed": 0, "round": 1}
    assert bench.part_key("emotion", "stage1", 0) == {"dataset": "emotion", "part": "stage1"}  # round 0 keys as logged
    setup = {"seeds": [0, 1], "no_adaptive": True}
    # round 1 has its stage 1 but not its seeds: round 0 still shown, flagged, and the data set pending
    log.append(bench.part_key("emotion", "stage1", 1), _stage1(recipe, 92.75, "class_mixed_batches", 1))
    assert bench.recipe_round(log, "emotion", now) == 1
    result = bench.assemble(log, None, None, setup, {"emotion": 1})
    block = result["datasets"]["emotion"]
    assert block["round"] == 0 and block["stage1"]["test_accuracy"] == 86.25 and block["stage1_batch_order"] == "group_by_label"
    assert "round 1" in block["superseded"] and "emotion" in result["pending"]
    # every seed of round 1 in: round 1 shown, its own stage 2 only (loss 92.75 - 92.0 = 0.75 and 0.25 -> mean 0.5)
    for seed, accuracy in ((0, 92.0), (1, 92.5)):
        log.append(bench.part_key("emotion", "stage2", 1, seed),
                   {**_stage2(seed, ("margin", 0.1), accuracy, 92.75, 2.5, 2.0, {2: 91.0, 6: 92.75}), "dataset": "emotion", "round": 1})
    result = bench.assemble(log, None, None, setup, {"emotion": 1})
    block = result["datasets"]["emotion"]
    assert block["round"] == 1 and block["stage1"]["test_accuracy"] == 92.75 and "superseded" not in block
    assert block["early_exit"]["test"]["accuracy_loss"]["mean"] == pytest.approx(0.5)
    assert block["stage1_batch_order"] == "class_mixed_batches"
    # a round with nothing run and no earlier round: no block
    assert "banking77" not in result["datasets"]


def test_the_batch_order_of_a_loss_is_the_one_the_training_loop_gives_it(bench):
    assert bench.batch_order_of("acl") == "class_mixed_batches" and bench.batch_order_of("cross_layer") == "class_mixed_batches"
    assert bench.batch_order_of("mnrl") == "no_duplicates"

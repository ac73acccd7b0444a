"""Early-exit inference: layer-wise equality with HF, equality with the full model when nothing
exits, per-example consistency when rows are dropped, measured compute saving, criteria, errors, CLI."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from contrastive_bert.encoder import LayerwiseEncoder
from contrastive_bert.heads.exits import add_exit_heads, exit_outputs
from contrastive_bert.inference.early_exit import EarlyExitClassifier, choose_exit_setting, sweep_thresholds
from contrastive_bert.inference.exit_criteria import ExitCriterion, get_criterion, register_criterion

LABELS = ["a", "b", "c"]
# the tiny fixture's tokenizer maps words to [UNK]: lengths make the examples differ
TEXTS = [" ".join(["word"] * n) for n in (1, 7, 3, 12, 2, 5, 9, 4, 15, 6, 1, 8)]


@pytest.fixture(scope="module")
def _multi_exit_session(tmp_path_factory):
    from conftest import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("tiny4_ee"), num_layers=4)
    torch.manual_seed(3)
    add_exit_heads(model, LABELS, exit_layers=[1, 2, 3], head_type="mha")
    return model.eval()


@pytest.fixture()
def multi_exit(_multi_exit_session):
    return copy.deepcopy(_multi_exit_session)


def test_layerwise_encoder_equals_hf_hidden_states(multi_exit):
    features = multi_exit.preprocess(TEXTS)
    encoder = LayerwiseEncoder(multi_exit[0].auto_model)
    with torch.no_grad():
        ours = encoder.all_hidden_states(features["input_ids"], features["attention_mask"], features["token_type_ids"])
        hf = multi_exit[0].auto_model(
            input_ids=features["input_ids"], attention_mask=features["attention_mask"],
            token_type_ids=features["token_type_ids"], output_hidden_states=True,
        ).hidden_states
    assert len(ours) == len(hf) == 5
    for a, b in zip(ours, hf):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("criterion, threshold", [("confidence", 1.0), ("margin", 1.0), ("patience", 5), ("none", None)])
def test_no_early_exit_equals_full_model(multi_exit, criterion, threshold):
    classifier = EarlyExitClassifier(multi_exit, criterion, threshold, batch_size=5)
    early = classifier.predict(TEXTS)
    full = classifier.predict_full(TEXTS)
    assert (early.layers_used == 4).all() and early.avg_layers == 4.0
    assert (early.predictions == full.predictions).all()
    torch.testing.assert_close(torch.from_numpy(early.probabilities), torch.from_numpy(full.probabilities),
                               atol=1e-5, rtol=1e-5)
    # and both equal the ST forward through the exit heads (final exit)
    with torch.no_grad():
        logits = exit_outputs(multi_exit, multi_exit.preprocess(TEXTS))["exit_logits"][4]
    assert (logits.argmax(-1).numpy() == full.predictions).all()


@pytest.mark.parametrize("regroup", [True, False])
@pytest.mark.parametrize("criterion, threshold", [("confidence", 0.9), ("margin", 0.8), ("patience", 2)])
def test_each_example_answered_by_its_exit(multi_exit, criterion, threshold, regroup):
    """With rows dropped, padding trimmed (and running rows regrouped across batches), each
    example's answer is the one its exit layer gives on the full (un-dropped) batch, and the
    criterion fired there and not before."""
    classifier = EarlyExitClassifier(multi_exit, criterion, threshold, batch_size=6, regroup=regroup)
    result = classifier.predict(TEXTS)
    with torch.no_grad():
        logits = exit_outputs(multi_exit, multi_exit.preprocess(TEXTS))["exit_logits"]
    probs = {m: logits[m].softmax(-1) for m in logits}
    history = torch.stack([probs[m].argmax(-1) for m in (1, 2, 3, 4)], dim=1)
    for i, layer in enumerate(result.layers_used.tolist()):
        torch.testing.assert_close(torch.from_numpy(result.probabilities[i]), probs[layer][i], atol=1e-4, rtol=1e-4)
        for m in (1, 2, 3):
            fired = bool(classifier.criterion.should_exit(probs[m][i : i + 1], history[i : i + 1, :m]))
            if m < layer:
                assert not fired, (i, m, layer)
            elif m == layer:
                assert fired, (i, m, layer)
    assert len(set(result.layers_used.tolist())) >= 2  # the settings make rows exit at different layers
    assert len(result.batch_avg_layers) == 2
    assert result.avg_layers == pytest.approx(result.layers_used.mean())


def _layer_calls(model, criterion, threshold, batch_size=12, regroup=True) -> tuple[list[tuple[int, int]], object]:
    """(layer, rows) of every encoder-layer call during one early-exit predict, and the result."""
    calls: list[tuple[int, int]] = []
    hooks = [
        layer.register_forward_hook(lambda module, args, output, i=i: calls.append((i, args[0].shape[0])))
        for i, layer in enumerate(model[0].auto_model.encoder.layer, start=1)
    ]
    try:
        result = EarlyExitClassifier(model, criterion, threshold, batch_size=batch_size, regroup=regroup).predict(TEXTS)
    finally:
        for hook in hooks:
            hook.remove()
    return calls, result


def test_exited_rows_are_not_computed(multi_exit):
    calls, result = _layer_calls(multi_exit, "confidence", 0.0)
    assert (result.layers_used == 1).all()  # max p > 0 always: every row exits at layer 1
    assert calls == [(1, 12)]  # layers 2-4 never ran


def test_rows_shrink_layer_by_layer(multi_exit):
    calls, result = _layer_calls(multi_exit, "margin", 0.8)
    rows_per_layer: dict[int, int] = {}
    for layer, rows in calls:
        rows_per_layer[layer] = rows_per_layer.get(layer, 0) + rows
    assert 0 < rows_per_layer[4] < 12  # some rows stopped early, some ran all layers
    for layer in range(1, 5):
        assert rows_per_layer.get(layer, 0) == int((result.layers_used >= layer).sum())
    assert sum(rows_per_layer.values()) == int(result.layers_used.sum())


def test_regrouping_runs_deeper_layers_on_full_batches(multi_exit):
    """Regrouped: after the first exit the running rows of all batches are pooled, so every deeper
    layer runs on full batches (one short one at most); per batch, the leftovers of each batch run
    on their own. Same answers either way."""
    calls, pooled = _layer_calls(multi_exit, "margin", 0.6, batch_size=3, regroup=True)
    calls_apart, apart = _layer_calls(multi_exit, "margin", 0.6, batch_size=3, regroup=False)
    assert (pooled.layers_used == apart.layers_used).all() and (pooled.predictions == apart.predictions).all()
    torch.testing.assert_close(torch.from_numpy(pooled.probabilities), torch.from_numpy(apart.probabilities),
                               atol=1e-5, rtol=1e-5)
    assert len(set(pooled.layers_used.tolist())) >= 2  # some rows exit early, some run on
    for layer in range(2, 5):
        running = int((pooled.layers_used >= layer).sum())
        pooled_sizes = [rows for m, rows in calls if m == layer]
        assert sum(pooled_sizes) == running
        assert pooled_sizes == [3] * (running // 3) + ([running % 3] if running % 3 else [])
        batches = [pooled.layers_used[order] for order in _length_order_batches(3)]
        apart_sizes = [rows for m, rows in calls_apart if m == layer]
        assert apart_sizes == [int((b >= layer).sum()) for b in batches if (b >= layer).any()]
    assert len(calls) < len(calls_apart)  # fewer, fuller layer calls


def _length_order_batches(batch_size: int) -> list[list[int]]:
    """Row indices of TEXTS per batch, in the classifier's order (longest first, stable)."""
    import numpy as np

    order = np.argsort([-len(t) for t in TEXTS], kind="stable")
    return [order[b : b + batch_size].tolist() for b in range(0, len(TEXTS), batch_size)]


def test_criteria_by_hand():
    probs = torch.tensor([[0.95, 0.03, 0.02], [0.5, 0.4, 0.1], [0.6, 0.2, 0.2]])
    history = torch.tensor([[0, 0], [1, 0], [2, 2]])
    assert get_criterion("confidence").threshold == 0.9
    assert get_criterion("confidence").should_exit(probs, history).tolist() == [True, False, False]
    assert get_criterion("margin", 0.3).should_exit(probs, history).tolist() == [True, False, True]
    assert get_criterion("patience", 2).should_exit(probs, history).tolist() == [True, False, True]
    assert get_criterion("patience", 2).should_exit(probs, history[:, :1]).tolist() == [False] * 3
    assert get_criterion("none").should_exit(probs, history).tolist() == [False] * 3


def test_user_criterion_registered_and_used(multi_exit):
    class EntropyCriterion(ExitCriterion):
        name = "test_entropy"
        default_threshold = 0.5

        def should_exit(self, probabilities, history):
            entropy = -(probabilities * probabilities.clamp_min(1e-12).log()).sum(-1)
            return entropy / math.log(probabilities.shape[1]) < self.threshold + 1e-6

    register_criterion(EntropyCriterion)
    from contrastive_bert.inference.exit_criteria import criterion_names

    assert "test_entropy" in criterion_names()
    never = EarlyExitClassifier(multi_exit, "test_entropy", 0.0, batch_size=4).predict(TEXTS)
    always = EarlyExitClassifier(multi_exit, "test_entropy", 1.0, batch_size=4).predict(TEXTS)
    assert (never.layers_used == 4).all()  # no prediction is one-hot: normalised entropy > 0
    assert (always.layers_used == 1).all()  # normalised entropy <= 1 always


def test_truncated_and_sweep(multi_exit):
    classifier = EarlyExitClassifier(multi_exit, "confidence", batch_size=4)
    truncated = classifier.predict_truncated(TEXTS, 2)
    assert (truncated.layers_used == 2).all()
    with torch.no_grad():
        logits = exit_outputs(multi_exit, multi_exit.preprocess(TEXTS))["exit_logits"][2]
    assert (truncated.predictions == logits.argmax(-1).numpy()).all()
    labels = [0] * len(TEXTS)
    out = sweep_thresholds(multi_exit, TEXTS, labels, [("confidence", 0.5), ("margin", 1.0), ("patience", 2)],
                           batch_size=4, truncated_depths=[1, 2])
    assert set(out["full"]) == {"accuracy", "throughput", "cpu_throughput", "avg_layers"}
    assert out["full"]["cpu_throughput"] > 0
    assert out["full"]["avg_layers"] == 4.0
    assert [s["criterion"] for s in out["sweep"]] == ["confidence", "margin", "patience"]
    assert out["sweep"][1]["avg_layers"] == 4.0 and out["sweep"][1]["accuracy"] == out["full"]["accuracy"]
    assert [t["avg_layers"] for t in out["truncated"]] == [1.0, 2.0]


def test_the_sweep_shows_its_progress_when_asked(multi_exit, capsys):
    """A dev sweep runs for minutes: with ``show_progress_bar`` a bar counts the settings measured
    (full model, each truncation, each setting), silent without it."""
    labels = [0] * len(TEXTS)
    settings = [("confidence", 0.5), ("margin", 1.0)]
    sweep_thresholds(multi_exit, TEXTS, labels, settings, batch_size=4, truncated_depths=[1], show_progress_bar=True)
    err = capsys.readouterr().err
    assert "early-exit sweep" in err and "4/4" in err
    sweep_thresholds(multi_exit, TEXTS, labels, settings, batch_size=4)
    assert "early-exit sweep" not in capsys.readouterr().err


def test_bad_input(multi_exit, tiny_model):
    for threshold in (-0.1, 1.5):
        with pytest.raises(ValueError, match="threshold"):
            EarlyExitClassifier(multi_exit, "confidence", threshold)
        with pytest.raises(ValueError, match="threshold"):
            EarlyExitClassifier(multi_exit, "margin", threshold)
    with pytest.raises(ValueError, match="criterion"):
        EarlyExitClassifier(multi_exit, "entropy")
    with pytest.raises(ValueError, match="patience"):
        EarlyExitClassifier(multi_exit, "patience", 0)
    with pytest.raises(ValueError, match="model: has no exit heads"):
        EarlyExitClassifier(tiny_model)
    with pytest.raises(ValueError, match="regroup: must be true or false"):
        EarlyExitClassifier(multi_exit, regroup="yes")
    with pytest.raises(ValueError, match="regroup_window: must be an integer >= 1"):
        EarlyExitClassifier(multi_exit, regroup_window=0)
    classifier = EarlyExitClassifier(multi_exit)
    with pytest.raises(ValueError, match="texts"):
        classifier.predict([])
    with pytest.raises(ValueError, match="texts"):
        classifier.predict(["ok", "  "])
    with pytest.raises(ValueError, match="layer"):
        classifier.predict_truncated(["ok"], 9)


def test_cli_classify_and_sweep(multi_exit, tmp_path, capsys):
    from contrastive_bert.cli import build_cli, main

    multi_exit.save(str(tmp_path / "model"))
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS[:5]) + "\n")
    args = build_cli().parse_args(
        ["early-exit", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "texts.txt"),
         "--criterion", "margin", "--threshold", "0.2", "--output", str(tmp_path / "out.jsonl")]
    )
    assert args.func(args) == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and all(r["label"] in LABELS and 1 <= r["exit_layer"] <= 4 for r in rows)
    assert "average layers" in capsys.readouterr().err
    # --no-regroup (each batch on its own) gives the same answers
    apart = build_cli().parse_args(
        ["early-exit", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "texts.txt"),
         "--criterion", "margin", "--threshold", "0.2", "--batch-size", "2", "--no-regroup",
         "--output", str(tmp_path / "apart.jsonl")]
    )
    assert apart.regroup is False and args.regroup is True
    assert apart.func(apart) == 0
    rows_apart = [json.loads(line) for line in (tmp_path / "apart.jsonl").read_text().splitlines()]
    assert [(r["label"], r["exit_layer"]) for r in rows_apart] == [(r["label"], r["exit_layer"]) for r in rows]
    # bad threshold -> exit code 2 with the argument named
    code = main(["early-exit", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "texts.txt"),
                 "--threshold", "1.5"])
    assert code == 2 and "threshold" in capsys.readouterr().err


def test_choose_exit_setting_is_the_fewest_layers_within_the_loss():
    dev = {"full": {"accuracy": 90.0}, "sweep": [
        {"criterion": "margin", "threshold": 0.1, "accuracy": 88.5, "avg_layers": 1.5},  # 1.5 points lost: out
        {"criterion": "margin", "threshold": 0.2, "accuracy": 89.0, "avg_layers": 2.0},  # exactly 1 point: in
        {"criterion": "confidence", "threshold": 0.9, "accuracy": 89.5, "avg_layers": 2.0},  # same layers, more accurate
        {"criterion": "patience", "threshold": 2, "accuracy": 90.0, "avg_layers": 3.0},
    ]}
    chosen = choose_exit_setting(dev)
    assert (chosen["criterion"], chosen["threshold"], chosen["accuracy_loss"], chosen["full_accuracy"]) == ("confidence", 0.9, 0.5, 90.0)
    assert choose_exit_setting(dev, max_loss=1.5)["threshold"] == 0.1
    assert choose_exit_setting(dev, max_loss=0.4)["criterion"] == "patience"
    assert choose_exit_setting(dev, max_loss=0)["criterion"] == "patience"
    assert choose_exit_setting({"full": {"accuracy": 95.0}, "sweep": dev["sweep"]}) is None
    with pytest.raises(ValueError, match="max_loss"):
        choose_exit_setting(dev, max_loss=-1)


def test_cli_sweep_chooses_on_dev_and_reports_test(multi_exit, tmp_path, capsys):
    """--sweep measures every setting on the validation split, picks by the dev rule, and measures
    only that setting on test, at batch 1 and --batch-size, on both clocks."""
    from contrastive_bert.cli import main
    from contrastive_bert.data import load_dataset

    multi_exit.save(str(tmp_path / "model"))
    rows = [{"text": TEXTS[i % len(TEXTS)] + " x" * (i // len(TEXTS)), "label": i % 3} for i in range(60)]
    data = tmp_path / "labelled.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["early-exit", "--model", str(tmp_path / "model"), "--sweep", "--dataset", str(data), "--criterion",
            "confidence", "--thresholds", "0.5,1.0", "--batch-size", "4", "--output", str(tmp_path / "sweep.json")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "sweep.json").read_text())
    dev_rows = len(load_dataset(str(data), split="validation"))
    assert result["dev"]["rows"] == dev_rows and result["dev"]["split"] == "validation"
    assert [s["threshold"] for s in result["dev"]["sweep"]] == [0.5, 1.0]
    assert result["dev"]["sweep"][1]["accuracy"] == result["dev"]["full"]["accuracy"]  # 1.0: nobody exits
    assert result["dev_choice"] == choose_exit_setting(result["dev"])
    assert set(result["test"]) == {"1", "4"}
    for part in result["test"].values():
        assert (part["early_exit"]["criterion"], part["early_exit"]["threshold"]) == (
            result["dev_choice"]["criterion"], result["dev_choice"]["threshold"])
        assert part["speedup"] == round(part["early_exit"]["throughput"] / part["full"]["throughput"], 2)
        assert part["cpu_speedup"] == round(part["early_exit"]["cpu_throughput"] / part["full"]["cpu_throughput"], 2)
    assert f"chosen on dev: confidence {result['dev_choice']['threshold']}" in out and "speed-up CPU" in out
    # --max-samples (the one row-limit name; --max-examples still accepted) cuts both splits
    assert main([*argv[:-2], "--max-samples", "5", "--output", str(tmp_path / "five.json")]) == 0
    five = json.loads((tmp_path / "five.json").read_text())
    assert five["dev"]["rows"] == 5 and five["test_rows"] == 5
    assert main([*argv[:-2], "--max-examples", "6", "--output", str(tmp_path / "six.json")]) == 0
    assert json.loads((tmp_path / "six.json").read_text())["test_rows"] == 6
    capsys.readouterr()
    # thresholds without a criterion mean nothing: refused before the model loads
    assert main(["early-exit", "--model", str(tmp_path / "model"), "--sweep", "--dataset", str(data),
                 "--thresholds", "0.5"]) == 2
    assert "thresholds: give --criterion too" in capsys.readouterr().err


def test_default_criterion_is_one_constant(multi_exit):
    """exit_criteria.DEFAULT_CRITERION is the classifier's and the CLI's default."""
    from contrastive_bert.cli import build_cli
    from contrastive_bert.inference.exit_criteria import DEFAULT_CRITERION

    assert DEFAULT_CRITERION == "margin"
    assert EarlyExitClassifier(multi_exit).criterion.name == DEFAULT_CRITERION
    assert EarlyExitClassifier(multi_exit).threshold == 0.3
    help_text = build_cli()._subparsers._group_actions[0].choices["early-exit"].format_help()
    assert f"Classify: default {DEFAULT_CRITERION}" in " ".join(help_text.split())


@pytest.mark.slow
def test_cli_sweep_on_real_data(multi_exit, tmp_path, shared_data):
    from contrastive_bert.cli import build_cli

    multi_exit.save(str(tmp_path / "model"))
    args = build_cli().parse_args(
        ["early-exit", "--model", str(tmp_path / "model"), "--sweep", "--dataset", "emotion", "--data-dir",
         str(shared_data), "--criterion", "confidence", "--thresholds", "0.5,1.0", "--max-samples", "40",
         "--output", str(tmp_path / "sweep.json")]
    )
    assert args.func(args) == 0
    result = json.loads((tmp_path / "sweep.json").read_text())
    assert result["dataset"] == "emotion" and len(result["dev"]["sweep"]) == 2
    assert result["dev"]["sweep"][1]["accuracy"] == result["dev"]["full"]["accuracy"]


@pytest.mark.slow
def test_bundled_model_layerwise_equals_hf(bundled_model):
    add_exit_heads(bundled_model, LABELS, exit_layers=[2, 4])
    bundled_model.eval()
    texts = ["I lost my card yesterday", "how long does a transfer take?", "hi"]
    classifier = EarlyExitClassifier(bundled_model, "confidence", 1.0)
    early, full = classifier.predict(texts), classifier.predict_full(texts)
    assert (early.predictions == full.predictions).all()
    features = bundled_model.preprocess(texts)
    with torch.no_grad():
        ours = classifier.encoder.all_hidden_states(features["input_ids"], features["attention_mask"],
                                                    features["token_type_ids"])
        hf = bundled_model[0].auto_model(**{k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids")},
                                         output_hidden_states=True).hidden_states
    for a, b in zip(ours, hf):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_predict_sets_eval_mode_only_when_needed(multi_exit, monkeypatch):
    """A model in training mode is put in eval mode (no dropout); one already in eval mode is not
    walked again on every call (model.eval() is ~0.4 ms per call at batch 1 on MiniLM)."""
    classifier = EarlyExitClassifier(multi_exit, "margin", 0.5, batch_size=1)
    multi_exit.train()
    first = classifier.predict(TEXTS[:3])
    assert not any(module.training for module in multi_exit.modules())
    calls = []
    monkeypatch.setattr(type(multi_exit), "eval", lambda self: calls.append(1) or self)
    again = classifier.predict(TEXTS[:3])
    assert calls == [] and (again.predictions == first.predictions).all()


@pytest.mark.parametrize("criterion, threshold", [("confidence", 0.4), ("margin", 0.05), ("patience", 2), ("none", None)])
def test_simulated_early_exit_equals_the_real_one(multi_exit, criterion, threshold):
    """Answers and exit layers computed from every head's probabilities equal what predict gives."""
    from contrastive_bert.inference.early_exit import exit_probabilities, simulate_early_exit, simulated_sweep

    probs = exit_probabilities(multi_exit, TEXTS, batch_size=5)
    assert sorted(probs) == [1, 2, 3, 4] and probs[4].shape == (len(TEXTS), 3)
    predicted, used = simulate_early_exit(probs, criterion, threshold)
    real = EarlyExitClassifier(multi_exit, criterion, threshold, batch_size=4).predict(TEXTS)
    assert (used == real.layers_used).all() and (predicted == real.predictions).all()
    labels = [0, 1, 2] * 4
    sweep = simulated_sweep(probs, labels, [(criterion, threshold)])
    assert sweep["sweep"][0]["accuracy"] == round(real.accuracy(labels), 2)
    assert sweep["sweep"][0]["avg_layers"] == round(real.avg_layers, 3)
    assert sweep["full"]["accuracy"] == sweep["exits"][4] == round(
        EarlyExitClassifier(multi_exit, "none").predict_full(TEXTS).accuracy(labels), 2)


def test_simulated_early_exit_by_hand():
    import numpy as np

    from contrastive_bert.inference.early_exit import simulate_early_exit, simulated_sweep

    probs = {2: np.array([[0.9, 0.1], [0.55, 0.45], [0.6, 0.4]]), 6: np.array([[0.2, 0.8], [0.1, 0.9], [0.3, 0.7]])}
    predicted, used = simulate_early_exit(probs, "margin", 0.15)  # margins at layer 2: 0.8, 0.1, 0.2
    assert used.tolist() == [2, 6, 2] and predicted.tolist() == [0, 1, 0]
    sweep = simulated_sweep(probs, [0, 1, 1], [("margin", 0.15), ("confidence", 0.95)])
    assert sweep["exits"] == {2: pytest.approx(33.33), 6: pytest.approx(66.67)}
    assert sweep["sweep"] == [{"criterion": "margin", "threshold": 0.15, "accuracy": pytest.approx(66.67), "avg_layers": pytest.approx(3.333)},
                              {"criterion": "confidence", "threshold": 0.95, "accuracy": pytest.approx(66.67), "avg_layers": 6.0}]
    assert choose_exit_setting(sweep)["criterion"] == "margin"

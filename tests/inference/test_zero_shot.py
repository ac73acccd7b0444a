"""ZeroShotClassifier and the ``classify`` CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from contrastive_bert.inference import ZeroShotClassifier

LABELS = ["card payment", "top up", "money transfer"]
TEXTS = ["card payment", "top up", "money transfer", "my card payment failed"]


def test_probabilities_are_softmax_of_scaled_cosines(tiny_model):
    model = tiny_model
    classifier = ZeroShotClassifier(model, LABELS, template="{}", scale=10.0)
    texts = torch.as_tensor(model.encode(TEXTS))
    labels = torch.as_tensor(model.encode(LABELS))
    cosine = F.normalize(texts, dim=-1) @ F.normalize(labels, dim=-1).T
    np.testing.assert_allclose(classifier.similarities(TEXTS), cosine.numpy(), rtol=1e-5, atol=1e-6)
    probabilities = classifier.predict_proba(TEXTS)
    assert probabilities.shape == (4, 3)
    np.testing.assert_allclose(probabilities, torch.softmax(10 * cosine, dim=-1).numpy(), rtol=1e-5, atol=1e-6)
    # a text identical to the label prompt has cosine 1 with it: its own label wins
    assert classifier.predict(TEXTS[:3]) == LABELS


def test_multi_label_by_threshold_and_descriptions(tiny_model):
    model = tiny_model
    classifier = ZeroShotClassifier(model, LABELS, template="{}", multi_label=True, threshold=0.999)
    predictions = classifier.predict(TEXTS[:3])
    assert predictions == [[label] for label in LABELS]  # only the identical prompt passes 0.999
    probabilities = classifier.predict_proba(TEXTS[:3])
    assert probabilities.shape == (3, 3) and np.all(np.diag(probabilities) > 0.5)
    everything = ZeroShotClassifier(model, LABELS, template="{}", multi_label=True, threshold=-1.0)
    assert all(len(labels) == 3 for labels in everything.predict(TEXTS))
    described = ZeroShotClassifier(model, {"a": "card payment", "b": "top up"}, template="{}")
    assert described.labels == ["a", "b"] and described.predict(["card payment", "top up"]) == ["a", "b"]


def test_bad_input(tiny_model):
    with pytest.raises(ValueError, match="labels: need at least 2"):
        ZeroShotClassifier(tiny_model, ["only"])
    with pytest.raises(ValueError, match="labels: duplicate"):
        ZeroShotClassifier(tiny_model, ["a", "a"])
    with pytest.raises(ValueError, match="template"):
        ZeroShotClassifier(tiny_model, ["a", "b"], template="no slot")
    with pytest.raises(ValueError, match="threshold"):
        ZeroShotClassifier(tiny_model, ["a", "b"], threshold=2.0)
    classifier = ZeroShotClassifier(tiny_model, ["a", "b"])
    with pytest.raises(ValueError, match="texts: is empty"):
        classifier.predict([])
    with pytest.raises(ValueError, match="texts"):
        classifier.predict_proba("one string")


def test_classify_cli_zero_shot_and_trained_head(tiny_model, tmp_path, capsys):
    from contrastive_bert.cli import main
    from contrastive_bert.heads.label_embedding import attach_label_head

    model = tiny_model
    model.save(str(tmp_path / "plain"))
    inputs = tmp_path / "texts.txt"
    inputs.write_text("card payment\n\ntop up\n")
    code = main(["classify", "--model", str(tmp_path / "plain"), "--labels", "card payment, top up",
                 "--template", "{}", "--input", str(inputs), "--output", str(tmp_path / "out.jsonl")])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == ["card payment\tcard payment", "top up\ttop up"]
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert records[0]["prediction"] == "card payment"
    assert sum(records[0]["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)

    # without --labels: the trained head of a saved model classifies
    head = attach_label_head(model, ["x", "y"])
    with torch.no_grad():
        head.weight.copy_(torch.as_tensor(model.encode(["top up", "card payment"])))
    model.save(str(tmp_path / "headed"))
    assert main(["classify", "--model", str(tmp_path / "headed"), "--input", str(inputs)]) == 0
    assert capsys.readouterr().out.strip().splitlines() == ["y\tcard payment", "x\ttop up"]

    # errors exit with code 2 and name the argument
    assert main(["classify", "--model", str(tmp_path / "plain"), "--input", str(inputs)]) == 2
    assert "--labels: required" in capsys.readouterr().err
    assert main(["classify", "--model", str(tmp_path / "plain"), "--labels", "a", "--input", str(inputs)]) == 2
    assert "--labels: need at least 2" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    assert main(["classify", "--model", str(tmp_path / "plain"), "--labels", "a,b", "--input", str(empty)]) == 2
    assert "--input" in capsys.readouterr().err


@pytest.mark.slow
def test_bundled_model_zero_shot_on_banking_intents(bundled_model):
    labels = ["lost or stolen card", "exchange rate", "top up failed", "card arrival"]
    classifier = ZeroShotClassifier(bundled_model, labels)
    texts = [
        "Someone stole my card yesterday, please block it",
        "What rate do you use to convert euros to dollars?",
        "My attempt to add money to my account did not work",
        "When will my new card be delivered?",
    ]
    assert classifier.predict(texts) == labels
    assert classifier.predict_proba(texts).shape == (4, 4)


def test_zero_shot_equals_an_encoded_head_extended_by_names(tiny_model):
    from contrastive_bert.heads.encoded_label import attach_encoded_label_head
    from contrastive_bert.heads.label_embedding import add_labels_from_names, predict_proba

    template = "This text is about {}."
    attach_encoded_label_head(tiny_model, LABELS[:2], label_template=template)
    add_labels_from_names(tiny_model, LABELS[2:])  # a label the head never had, by its name alone
    classifier = ZeroShotClassifier(tiny_model, LABELS, template=template, scale=20.0)
    np.testing.assert_allclose(classifier.predict_proba(TEXTS), predict_proba(tiny_model, TEXTS), rtol=1e-4, atol=1e-5)


def test_general_block_summary_needs_every_run():
    from contrastive_bert.inference.general_ability import summarize_general

    block = lambda s, b: {"stsb": s, "zero_shot": {"banking77": b, "emotion": 40.0, "sst2": 70.0}, "zero_shot_mean": (b + 110) / 3}  # noqa: E731
    summary = summarize_general([block(82.0, 60.0), block(84.0, 62.0)])
    assert summary["stsb"]["mean"] == 83.0 and summary["stsb"]["std"] == pytest.approx(2 ** 0.5)
    assert summary["zero_shot_banking77"]["values"] == [60.0, 62.0] and summary["zero_shot_emotion"]["std"] == 0.0
    assert summary["zero_shot_mean"]["mean"] == pytest.approx(57.0)
    assert summarize_general([block(82.0, 60.0), None]) is None  # a run logged before the block: no partial mean
    assert summarize_general([]) is None

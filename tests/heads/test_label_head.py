"""LabelEmbeddingClassifier: shapes, init, save/reload as part of the SentenceTransformer, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from contrastive_bert.heads.label_embedding import (
    LabelEmbeddingClassifier,
    add_labels_from_names,
    attach_label_head,
    find_label_head,
    load_model_with_head,
    predict,
    predict_proba,
)

TEXTS = ["my card was declined", "how do I top up", "the transfer never arrived"]


def test_logits_are_scaled_cosines_and_embedding_untouched():
    torch.manual_seed(0)
    head = LabelEmbeddingClassifier(4, ["a", "b", "c"], scale=10.0)
    embeddings = torch.randn(5, 4)
    features = {"sentence_embedding": embeddings.clone()}
    out = head(features)
    expected = 10.0 * F.normalize(embeddings, dim=-1) @ F.normalize(head.weight, dim=-1).T
    assert out["logits"].shape == (5, 3)
    torch.testing.assert_close(out["logits"], expected)
    torch.testing.assert_close(out["sentence_embedding"], embeddings)
    # the plain linear form of the seed design
    linear = LabelEmbeddingClassifier(4, ["a", "b", "c"], normalize=False, init_weight=head.weight.detach())
    torch.testing.assert_close(linear.logits(embeddings), embeddings @ head.weight.detach().T)


def test_xavier_normal_init_statistics():
    torch.manual_seed(0)
    head = LabelEmbeddingClassifier(256, [f"l{i}" for i in range(200)])
    assert head.weight.shape == (200, 256)
    expected_std = math.sqrt(2.0 / (200 + 256))
    assert abs(head.weight.std().item() - expected_std) / expected_std < 0.05
    assert abs(head.weight.mean().item()) < 0.01


def test_save_reload_gives_identical_logits(tiny_model, tmp_path):
    head = attach_label_head(tiny_model, ["card", "top up", "transfer"])
    with torch.no_grad():
        head.weight.mul_(3.0)  # differs from any fresh init
    before = predict_proba(tiny_model, TEXTS)
    tiny_model.save(str(tmp_path / "m"))
    reloaded = load_model_with_head(str(tmp_path / "m"), device="cpu")
    reloaded_head = find_label_head(reloaded)
    assert reloaded_head is not None and reloaded_head.label_names == ["card", "top up", "transfer"]
    torch.testing.assert_close(reloaded_head.weight, head.weight)
    np.testing.assert_allclose(predict_proba(reloaded, TEXTS), before, rtol=1e-5, atol=1e-6)
    assert predict(reloaded, TEXTS) == predict(tiny_model, TEXTS)
    # the plain sentence-transformers loader also restores it with the flag ST >= 6 requires
    from sentence_transformers import SentenceTransformer

    plain = SentenceTransformer(str(tmp_path / "m"), trust_remote_code=True, device="cpu")
    np.testing.assert_allclose(predict_proba(plain, TEXTS), before, rtol=1e-5, atol=1e-6)
    # sentence embeddings are those of the model without the head
    np.testing.assert_allclose(reloaded.encode(TEXTS), tiny_model.encode(TEXTS), rtol=1e-5, atol=1e-6)


def test_attach_is_idempotent_and_checks_names(tiny_model):
    head = attach_label_head(tiny_model, ["a", "b"])
    assert attach_label_head(tiny_model, ["a", "b"]) is head
    assert len(tiny_model) == 3
    with pytest.raises(ValueError, match="label_names"):
        attach_label_head(tiny_model, ["a", "b", "c"])


def test_add_labels_from_names_appends_embedded_rows(tiny_model):
    head = attach_label_head(tiny_model, ["a", "b"])
    add_labels_from_names(tiny_model, ["refund"], template="This text is about {}.")
    assert head.label_names == ["a", "b", "refund"]
    expected = torch.as_tensor(tiny_model.encode(["This text is about refund."]))
    torch.testing.assert_close(head.weight[2:].detach(), expected, rtol=1e-5, atol=1e-6)
    assert predict_proba(tiny_model, TEXTS).shape == (3, 3)
    with pytest.raises(ValueError, match="already in the head"):
        add_labels_from_names(tiny_model, ["a"])


def test_bad_input_errors(tiny_model):
    with pytest.raises(ValueError, match="label_names: need at least 2"):
        LabelEmbeddingClassifier(4, ["only"])
    with pytest.raises(ValueError, match="label_names: duplicate"):
        LabelEmbeddingClassifier(4, ["a", "a"])
    with pytest.raises(ValueError, match="init_weight"):
        LabelEmbeddingClassifier(4, ["a", "b", "c"], init_weight=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="in_features"):
        LabelEmbeddingClassifier(0, ["a", "b"])
    with pytest.raises(ValueError, match="embeddings"):
        LabelEmbeddingClassifier(4, ["a", "b"]).logits(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="model: has no LabelEmbeddingClassifier"):
        predict(tiny_model, TEXTS)
    attach_label_head(tiny_model, ["a", "b"])
    with pytest.raises(ValueError, match="texts: is empty"):
        predict_proba(tiny_model, [])
    with pytest.raises(ValueError, match="texts"):
        predict(tiny_model, "a single string")


# ----------------------------------------------------------------------------- encoded label head


def test_encoded_head_adds_a_new_label_by_name_without_retraining(tiny_model):
    from contrastive_bert.heads.encoded_label import EncodedLabelClassifier, attach_encoded_label_head

    template = "This text is about {}."
    names = ["card", "top up"]
    expected = tiny_model.encode([template.format(n) for n in names], convert_to_tensor=True)
    head = attach_encoded_label_head(tiny_model, names, label_template=template)
    assert isinstance(head, EncodedLabelClassifier) and list(head.parameters()) == []
    assert torch.equal(head.weight, expected)
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    add_labels_from_names(tiny_model, ["refund"])  # the head's own template
    assert head.label_names == ["card", "top up", "refund"]
    assert torch.equal(head.weight[2:], tiny_model.encode([template.format("refund")], convert_to_tensor=True))
    assert all(torch.equal(p, before[n]) for n, p in tiny_model.named_parameters())
    assert list(head.parameters()) == []
    assert predict(tiny_model, [template.format("refund")]) == ["refund"]
    with pytest.raises(ValueError, match="template: the head encodes its labels through"):
        add_labels_from_names(tiny_model, ["fees"], template="{}")
    with pytest.raises(ValueError, match="label_template"):
        EncodedLabelClassifier(4, ["a", "b"], label_template="no slot")
    with pytest.raises(ValueError, match="not an EncodedLabelClassifier"):
        attach_encoded_label_head(tiny_model, ["x", "y"])


def test_encoded_head_saves_and_loads_with_the_model(tiny_model, tmp_path):
    from contrastive_bert.heads.encoded_label import EncodedLabelClassifier, attach_encoded_label_head

    head = attach_encoded_label_head(tiny_model, ["card", "top up", "transfer"], label_template="{} issue")
    before = predict_proba(tiny_model, TEXTS)
    tiny_model.save(str(tmp_path / "m"))
    reloaded = load_model_with_head(str(tmp_path / "m"), device="cpu")
    loaded = find_label_head(reloaded)
    assert isinstance(loaded, EncodedLabelClassifier) and loaded.label_template == "{} issue"
    assert torch.equal(loaded.weight, head.weight)
    np.testing.assert_allclose(predict_proba(reloaded, TEXTS), before, rtol=1e-5, atol=1e-6)
    loaded.weight.zero_()
    loaded.refresh(reloaded)  # re-encoding the names gives the same rows back
    torch.testing.assert_close(loaded.weight, head.weight, rtol=1e-5, atol=1e-6)

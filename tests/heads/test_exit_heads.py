"""Exit heads: shapes, masking, model integration, save/reload equality, errors."""

from __future__ import annotations

import json

import pytest
import torch

from contrastive_bert.heads.exits import (
    LinearExit,
    MHAExit,
    MultiExitHeads,
    add_exit_heads,
    check_exit_layers,
    copy_label_head,
    exit_outputs,
    get_exit_heads,
    load_multi_exit_model,
)
from contrastive_bert.heads.label_embedding import LabelEmbeddingClassifier

LABELS = ["pos", "neg", "neutral"]
TEXTS = ["the card never arrived", "how do I top up", "great service thanks", "my pin is blocked again today"]


@pytest.fixture(scope="module")
def _tiny4_session(tmp_path_factory):
    from conftest import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny4"), num_layers=4)


@pytest.fixture()
def tiny4(_tiny4_session):
    import copy

    return copy.deepcopy(_tiny4_session)


@pytest.mark.parametrize("head_type", ["linear", "mha"])
def test_exit_outputs_shapes(tiny4, head_type):
    heads = add_exit_heads(tiny4, LABELS, exit_layers=[1, 3], head_type=head_type)
    assert heads.exit_layers == [1, 3]  # intermediate layers only
    assert heads.head_layers == [1, 3, 4]  # the last layer always has the (linear) final exit
    assert isinstance(heads.final_exit, LinearExit)
    assert isinstance(heads.exit(1), MHAExit if head_type == "mha" else LinearExit)
    out = exit_outputs(tiny4, tiny4.preprocess(TEXTS))
    assert set(out["exit_logits"]) == {1, 3, 4}
    for layer in (1, 3, 4):
        assert out["exit_logits"][layer].shape == (4, 3)
        assert out["exit_embeddings"][layer].shape == (4, 32)
    # the final linear exit on the last layer is the model's own (mean-pooled) sentence embedding
    torch.testing.assert_close(out["exit_embeddings"][4], out["sentence_embedding"])
    # label embeddings are the classifier rows
    assert heads.label_embeddings(1).shape == (3, 32)


def test_plain_encode_unchanged_by_heads(tiny4):
    before = tiny4.encode(TEXTS, convert_to_tensor=True)
    add_exit_heads(tiny4, LABELS, head_type="mha")
    after = tiny4.encode(TEXTS, convert_to_tensor=True)
    torch.testing.assert_close(before, after)
    assert not tiny4[0].auto_model.config.output_hidden_states


def test_hidden_states_flag_restored_on_error(tiny4):
    add_exit_heads(tiny4, LABELS)
    with pytest.raises((KeyError, ValueError)):
        exit_outputs(tiny4, {"no_input_ids": torch.zeros(1)})
    assert not tiny4[0].auto_model.config.output_hidden_states


def test_mha_exit_ignores_padding():
    torch.manual_seed(0)
    head = MHAExit(8, LABELS, exit_dim=8, num_heads=2).eval()
    tokens = torch.randn(1, 3, 8)
    padded = torch.cat([tokens, torch.randn(1, 4, 8)], dim=1)
    emb_short, logits_short = head(tokens, torch.ones(1, 3, dtype=torch.long))
    emb_padded, logits_padded = head(padded, torch.tensor([[1, 1, 1, 0, 0, 0, 0]]))
    torch.testing.assert_close(emb_short, emb_padded)
    torch.testing.assert_close(logits_short, logits_padded)


def test_mha_exit_inference_path_equals_multihead_attention():
    """In eval mode the [CLS] attention is computed directly from nn.MultiheadAttention's weights
    (faster on small batches): same output as the module, padded rows included."""
    torch.manual_seed(0)
    head = MHAExit(16, LABELS, exit_dim=8, num_heads=2).eval()
    tokens = torch.randn(4, 6, 16)
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    projected = torch.tanh(head.project(tokens))
    with torch.no_grad():
        reference, _ = head.attention(projected[:, :1], projected, projected, key_padding_mask=mask == 0,
                                      need_weights=False)
        torch.testing.assert_close(head._cls_attention(projected, mask), reference, atol=1e-6, rtol=1e-5)
        head.train()  # dropout 0.1 only in training; with dropout off both paths agree end to end
        head.attention.dropout = 0.0
        train_embedding, _ = head(tokens, mask)
        head.eval()
        eval_embedding, _ = head(tokens, mask)
    torch.testing.assert_close(eval_embedding, train_embedding, atol=1e-6, rtol=1e-5)


def test_linear_exit_mean_pooling_by_hand():
    head = LinearExit(2, ["a", "b"], pooling="mean", normalize=False)
    tokens = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    embedding, _ = head(tokens, torch.tensor([[1, 1, 0]]))
    torch.testing.assert_close(embedding, torch.tensor([[2.0, 3.0]]))


def test_save_reload_equal_and_sentence_transformer_loading(tiny4, tmp_path):
    from sentence_transformers import SentenceTransformer

    add_exit_heads(tiny4, LABELS, exit_layers=[1, 2], head_type="mha")
    tiny4.eval()
    modules_before = list(tiny4._modules.items())
    expected = exit_outputs(tiny4, tiny4.preprocess(TEXTS))
    tiny4.save(str(tmp_path / "m"))  # the exit heads are a module in modules.json like any other
    assert list(tiny4._modules.items()) == modules_before
    modules = json.loads((tmp_path / "m" / "modules.json").read_text())
    assert modules[-1]["type"] == "contrastive_bert.heads.exits.MultiExitHeads"

    reloaded = load_multi_exit_model(tmp_path / "m", exit_layers=[1, 2])
    reloaded.eval()
    got = exit_outputs(reloaded, reloaded.preprocess(TEXTS))
    for layer in (1, 2, 4):
        torch.testing.assert_close(got["exit_logits"][layer], expected["exit_logits"][layer])
        torch.testing.assert_close(got["exit_embeddings"][layer], expected["exit_embeddings"][layer])
    # sentence-transformers itself loads it too (v6 imports non-ST module classes only when trusted):
    # same embeddings, the exit heads carried along
    plain = SentenceTransformer(str(tmp_path / "m"), device="cpu", local_files_only=True, trust_remote_code=True)
    assert isinstance(plain[-1], MultiExitHeads)
    torch.testing.assert_close(
        plain.encode(TEXTS, convert_to_tensor=True), tiny4.encode(TEXTS, convert_to_tensor=True)
    )


def test_exit_layer_out_of_range(tiny4):
    with pytest.raises(ValueError, match=r"exit_layers: expected a non-empty list of layer numbers >= 1"):
        add_exit_heads(tiny4, LABELS, exit_layers=[0, 2])
    with pytest.raises(ValueError, match=r"exit_layers: layers \[5\] are out of range; the encoder has 4 layers"):
        add_exit_heads(tiny4, LABELS, exit_layers=[5])
    with pytest.raises(ValueError, match="head_type"):
        add_exit_heads(tiny4, LABELS, head_type="conv")
    with pytest.raises(ValueError, match="exit_layers: a layer is listed twice"):
        MultiExitHeads(32, LABELS, num_layers=4, exit_layers=[2, 2])


def test_exit_layers_are_intermediate_layers_only(tiny4):
    """One convention: the last layer is never listed (its exit, the final classifier, is implicit)."""
    with pytest.raises(ValueError, match=r"exit_layers: layer 4 is the last layer, whose exit \(the final classifier\)"):
        add_exit_heads(tiny4, LABELS, exit_layers=[2, 4])
    heads = MultiExitHeads(32, LABELS, num_layers=4)  # default: every layer below the last
    assert heads.exit_layers == [1, 2, 3] and heads.head_layers == [1, 2, 3, 4]
    assert check_exit_layers([3, 1], 4) == [1, 3] and check_exit_layers(None, 4) is None
    assert check_exit_layers([7, 9]) == [7, 9]  # no depth: the form only
    with pytest.raises(ValueError, match=r"^loss_options\.exit_layers: expected a non-empty list"):
        check_exit_layers("2", name="loss_options.exit_layers")
    with pytest.raises(ValueError, match="expected a non-empty list"):
        check_exit_layers([])


def test_heads_saved_with_the_last_layer_listed_still_load(tiny4, tmp_path):
    """Models saved before the convention listed the last layer in exit_layers: they load as before."""
    add_exit_heads(tiny4, LABELS, exit_layers=[1, 3])
    tiny4.save(str(tmp_path / "m"))
    folder = next((tmp_path / "m").glob("*_MultiExitHeads"))
    config = json.loads((folder / "config.json").read_text())
    assert config["exit_layers"] == [1, 3]
    config["exit_layers"] = [1, 3, 4]  # the old spelling
    (folder / "config.json").write_text(json.dumps(config))
    heads = get_exit_heads(load_multi_exit_model(tmp_path / "m", exit_layers=[1, 3]))
    assert heads.exit_layers == [1, 3] and heads.head_layers == [1, 3, 4]


def test_head_count_mismatch_with_saved_model(tiny4, tmp_path):
    add_exit_heads(tiny4, LABELS, exit_layers=[1, 2, 3])
    tiny4.save(str(tmp_path / "m"))
    with pytest.raises(ValueError, match="exit_layers: expected exits on layers \\[1\\], the model has exits on layers \\[1, 2, 3\\]"):
        load_multi_exit_model(tmp_path / "m", exit_layers=[1])
    # weights that hold other heads than the config declares
    folder = next((tmp_path / "m").glob("*_MultiExitHeads"))
    config = json.loads((folder / "config.json").read_text())
    config["exit_layers"] = [1, 2]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="exit_layers: the saved weights hold heads on layers \\[1, 2, 3, 4\\]"):
        load_multi_exit_model(tmp_path / "m")
    # heads built for another depth than the encoder
    del tiny4[len(tiny4) - 1]
    tiny4.append(MultiExitHeads(32, LABELS, num_layers=6))
    with pytest.raises(ValueError, match="built for 6 layers"):
        get_exit_heads(tiny4)


def test_save_with_label_head(tiny4, tmp_path):
    from contrastive_bert.heads.label_embedding import find_label_head

    tiny4.append(LabelEmbeddingClassifier(32, LABELS))
    add_exit_heads(tiny4, LABELS, exit_layers=[2], head_type="mha")
    tiny4.eval()
    expected = exit_outputs(tiny4, tiny4.preprocess(TEXTS))
    tiny4.save(str(tmp_path / "m"))
    reloaded = load_multi_exit_model(tmp_path / "m").eval()
    got = exit_outputs(reloaded, reloaded.preprocess(TEXTS))
    torch.testing.assert_close(got["logits"], expected["logits"])
    torch.testing.assert_close(got["exit_logits"][2], expected["exit_logits"][2])
    assert find_label_head(reloaded).label_names == LABELS


def test_final_exit_copies_trained_label_head(tiny4):
    torch.manual_seed(1)
    head = LabelEmbeddingClassifier(32, LABELS, scale=10.0)
    tiny4.append(head)
    heads = add_exit_heads(tiny4, LABELS, exit_layers=[1])
    assert heads.scale == 10.0
    out = exit_outputs(tiny4, tiny4.preprocess(TEXTS))
    torch.testing.assert_close(out["exit_logits"][4], out["logits"])
    other = LabelEmbeddingClassifier(32, ["x", "y", "z"])
    with pytest.raises(ValueError, match="label_head"):
        copy_label_head(heads, other)


def test_a_folder_without_exit_heads_is_refused_before_any_weight_loads(tiny4, tmp_path, monkeypatch):
    import contrastive_bert.models as models

    tiny4.save(str(tmp_path / "plain"))
    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("weights loaded before the check"))
    with pytest.raises(ValueError, match=r"^path: the model in .*plain has no exit heads; train them with a cross_layer stage"):
        load_multi_exit_model(tmp_path / "plain")
    with pytest.raises(ValueError, match=r"^path: expected the folder of a multi-exit model, got 'default' \(not a folder\)"):
        load_multi_exit_model("default")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"^path: .*empty is not a saved sentence-transformers model \(no modules.json\)$"):
        load_multi_exit_model(tmp_path / "empty")

"""The layer-by-layer encoder reproduces each BERT-family model's own hidden states, with padding."""

from __future__ import annotations

import pytest
import torch

from contrastive_bert.encoder import LayerwiseEncoder


def _tiny(arch: str):
    from transformers import (
        BertConfig, BertModel, DistilBertConfig, DistilBertModel, MPNetConfig, MPNetModel, RobertaConfig, RobertaModel,
    )

    torch.manual_seed(0)
    common = {"vocab_size": 50, "max_position_embeddings": 40}
    if arch == "distilbert":
        return DistilBertModel(DistilBertConfig(dim=16, n_layers=3, n_heads=2, hidden_dim=32, **common))
    sizes = {"hidden_size": 16, "num_hidden_layers": 3, "num_attention_heads": 2, "intermediate_size": 32, **common}
    if arch == "bert":
        return BertModel(BertConfig(**sizes))
    if arch == "roberta":
        return RobertaModel(RobertaConfig(pad_token_id=1, **sizes))
    return MPNetModel(MPNetConfig(pad_token_id=1, **sizes))


@pytest.mark.parametrize("arch", ["bert", "roberta", "distilbert", "mpnet"])
def test_all_hidden_states_equal_hf(arch):
    model = _tiny(arch).eval()
    input_ids = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 9, 10, 2, 1, 1]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    encoder = LayerwiseEncoder(model)
    assert encoder.num_layers == 3 and encoder.hidden_size == 16
    with torch.no_grad():
        ours = encoder.all_hidden_states(input_ids, mask)
        hf = model(input_ids=input_ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert len(ours) == len(hf) == 4
    for a, b in zip(ours, hf):
        torch.testing.assert_close(a * mask[..., None], b * mask[..., None], atol=1e-5, rtol=1e-5)
    # one row alone, trimmed to its length, gives the same states as inside the padded batch
    with torch.no_grad():
        alone = encoder.all_hidden_states(input_ids[1:, :4], mask[1:, :4])
    torch.testing.assert_close(alone[-1][0], ours[-1][1, :4], atol=1e-5, rtol=1e-5)


def test_from_sentence_transformer_and_errors(tiny_model):
    encoder = LayerwiseEncoder.from_model(tiny_model)
    assert encoder.num_layers == 2 and encoder.auto_model is tiny_model[0].auto_model
    with pytest.raises(ValueError, match="index"):
        encoder.layer(3, torch.zeros(1, 2, 32), torch.ones(1, 2))
    with pytest.raises(ValueError, match="auto_model"):
        LayerwiseEncoder(torch.nn.Linear(2, 2))

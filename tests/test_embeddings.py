"""encode_normalized's memo: inside ``reuse_encodings`` the same texts, model, kind and batch size
are encoded once (and handed out as copies); training with corpus negatives encodes the corpus once
for mining and the before-scores."""

from __future__ import annotations

import json

import torch

from contrastive_bert.cli import main
from contrastive_bert.embeddings import encode_normalized, reuse_encodings

from conftest import make_beir_folder


class Counting:
    """Wraps a SentenceTransformer and records each encode call's kind and number of texts."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def _counted(self, kind):
        def encode(texts, **options):
            self.calls.append((kind, len(texts)))
            return getattr(self.model, "encode" if kind == "text" else f"encode_{kind}")(texts, **options)
        return encode

    def __getattr__(self, name):
        if name in ("encode", "encode_query", "encode_document"):
            return self._counted("text" if name == "encode" else name.removeprefix("encode_"))
        return getattr(self.model, name)


def test_inside_the_block_each_encoding_happens_once(tiny_model):
    model = Counting(tiny_model)
    texts = ["a cat", "a dog", "a cat"]
    with reuse_encodings():
        first = encode_normalized(model, texts, kind="document")
        again = encode_normalized(model, texts, kind="document")
        assert model.calls == [("document", 3)] and torch.equal(first, again)
        again.zero_()  # a copy: the memo's tensor is untouched
        assert torch.equal(encode_normalized(model, texts, kind="document"), first)
        encode_normalized(model, texts, kind="query")  # another kind
        encode_normalized(model, texts, kind="document", batch_size=2)  # another batching
        encode_normalized(model, texts[:2], kind="document")  # other texts
        encode_normalized(model, texts, kind="document", unique=True)
        assert len(model.calls) == 5
    encode_normalized(model, texts, kind="document")  # outside: encoded again
    assert len(model.calls) == 6
    # encode and encode_document agree for a model without prompts (mining used encode before)
    assert torch.allclose(encode_normalized(tiny_model, texts), first, atol=1e-6)


def test_training_with_corpus_negatives_encodes_the_corpus_once_before_training(tmp_path, tiny_loader, monkeypatch):
    """Mining (train queries against the corpus) and the before-score (test queries against the
    same corpus) share one corpus encoding; the after-score encodes it again (the model changed)."""
    import sentence_transformers

    corpus_calls = []
    original = sentence_transformers.SentenceTransformer.encode_document

    def encode_document(self, texts, **options):
        corpus_calls.append(len(texts))
        return original(self, texts, **options)

    monkeypatch.setattr(sentence_transformers.SentenceTransformer, "encode_document", encode_document)
    folder = make_beir_folder(tmp_path / "my_corpus")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--datasets", str(folder), "--model", "tiny", "--loss", "mnrl", "--batch-size", "2",
                 "--max-steps", "1", "--save-steps", "1", "--dev-task", "", "--corpus-negatives",
                 json.dumps({"num_negatives": 1, "fallback": "pairs", "range_max": 8, "perc_pos": None})]) == 0
    assert corpus_calls.count(8) == 2  # before training once (mining + before-score), after training once

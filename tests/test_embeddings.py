"""One corpus encoding shared explicitly: mining and the before-scores of a training run read the
same corpus embeddings (kept in the run's folder by model weights and corpus) instead of a hidden
memo; the scorer reads back a store the same model wrote and re-encodes for another model."""

from __future__ import annotations

import copy
import json

import torch

from contrastive_bert.cli import main
from contrastive_bert.data import load_dataset
from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.embeddings import encode_normalized
from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits

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


def test_the_scorer_reads_back_what_the_same_model_encoded(tiny_model, tmp_path):
    """Given a folder, the scorer encodes the corpus once and reads it back on the next call with the
    same model (same scores); a model with other weights encodes it again, never reading another's rows."""
    data = RetrievalData.from_splits(load_dataset(make_beir_folder(tmp_path / "beir")))
    model = Counting(tiny_model)
    kept = evaluate_retrieval_splits(model, data, ["test"], embeddings_dir=tmp_path / "embeddings")
    again = evaluate_retrieval_splits(model, data, ["test", "train"], embeddings_dir=tmp_path / "embeddings")
    assert [kind for kind, _ in model.calls].count("document") == 1 and again["test"] == kept["test"]
    assert evaluate_retrieval_splits(tiny_model, data, ["test"]) == kept  # in memory: the same scores
    other = copy.deepcopy(tiny_model)
    with torch.no_grad():
        next(other.parameters()).add_(1.0)
    counted = Counting(other)
    evaluate_retrieval_splits(counted, data, ["test"], embeddings_dir=tmp_path / "embeddings")
    assert [kind for kind, _ in counted.calls].count("document") == 1
    # encode and encode_document agree for a model without prompts (mining used encode before)
    texts = ["a cat", "a dog"]
    assert torch.allclose(encode_normalized(tiny_model, texts), encode_normalized(tiny_model, texts, kind="document"), atol=1e-6)


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
    assert main(["train", "--datasets", str(folder), "--model", "tiny", "--loss", "mnrl", "--batch-size", "1",
                 "--max-steps", "1", "--save-steps", "1", "--dev-task", "", "--corpus-negatives",
                 json.dumps({"num_negatives": 1, "fallback": "pairs", "range_max": 8, "perc_pos": None})]) == 0
    assert corpus_calls.count(8) == 2  # before training once (mining + before-score), after training once
    assert not (tmp_path / "output" / "my_corpus-mnrl" / "mined" / "embeddings").exists()  # removed once both read it

"""CorpusIndex: search ranks documents exactly as the retrieval scorer measured them, FAISS agrees
with the exact search, a saved index loads back only with its own model and corpus."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from contrastive_bert.data import load_dataset
from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.evaluation.beir_evaluation import evaluate_retrieval_splits
from contrastive_bert.evaluation.retrieval_metrics import retrieval_scores
from contrastive_bert.inference import CorpusIndex, SearchHit
from contrastive_bert.inference.corpus_index import PROBE_TEXT, corpus_fingerprint

from conftest import make_beir_folder


class TableModel:
    """A model whose embeddings are given: text -> vector (queries and documents alike); unknown
    texts (the probe) map to ``probe``."""

    def __init__(self, vectors: dict[str, list[float]], probe: list[float]):
        self.vectors, self.probe = vectors, probe

    def encode(self, texts, batch_size=32, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False):
        rows = torch.tensor([self.vectors.get(text, self.probe) for text in texts], dtype=torch.float32)
        return torch.nn.functional.normalize(rows, dim=1) if normalize_embeddings else rows

    encode_query = encode_document = encode


DOCS = {"a": "north", "b": "east", "c": "north-east", "d": "also north"}
VECTORS = {"north": [0.0, 1.0], "east": [1.0, 0.0], "north-east": [1.0, 1.0], "also north": [0.0, 2.0],
           "go north": [0.0, 1.0], "go east a bit": [3.0, 1.0]}


def test_hits_by_hand():
    """Cosines computed by hand; equal scores keep corpus order (a before d)."""
    index = CorpusIndex.build(TableModel(VECTORS, [1.0, -1.0]), DOCS)
    north, east = index.search(["go north", "go east a bit"], top_k=3)
    assert [(h.id, h.rank) for h in north] == [("a", 1), ("d", 2), ("c", 3)]
    assert [h.score for h in north] == pytest.approx([1.0, 1.0, 1 / math.sqrt(2)])
    assert [h.id for h in east] == ["b", "c", "a"]
    assert [h.score for h in east] == pytest.approx([3 / math.sqrt(10), 4 / math.sqrt(20), 1 / math.sqrt(10)])
    assert index.search("go north", top_k=10)[0][-1] == SearchHit("b", pytest.approx(0.0, abs=1e-7), 4)  # k clamped to N


def test_a_list_of_texts_gets_positional_ids():
    index = CorpusIndex.build(TableModel(VECTORS, [1.0, -1.0]), ["east", "north"])
    assert index.ids == ["0", "1"] and index.search("go north", top_k=1)[0][0].id == "1"


def test_search_ranks_as_the_scorer_measured(tiny_model, tmp_path):
    """nDCG@10 and the rest from the index's hits equal the retrieval scorer's on the same model."""
    data = RetrievalData.from_splits(load_dataset(make_beir_folder(tmp_path / "beir")))
    index = CorpusIndex.build(tiny_model, data)
    for split in ("train", "test"):
        qrels = data.split(split)
        query_ids = sorted(qrels)
        hits = index.search([data.queries[q] for q in query_ids], top_k=1000)
        run = {q: {h.id: h.score for h in found} for q, found in zip(query_ids, hits)}
        ours = retrieval_scores({q: qrels[q] for q in query_ids}, run)
        scored = evaluate_retrieval_splits(tiny_model, data, splits=[split])[split]
        assert {name: scored[name] for name in ours} == pytest.approx(ours, abs=1e-9)


def test_faiss_flat_equals_exact_and_hnsw_finds_the_best(tiny_model):
    pytest.importorskip("faiss")
    documents = [f"document number {i} about {topic}" for i in range(40) for topic in ("cats", "stars", "rivers")]
    queries = ["cats", "the stars at night", "a river", "document 7"]
    exact = CorpusIndex.build(tiny_model, documents)
    flat = CorpusIndex(tiny_model, exact.ids, exact.texts, exact.embeddings, backend="faiss")
    hnsw = CorpusIndex(tiny_model, exact.ids, exact.texts, exact.embeddings, backend="faiss", index_type="hnsw")
    for ours, theirs in zip(exact.search(queries, top_k=10), flat.search(queries, top_k=10)):
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=1e-5)
        # ids agree wherever the score is not tied with a neighbour
        distinct = [i for i, h in enumerate(ours) if all(abs(h.score - o.score) > 1e-5 for o in ours if o is not h)]
        assert [ours[i].id for i in distinct] == [theirs[i].id for i in distinct]
    assert [found[0].score for found in hnsw.search(queries, top_k=5)] == pytest.approx(
        [found[0].score for found in exact.search(queries, top_k=5)], abs=1e-5)


def test_save_and_load_round_trip(tiny_model, tmp_path):
    index = CorpusIndex.build(tiny_model, DOCS)
    folder = index.save(tmp_path / "index", model_name="tiny")
    loaded = CorpusIndex.load(folder, copy.deepcopy(tiny_model))
    assert loaded.ids == index.ids and loaded.texts == index.texts and loaded.fingerprint == corpus_fingerprint(index.ids, index.texts)
    assert torch.equal(loaded.embeddings, index.embeddings)
    assert loaded.search(["north", "east"], top_k=4) == index.search(["north", "east"], top_k=4)
    assert CorpusIndex.read_meta(folder)["model"] == "tiny"
    with pytest.raises(ValueError, match="already exists; pass overwrite"):
        index.save(folder)
    index.save(folder, overwrite=True)


def test_load_takes_the_corpus_the_caller_holds_instead_of_a_second_copy(tiny_model, tmp_path):
    """``documents``: the caller's texts are the index's (the same objects: a million texts held once),
    the folder's copy is not read, and another corpus is refused."""
    folder = CorpusIndex.build(tiny_model, DOCS).save(tmp_path / "index")
    (folder / "documents.jsonl").write_text("not read\n")
    held = {doc_id: "".join(text) for doc_id, text in DOCS.items()}
    loaded = CorpusIndex.load(folder, copy.deepcopy(tiny_model), documents=held)
    assert loaded.ids == list(DOCS) and all(a is b for a, b in zip(loaded.texts, held.values()))
    changed = {**held, next(iter(held)): "another text"}
    for other in (changed, {"one": "document"}):  # other texts; another size, refused before its rows are read
        with pytest.raises(ValueError, match="documents: not the corpus indexed at"):
            CorpusIndex.load(folder, copy.deepcopy(tiny_model), documents=other)


def test_another_model_is_refused(tiny_model, tmp_path):
    folder = CorpusIndex.build(tiny_model, DOCS).save(tmp_path / "index")
    other = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))
    with pytest.raises(ValueError, match="model: the index at .* was built by another model"):
        CorpusIndex.load(folder, other)
    with pytest.raises(ValueError, match="built by another model"):  # another dimension
        CorpusIndex.load(folder, TableModel({PROBE_TEXT: [1.0, 0.0]}, [1.0, 0.0]))


def test_damaged_or_missing_index(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="not a saved CorpusIndex .*index.json"):
        CorpusIndex.load(tmp_path, tiny_model)
    folder = CorpusIndex.build(tiny_model, DOCS).save(tmp_path / "index")
    documents = folder / "documents.jsonl"
    documents.write_text(documents.read_text().replace("north", "south"))
    with pytest.raises(ValueError, match="damaged"):
        CorpusIndex.load(folder, tiny_model)


def test_bad_input():
    model = TableModel(VECTORS, [1.0, -1.0])
    with pytest.raises(ValueError, match="corpus: is empty"):
        CorpusIndex.build(model, {})
    with pytest.raises(ValueError, match="corpus: expected"):
        CorpusIndex.build(model, "one string")
    with pytest.raises(ValueError, match="corpus: document 'x' is not a string"):
        CorpusIndex.build(model, {"x": 3})
    with pytest.raises(ValueError, match="backend: expected 'exact' or 'faiss'"):
        CorpusIndex.build(model, DOCS, backend="annoy")
    with pytest.raises(ValueError, match="index_type: 'hnsw' needs backend='faiss'"):
        CorpusIndex.build(model, DOCS, index_type="hnsw")
    with pytest.raises(ValueError, match="batch_size"):
        CorpusIndex.build(model, DOCS, batch_size=0)
    index = CorpusIndex.build(model, DOCS)
    with pytest.raises(ValueError, match="top_k: expected a positive int"):
        index.search("go north", top_k=0)
    with pytest.raises(ValueError, match="queries"):
        index.search([])


def _one_adamw_step(model, learning_rate: float = 1e-5) -> None:
    """One AdamW step at a fine-tuning learning rate on a batch of two texts."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    features = getattr(model, "preprocess", model.tokenize)(["north by north-east", "east"])
    model(features)["sentence_embedding"].pow(2).sum().backward()
    optimizer.step()
    model.eval()


def test_a_model_one_small_step_or_one_weight_away_is_refused(tiny_model, tmp_path):
    """The probe alone let a model trained a few steps pass as the index's own; the weights' SHA-256
    refuses any change, and the refusal says how to rebuild (--overwrite). The same model loads."""
    from contrastive_bert.inference.corpus_index import SAME_MODEL_COSINE

    folder = CorpusIndex.build(tiny_model, DOCS).save(tmp_path / "index")
    assert CorpusIndex.load(folder, copy.deepcopy(tiny_model)).ids == list(DOCS)
    stepped = copy.deepcopy(tiny_model)
    _one_adamw_step(stepped)
    nudged = copy.deepcopy(tiny_model)
    with torch.no_grad():
        next(nudged.parameters()).view(-1)[0] += 1e-6
    for changed in (stepped, nudged):
        probe = CorpusIndex._encode_probe(changed)
        assert float(probe @ CorpusIndex._encode_probe(tiny_model)) > SAME_MODEL_COSINE  # the probe cannot tell
        with pytest.raises(ValueError, match=r"built by another model .*Rebuild it with this model: pass --overwrite"):
            CorpusIndex.load(folder, changed)


def test_an_index_without_the_weights_fingerprint_is_refused(tiny_model, tmp_path):
    import json

    folder = CorpusIndex.build(tiny_model, DOCS).save(tmp_path / "index")
    meta = json.loads((folder / "index.json").read_text())
    del meta["model_weights"]  # as an earlier version saved it
    (folder / "index.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="records no fingerprint of the weights .*--overwrite"):
        CorpusIndex.load(folder, copy.deepcopy(tiny_model))


def test_an_index_folder_is_a_store_and_a_first_version_index_still_loads(tiny_model, tmp_path):
    """A built-into folder holds the embeddings as a store (manifest with the weights and the corpus
    fingerprint), memory-mapped at load; an index saved before the store (no manifest) still loads."""
    import json

    from contrastive_bert.embedding_store import read_manifest

    folder = tmp_path / "index"
    built = CorpusIndex.build(tiny_model, DOCS, folder=folder, model_name="tiny")
    manifest = read_manifest(folder)
    assert manifest["rows_done"] == 4 and manifest["corpus"] == built.fingerprint and built.encoded_rows == 4
    loaded = CorpusIndex.load(folder, copy.deepcopy(tiny_model))
    assert torch.equal(loaded.embeddings, built.embeddings) and loaded.search("north", top_k=2) == built.search("north", top_k=2)
    (folder / "manifest.json").unlink()
    meta = json.loads((folder / "index.json").read_text())
    (folder / "index.json").write_text(json.dumps({**meta, "format_version": 1}))
    assert CorpusIndex.load(folder, copy.deepcopy(tiny_model)).ids == list(DOCS)

"""Corpus embeddings streamed to disk: an encoding killed mid-way resumes at its first missing chunk,
never encodes a finished chunk again, and ends equal to an uninterrupted run bit for bit; a store of
another model or corpus is refused (or replaced, for a cache); a finished store is read back."""

from __future__ import annotations

import copy
import json
import sys

import numpy as np
import pytest
import torch

import contrastive_bert.embedding_store as embedding_store
from contrastive_bert.embedding_store import ARRAY_FILE, MANIFEST_FILE, encode_corpus, read_manifest, store_folder
from contrastive_bert.embeddings import encode_normalized

IDS = [f"d{i}" for i in range(40)]
TEXTS = [f"document {i} about {topic}" + " and more" * (i % 5)
         for i, topic in zip(range(40), ["cats", "stars", "rivers", "trees"] * 10)]


def _recording(model, fail_on: int | None = None):
    """``model`` whose ``encode_document`` records each call's texts and raises KeyboardInterrupt on call ``fail_on``."""
    calls = []
    original = model.encode_document

    def encode_document(texts, **options):
        calls.append(list(texts))
        if len(calls) == fail_on:
            raise KeyboardInterrupt
        return original(texts, **options)

    model.encode_document = encode_document
    return model, calls


def test_a_killed_encoding_resumes_at_the_first_missing_chunk(tiny_model, tmp_path):
    whole = encode_corpus(tiny_model, IDS, TEXTS, folder=tmp_path / "whole", batch_size=4, chunk_rows=8)
    killed, calls = _recording(copy.deepcopy(tiny_model), fail_on=3)
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(killed, IDS, TEXTS, folder=tmp_path / "store", batch_size=4, chunk_rows=8)
    assert len(calls) == 3 and read_manifest(tmp_path / "store")["rows_done"] == 16  # two chunks kept
    resumed_model, resumed_calls = _recording(copy.deepcopy(tiny_model))
    resumed = encode_corpus(resumed_model, IDS, TEXTS, folder=tmp_path / "store", batch_size=4, chunk_rows=8)
    assert resumed_calls == [TEXTS[16:24], TEXTS[24:32], TEXTS[32:40]]  # the finished chunks were not encoded again
    assert resumed.encoded_rows == 24 and np.array_equal(resumed.embeddings, whole.embeddings)  # bit for bit
    manifest = read_manifest(tmp_path / "store")
    assert manifest["rows_done"] == 40 and manifest["dim"] == 32 and manifest["dtype"] == "float32"
    assert manifest["corpus"] == whole.fingerprint and manifest["model_weights"] == whole.model_weights


def test_a_finished_store_is_read_back_without_encoding(tiny_model, tmp_path):
    first = encode_corpus(tiny_model, IDS, TEXTS, folder=tmp_path / "store", chunk_rows=16)
    model, calls = _recording(copy.deepcopy(tiny_model))
    again = encode_corpus(model, IDS, TEXTS, folder=tmp_path / "store", chunk_rows=16)
    assert calls == [] and again.encoded_rows == 0 and np.array_equal(again.embeddings, first.embeddings)
    again.tensor().zero_()  # copy-on-write: the file keeps its rows
    assert np.array_equal(np.load(tmp_path / "store" / ARRAY_FILE), first.embeddings)


def test_one_chunk_equals_one_encode_call_and_memory_equals_disk(tiny_model, tmp_path):
    one_call = encode_normalized(tiny_model, TEXTS, kind="document", batch_size=8).numpy()
    assert np.array_equal(encode_corpus(tiny_model, IDS, TEXTS, batch_size=8).embeddings, one_call)
    in_memory = encode_corpus(tiny_model, IDS, TEXTS, batch_size=8, chunk_rows=12)
    on_disk = encode_corpus(tiny_model, IDS, TEXTS, batch_size=8, chunk_rows=12, folder=tmp_path / "store")
    assert in_memory.folder is None and np.array_equal(in_memory.embeddings, on_disk.embeddings)
    assert np.allclose(in_memory.embeddings, one_call, atol=1e-5)  # other batches: float rounding at most


def test_another_model_or_corpus_is_refused_or_replaced(tiny_model, tmp_path):
    folder = tmp_path / "store"
    encode_corpus(tiny_model, IDS, TEXTS, folder=folder)
    other = copy.deepcopy(tiny_model)
    with torch.no_grad():
        next(other.parameters()).view(-1)[0] += 1e-3
    with pytest.raises(ValueError, match=r"folder: .* another model .*--overwrite"):
        encode_corpus(other, IDS, TEXTS, folder=folder)
    with pytest.raises(ValueError, match=r"another corpus \(40 documents\).*--overwrite"):
        encode_corpus(tiny_model, IDS[:5], TEXTS[:5], folder=folder)
    model, calls = _recording(other)
    replaced = encode_corpus(model, IDS, TEXTS, folder=folder, if_other="replace")
    assert len(calls) == 1 and replaced.encoded_rows == 40 and read_manifest(folder)["model_weights"] == replaced.model_weights


def test_other_settings_restart_an_unfinished_store(tiny_model, tmp_path):
    killed, _ = _recording(copy.deepcopy(tiny_model), fail_on=2)
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(killed, IDS, TEXTS, folder=tmp_path / "store", batch_size=4, chunk_rows=8)
    model, calls = _recording(copy.deepcopy(tiny_model))
    restarted = encode_corpus(model, IDS, TEXTS, folder=tmp_path / "store", batch_size=2, chunk_rows=8)
    assert calls[0] == TEXTS[:8] and restarted.encoded_rows == 40


def test_damaged_manifest_or_bad_arguments(tiny_model, tmp_path):
    folder = tmp_path / "store"
    encode_corpus(tiny_model, IDS, TEXTS, folder=folder)
    (folder / MANIFEST_FILE).write_text("{not json")
    assert read_manifest(folder) is None and encode_corpus(tiny_model, IDS, TEXTS, folder=folder).encoded_rows == 40
    assert json.loads((folder / MANIFEST_FILE).read_text())["rows_done"] == 40
    with pytest.raises(ValueError, match="ids: expected one id per text"):
        encode_corpus(tiny_model, IDS[:3], TEXTS)
    with pytest.raises(ValueError, match="chunk_rows"):
        encode_corpus(tiny_model, IDS, TEXTS, chunk_rows=0)
    with pytest.raises(ValueError, match="if_other"):
        encode_corpus(tiny_model, IDS, TEXTS, if_other="keep")
    assert store_folder(tmp_path, "0123456789abcdef0123").name == "corpus-0123456789abcdef"


def test_freed_memory_goes_back_to_the_system_after_each_chunk(tiny_model, tmp_path, monkeypatch):
    assert embedding_store.release_freed_memory() is sys.platform.startswith("linux")  # glibc here: trimmed
    after = []
    monkeypatch.setattr(embedding_store, "release_freed_memory", lambda: after.append(len(after)))
    encode_corpus(tiny_model, IDS, TEXTS, batch_size=8, chunk_rows=12, folder=tmp_path / "store")
    assert len(after) == len(range(0, len(IDS), 12))  # once per chunk

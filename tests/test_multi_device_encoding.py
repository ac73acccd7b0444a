"""A corpus encoded by sentence-transformers' multi-process pool (two CPU processes here, one per GPU
on a machine with several) equals a one-process encoding up to float rounding, resumes after an
interruption at its first missing chunk, and never leaves a worker process behind."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

import contrastive_bert.embedding_store as embedding_store
from contrastive_bert.embedding_store import check_devices, encode_corpus, read_manifest

IDS = [f"d{i}" for i in range(24)]
TEXTS = [f"document {i} about {topic}" + " and more" * (i % 4)
         for i, topic in zip(range(24), ["cats", "stars", "rivers", "trees"] * 6)]


def test_two_processes_equal_one_and_an_interrupted_store_resumes(tiny_model, tmp_path, monkeypatch):
    # the model the worker processes unpickle was built from files under a tmp folder (conftest)
    one_process = encode_corpus(tiny_model, IDS, TEXTS, batch_size=4, chunk_rows=8)
    calls = []
    encode = embedding_store.encode_normalized

    def interrupted(model, texts, **options):  # the third chunk is interrupted, as by Ctrl-C
        calls.append((list(texts), options.get("pool") is not None))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return encode(model, texts, **options)

    monkeypatch.setattr(embedding_store, "encode_normalized", interrupted)
    with pytest.raises(KeyboardInterrupt):
        encode_corpus(tiny_model, IDS, TEXTS, folder=tmp_path / "store", batch_size=4, chunk_rows=8, devices=["cpu", "cpu"])
    assert multiprocessing.active_children() == []  # the pool was stopped
    assert all(pooled for _, pooled in calls) and read_manifest(tmp_path / "store")["rows_done"] == 16
    calls.clear()

    resumed = encode_corpus(tiny_model, IDS, TEXTS, folder=tmp_path / "store", batch_size=4, chunk_rows=8,
                            devices=["cpu", "cpu"])
    assert multiprocessing.active_children() == []
    assert calls == [(TEXTS[16:24], True)]  # only the missing chunk, through the pool
    assert resumed.encoded_rows == 8 and read_manifest(tmp_path / "store")["rows_done"] == 24
    assert np.allclose(resumed.embeddings, one_process.embeddings, atol=1e-5)
    assert np.allclose(np.linalg.norm(resumed.embeddings, axis=1), 1.0, atol=1e-5)
    assert str(tiny_model.device) == "cpu"  # back where it was
    # a finished store is read back without starting a pool
    again = encode_corpus(tiny_model, IDS, TEXTS, folder=tmp_path / "store", batch_size=4, chunk_rows=8,
                          devices=["cpu", "cpu"])
    assert again.encoded_rows == 0 and np.array_equal(again.embeddings, resumed.embeddings)


def test_one_device_encodes_in_this_process(tiny_model):
    one_process = encode_corpus(tiny_model, IDS, TEXTS, batch_size=4)
    assert np.array_equal(encode_corpus(tiny_model, IDS, TEXTS, batch_size=4, devices=["cpu"]).embeddings,
                          one_process.embeddings)
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("devices, message", [
    ("cpu,cpu", "expected a non-empty list"),
    ([], "expected a non-empty list"),
    (["cpu", ""], "expected a non-empty list"),
    (["cpu", "gpu:0"], "'gpu:0' is not a torch device"),
    (["cuda:0", "cuda:1"], "no CUDA device|2 CUDA device|cuda:1"),
])
def test_bad_devices_are_refused_before_encoding(tiny_model, devices, message):
    if devices == ["cuda:0", "cuda:1"]:
        import torch

        if torch.cuda.device_count() >= 2:
            pytest.skip("this machine has two GPUs")
    with pytest.raises(ValueError, match=f"devices: .*({message})"):
        encode_corpus(tiny_model, IDS, TEXTS, devices=devices)
    assert check_devices(None) is None and check_devices(("cpu", "cpu")) == ["cpu", "cpu"]


def test_several_devices_need_a_model_with_a_pool():
    with pytest.raises(ValueError, match="devices: 2 devices need a SentenceTransformer"):
        encode_corpus(lambda texts: None, IDS, TEXTS, devices=["cpu", "cpu"])

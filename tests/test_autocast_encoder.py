"""``load_model(backend="torch-bf16")``: the same fp32 model, encoding under bf16 autocast. Its
rows are exactly those of an encode under ``torch.autocast``, close to fp32's but not equal, come
back as float32, reach the multi-process pool, and carry their own store identity."""

from __future__ import annotations

import copy
import multiprocessing

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from contrastive_bert import models
from contrastive_bert.autocast_encoder import BF16_ENCODING_IDENTITY, Bf16AutocastSentenceTransformer, encode_in_bf16
from contrastive_bert.embedding_store import encode_corpus, weights_fingerprint

TEXTS = ["the cat sat on the mat", "x", "quantum chromodynamics of gluons and quarks at high energies " * 4,
         "hello world", "a b c", "padding makes every row of a batch as long as its longest one"]
IDS = [f"d{i}" for i in range(len(TEXTS))]


@pytest.fixture(scope="module")
def saved_tiny(_tiny_model_session, tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("tiny_bf16") / "model"
    _tiny_model_session.save(str(folder))
    return str(folder)


def test_bf16_rows_are_autocast_rows_close_to_fp32(saved_tiny):
    fp32 = models.load_model(saved_tiny, device="cpu")
    bf16 = models.load_model(saved_tiny, device="cpu", backend="torch-bf16")
    assert type(bf16) is Bf16AutocastSentenceTransformer and bf16.encoding_identity == BF16_ENCODING_IDENTITY
    assert all(p.dtype == torch.float32 for p in bf16.parameters())  # the weights are not cast
    for method in ("encode", "encode_query", "encode_document"):
        got = getattr(bf16, method)(TEXTS, batch_size=4, normalize_embeddings=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            expected = getattr(fp32, method)(TEXTS, batch_size=4, normalize_embeddings=True)
        reference = getattr(fp32, method)(TEXTS, batch_size=4, normalize_embeddings=True)
        assert got.dtype == np.float32 and got.shape == (len(TEXTS), 32)
        np.testing.assert_array_equal(got, expected, err_msg=method)
        assert np.abs(got - reference).max() > 1e-6, method  # really in bf16 (the tiny BERT's residual stream, in fp32, dominates)
        assert ((got * reference).sum(1) > 0.99).all(), method
    features = bf16(bf16.preprocess(TEXTS[:2]))
    assert features["sentence_embedding"].dtype == features["token_embeddings"].dtype == torch.float32


def test_the_store_identity_names_the_precision(saved_tiny, tmp_path):
    fp32 = models.load_model(saved_tiny, device="cpu")
    bf16 = models.load_model(saved_tiny, device="cpu", backend="torch-bf16")
    assert weights_fingerprint(bf16) != weights_fingerprint(fp32)
    assert weights_fingerprint(models.load_model(saved_tiny, backend="torch-bf16")) == weights_fingerprint(bf16)
    stored = encode_corpus(bf16, IDS, TEXTS, folder=tmp_path / "store", batch_size=4)
    assert stored.encoded_rows == len(TEXTS)
    assert encode_corpus(bf16, IDS, TEXTS, folder=tmp_path / "store", batch_size=4).encoded_rows == 0
    with pytest.raises(ValueError, match="another model"):
        encode_corpus(fp32, IDS, TEXTS, folder=tmp_path / "store", batch_size=4)


def test_two_processes_encode_in_bf16_too(saved_tiny):
    """Batches of one text, so no padding differs between the pool's batches and this process's."""
    bf16 = models.load_model(saved_tiny, device="cpu", backend="torch-bf16")
    one = encode_corpus(bf16, IDS, TEXTS, batch_size=1)
    two = encode_corpus(bf16, IDS, TEXTS, batch_size=1, chunk_rows=3, devices=["cpu", "cpu"])
    assert multiprocessing.active_children() == []
    fp32 = encode_corpus(models.load_model(saved_tiny, device="cpu"), IDS, TEXTS, batch_size=1)
    gap = np.abs(one.embeddings - fp32.embeddings).max()
    assert gap > 1e-6 and np.abs(two.embeddings - one.embeddings).max() < gap / 100  # the workers ran the bf16 forward


def test_only_a_plain_sentence_transformer_is_wrapped(_tiny_model_session):
    model = copy.deepcopy(_tiny_model_session)
    assert encode_in_bf16(model) is model and encode_in_bf16(model) is model  # in place, once
    assert isinstance(model, SentenceTransformer)

    class Custom(SentenceTransformer):
        pass

    with pytest.raises(ValueError, match="model: bf16 encoding wraps a SentenceTransformer, got Custom"):
        encode_in_bf16(Custom(modules=list(copy.deepcopy(_tiny_model_session)), device="cpu"))
    with pytest.raises(ValueError, match="got function"):
        encode_in_bf16(lambda texts: None)


def test_backend_names(saved_tiny):
    assert models.check_backend("torch-bf16") == "torch-bf16"
    with pytest.raises(ValueError, match=r"backend: expected one of torch, torch-bf16, onnx, onnx-int8, got 'fp8'"):
        models.load_model(saved_tiny, backend="fp8")
    with pytest.raises(ValueError, match="onnx_threads: options of the onnx backends"):
        models.load_model(saved_tiny, backend="torch-bf16", onnx_threads=1)

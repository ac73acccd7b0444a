"""The ONNX backend: a tiny BERT's transformer exported to ONNX Runtime gives torch's embeddings
(fp32) or nearly (dynamic int8), is exported once per set of weights, and never passes for
another backend's rows."""

from __future__ import annotations

import copy
import importlib.util

import numpy as np
import pytest
import torch
from bench_modules import load_bench
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Dense, Normalize

from contrastive_bert import models
from contrastive_bert.embedding_store import encode_corpus, weights_fingerprint
from contrastive_bert.onnx_encoder import OnnxSentenceEncoder, default_cache_dir

TEXTS = ["the cat sat on the mat", "x", "quantum chromodynamics of gluons and quarks at high energies " * 4,
         "hello world", "a b c", "padding makes every row of a batch as long as its longest one"]


@pytest.fixture(scope="module")
def prompted_model(_tiny_model_session):
    """The tiny BERT with query / document prompts left out of its mean pooling, and a Normalize
    module (Transformer -> Pooling -> Normalize)."""
    tiny = copy.deepcopy(_tiny_model_session)
    tiny[1].include_prompt = False
    return SentenceTransformer(modules=[tiny[0], tiny[1], Normalize()], device="cpu",
                               prompts={"query": "query: ", "document": "passage: "})


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx_cache")


@pytest.mark.parametrize("which", ["plain", "prompted"])
def test_fp32_equals_torch_for_texts_queries_and_documents(which, _tiny_model_session, prompted_model, cache):
    model = _tiny_model_session if which == "plain" else prompted_model
    encoder = OnnxSentenceEncoder(model, cache_dir=cache)
    for method in ("encode", "encode_query", "encode_document"):
        for normalize in (False, True):
            expected = getattr(model, method)(TEXTS, batch_size=4, normalize_embeddings=normalize)
            got = getattr(encoder, method)(TEXTS, batch_size=4, normalize_embeddings=normalize)
            assert got.shape == expected.shape == (len(TEXTS), 32)
            np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=f"{which} {method}")
    if which == "prompted":  # the prompts reached the tokenizer (left out of the pooling, they still change the context)
        assert np.abs(encoder.encode_query(TEXTS) - encoder.encode_document(TEXTS)).max() > 1e-4
    single = encoder.encode("hello world", convert_to_tensor=True)
    assert isinstance(single, torch.Tensor) and single.shape == (32,)
    np.testing.assert_allclose(single.numpy(), model.encode("hello world"), atol=1e-5)
    assert encoder.get_embedding_dimension() == encoder.get_sentence_embedding_dimension() == 32
    assert encoder.max_seq_length == model.max_seq_length and encoder.device == torch.device("cpu")


def test_int8_keeps_every_row_close(_tiny_model_session, cache):
    encoder = OnnxSentenceEncoder(_tiny_model_session, precision="int8", cache_dir=cache)
    expected = _tiny_model_session.encode_document(TEXTS, normalize_embeddings=True)
    got = encoder.encode_document(TEXTS, normalize_embeddings=True)
    cosine = (got * expected).sum(axis=1)
    assert (cosine > 0.99).all(), cosine
    assert encoder.path.name == "model-int8-matmul-per-channel.onnx" and encoder.backend == "onnx-int8"


def test_the_session_plans_no_memory_per_input_shape(_tiny_model_session, cache):
    """Length-sorted batches bring a new input shape nearly every batch: a memory pattern kept per
    shape grew onnx-int8's peak from 2.6 GB to 5.3 GB over 1,000 -> 50,000 documents."""
    encoder = OnnxSentenceEncoder(_tiny_model_session, precision="int8", cache_dir=cache, threads=1)
    options = encoder._session.get_session_options()
    assert options.enable_mem_pattern is False and options.enable_cpu_mem_arena is True
    assert options.intra_op_num_threads == 1
    first = encoder.encode_document(TEXTS[:1], normalize_embeddings=True)
    encoder.encode_document(TEXTS, normalize_embeddings=True)  # other shapes in between
    assert np.allclose(encoder.encode_document(TEXTS[:1], normalize_embeddings=True), first)


def test_the_export_is_cached_per_set_of_weights(_tiny_model_session, tmp_path, monkeypatch):
    first = OnnxSentenceEncoder(_tiny_model_session, precision="int8", cache_dir=tmp_path)
    assert first.exported and first.folder.parent == tmp_path
    assert first.source_weights == weights_fingerprint(_tiny_model_session)  # the same hash as the stores'
    stamps = {path.name: path.stat().st_mtime_ns for path in first.folder.iterdir()}

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(torch.onnx, "export", no_export)
    import onnxruntime.quantization

    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", no_export)
    again = OnnxSentenceEncoder(_tiny_model_session, precision="int8", cache_dir=tmp_path)
    assert not again.exported
    assert {path.name: path.stat().st_mtime_ns for path in again.folder.iterdir()} == stamps
    np.testing.assert_array_equal(again.encode(TEXTS), first.encode(TEXTS))
    other = copy.deepcopy(_tiny_model_session)
    with torch.no_grad():
        next(other.parameters()).add_(0.01)
    with pytest.raises(AssertionError, match="exported again"):  # other weights: another export
        OnnxSentenceEncoder(other, cache_dir=tmp_path)


def test_default_cache_follows_xdg_and_not_the_model_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "contrastive_bert" / "onnx"


def test_identity_differs_between_backends_and_a_store_is_not_read_across(_tiny_model_session, cache, tmp_path):
    fp32 = OnnxSentenceEncoder(_tiny_model_session, cache_dir=cache)
    int8 = OnnxSentenceEncoder(_tiny_model_session, precision="int8", cache_dir=cache)
    per_tensor = OnnxSentenceEncoder(_tiny_model_session, precision="int8", cache_dir=cache, per_channel=False,
                                     op_types=None)
    fingerprints = [weights_fingerprint(m) for m in (_tiny_model_session, fp32, int8, per_tensor)]
    assert len(set(fingerprints)) == 4
    assert weights_fingerprint(OnnxSentenceEncoder(_tiny_model_session, cache_dir=cache)) == fingerprints[1]
    ids = [str(i) for i in range(len(TEXTS))]
    stored = encode_corpus(int8, ids, TEXTS, folder=tmp_path / "store")
    assert stored.encoded_rows == len(TEXTS)
    assert encode_corpus(int8, ids, TEXTS, folder=tmp_path / "store").encoded_rows == 0  # read back
    with pytest.raises(ValueError, match="another model"):
        encode_corpus(_tiny_model_session, ids, TEXTS, folder=tmp_path / "store")


def test_load_model_backends(_tiny_model_session, tmp_path):
    folder = tmp_path / "model"
    _tiny_model_session.save(str(folder))
    encoder = models.load_model(str(folder), backend="onnx", onnx_cache_dir=tmp_path / "cache", onnx_threads=1)
    assert isinstance(encoder, OnnxSentenceEncoder) and encoder.backend == "onnx" and encoder.threads == 1
    np.testing.assert_allclose(encoder.encode_document(TEXTS), _tiny_model_session.encode_document(TEXTS), atol=1e-5)
    assert encoder._transformer.auto_model.device.type == "meta"  # the torch weights are not held twice
    assert not any(p.suffix == ".onnx" for p in folder.rglob("*"))  # nothing written into the model's folder
    int8 = models.load_model(str(folder), backend="onnx-int8", onnx_cache_dir=tmp_path / "cache")
    assert int8.backend == "onnx-int8" and int8.path.name == "model-int8-matmul-per-channel.onnx"
    cosine = (int8.encode(TEXTS, normalize_embeddings=True) * encoder.encode(TEXTS, normalize_embeddings=True)).sum(1)
    assert (cosine > 0.99).all()
    with pytest.raises(ValueError, match=r"backend: expected one of torch, torch-bf16, onnx, onnx-int8, got 'tpu'"):
        models.load_model(str(folder), backend="tpu")
    with pytest.raises(ValueError, match="onnx_threads: options of the onnx backends"):
        models.load_model(str(folder), onnx_threads=2)
    with pytest.raises(ValueError, match="device: the onnx backend runs on the CPU only"):
        models.load_model(str(folder), device="meta", backend="onnx")


def test_missing_onnxruntime_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    with pytest.raises(ValueError, match=r'onnxruntime, not installed; pip install "contrastive_bert\[onnx\]"'):
        models.check_backend("onnx-int8")
    assert models.check_backend("torch") == "torch"


def test_bench_scale_sees_the_onnx_backends():
    bench = load_bench("bench_scale")
    assert set(bench.BACKENDS) == set(models.BACKENDS)
    assert all(bench.backend_problem(backend) is None for backend in models.BACKENDS)


def test_a_stack_it_cannot_reproduce_is_refused(_tiny_model_session, cache):
    tiny = copy.deepcopy(_tiny_model_session)
    with_dense = SentenceTransformer(modules=[tiny[0], tiny[1], Dense(32, 8)], device="cpu")
    with pytest.raises(ValueError, match="module 2 is Dense"):
        OnnxSentenceEncoder(with_dense, cache_dir=cache)
    with pytest.raises(ValueError, match="precision: expected 'fp32' or 'int8'"):
        OnnxSentenceEncoder(tiny, precision="int4", cache_dir=cache)
    encoder = OnnxSentenceEncoder(tiny, cache_dir=cache)
    with pytest.raises(ValueError, match="output_value"):
        encoder.encode(TEXTS, output_value="token_embeddings")
    with pytest.raises(ValueError, match="batch_size"):
        encoder.encode(TEXTS, batch_size=0)

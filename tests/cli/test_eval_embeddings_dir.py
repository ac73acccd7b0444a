"""``eval --embeddings-dir DIR`` keeps a retrieval corpus's embeddings: a second run with the same
model encodes nothing and scores the same, another model's are replaced; ``--devices`` encodes the
corpus on several processes (two CPU ones here) through eval, mine and search; bad ``--devices``,
``--embeddings-dir`` for no retrieval task, and either with ``--mteb`` are refused before any model loads."""

from __future__ import annotations

import copy
import json
import re

import pytest
import torch

import contrastive_bert.embedding_store as embedding_store
import contrastive_bert.models
from contrastive_bert.cli import main
from contrastive_bert.embedding_store import read_manifest

from conftest import make_beir_folder


@pytest.fixture()
def corpus_encodings(monkeypatch):
    """Each corpus chunk encoded through the store: ``(texts, encoded by a multi-process pool)``."""
    calls = []
    encode = embedding_store.encode_normalized

    def recording(model, texts, **options):
        calls.append((list(texts), options.get("pool") is not None))
        return encode(model, texts, **options)

    monkeypatch.setattr(embedding_store, "encode_normalized", recording)
    return calls


def _score(path, task) -> float:
    return json.loads(path.read_text())[task]["main_score"]


def test_a_second_eval_reads_the_embeddings_back_and_scores_the_same(tmp_path, tiny_loader, corpus_encodings, capsys):
    task = str(make_beir_folder(tmp_path / "beir"))
    store = tmp_path / "embeddings"
    argv = ["eval", "--model", "tiny", "--tasks", task, "--embeddings-dir", str(store)]
    assert main([*argv, "--devices", "cpu,cpu", "--output", str(tmp_path / "first.json")]) == 0
    assert f"corpus embeddings kept in {store}" in capsys.readouterr().out
    assert [pooled for _, pooled in corpus_encodings] == [True] and len(corpus_encodings[0][0]) == 8  # one chunk, 2 processes
    (folder,) = store.iterdir()
    assert folder.name.startswith("corpus-") and read_manifest(folder)["rows_done"] == 8
    corpus_encodings.clear()
    assert main([*argv, "--output", str(tmp_path / "second.json")]) == 0
    assert corpus_encodings == []  # nothing encoded again
    assert _score(tmp_path / "second.json", task) == _score(tmp_path / "first.json", task)
    assert main(["eval", "--model", "tiny", "--tasks", task, "--output", str(tmp_path / "memory.json")]) == 0
    assert _score(tmp_path / "memory.json", task) == pytest.approx(_score(tmp_path / "first.json", task), abs=1e-6)
    assert list(store.iterdir()) == [folder]  # an eval without the flag keeps nothing


def test_another_model_replaces_the_kept_embeddings(tmp_path, _tiny_model_session, monkeypatch, corpus_encodings):
    task = str(make_beir_folder(tmp_path / "beir"))
    models = [copy.deepcopy(_tiny_model_session), copy.deepcopy(_tiny_model_session)]
    with torch.no_grad():
        next(models[1].parameters()).view(-1)[0] += 1e-2
    monkeypatch.setattr(contrastive_bert.models, "load_model", lambda *a, **k: models.pop(0))
    monkeypatch.setattr(contrastive_bert.models, "check_hub_model", lambda name: None)
    argv = ["eval", "--model", "tiny", "--tasks", task, "--embeddings-dir", str(tmp_path / "embeddings")]
    assert main(argv) == 0 and main(argv) == 0
    assert len(corpus_encodings) == 2  # the second model's embeddings replaced the first's
    (folder,) = (tmp_path / "embeddings").iterdir()
    assert read_manifest(folder)["model_weights"] != embedding_store.weights_fingerprint(_tiny_model_session)


def test_mine_and_search_pass_devices_to_the_corpus_encoding(tmp_path, tiny_loader, monkeypatch, capsys):
    import contrastive_bert.corpus_mining
    import contrastive_bert.inference.corpus_index

    given = []

    def encode_corpus(*args, devices=None, **kwargs):  # records the devices, encodes in this process
        given.append(devices)
        return embedding_store.encode_corpus(*args, **kwargs)

    for module in (contrastive_bert.corpus_mining, contrastive_bert.inference.corpus_index):
        monkeypatch.setattr(module, "encode_corpus", encode_corpus)
    folder = make_beir_folder(tmp_path / "beir")
    assert main(["mine", "--model", "tiny", "--dataset", str(folder), "--output", str(tmp_path / "mined.jsonl"),
                 "--num-negatives", "1", "--relative-margin", "0", "--devices", "cpu,cpu"]) == 0
    assert main(["search", "--model", "tiny", "--corpus", str(folder), "--query", "cats", "--devices", "cpu,cpu",
                 "--device", "cpu"]) == 0
    assert given == [["cpu", "cpu"], ["cpu", "cpu"]]


@pytest.mark.parametrize("argv, message", [
    (["--devices", "cpu,,cpu"], "--devices: expected a comma list of torch devices .*an empty entry"),
    (["--devices", "cuda:x"], "--devices: expected a comma list .*'cuda:x'"),
    (["--devices", "cpu,cpu", "--device", "cuda:1"], "--devices: cpu,cpu does not include --device cuda:1"),
    (["--devices", "gpu0,cpu"], "--devices: 'gpu0' is not a torch device"),
    (["--embeddings-dir", "x", "--tasks", "stsb"], "--embeddings-dir: for retrieval tasks .* none of --tasks stsb"),
    (["--devices", "cpu,cpu", "--tasks", "stsb"], "--devices: for retrieval tasks"),
    (["--embeddings-dir", "x", "--mteb"], "--embeddings-dir: not with --mteb"),
])
def test_bad_encoding_flags_fail_before_a_model_loads(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.setattr(contrastive_bert.models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    task = str(make_beir_folder(tmp_path / "beir"))
    command = ["eval", "--model", "default", "--tasks", task, *argv]
    assert main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("contrastive-bert eval: error: ")
    assert re.search(message, err), err
    for name in ("mine", "search"):  # the same words from the other commands that encode a corpus
        if "--devices" in argv and "--tasks" not in argv and "--embeddings-dir" not in argv:
            extra = (["--dataset", task, "--output", str(tmp_path / "out.jsonl")] if name == "mine"
                     else ["--corpus", task, "--query", "cats"])
            assert main([name, "--model", "default", *extra, *argv]) == 2
            assert re.search(message, capsys.readouterr().err), name

"""``--model-backend torch|onnx|onnx-int8`` on ``eval``, ``search`` and ``mine`` (``torch-bf16``:
test_bf16_backend.py): the tiny BERT saved to a folder and loaded for real through each backend (the ONNX export cached in a temporary
``$XDG_CACHE_HOME``), scores and mined rows equal to torch's under fp32, an index of one backend
refused by another, and bad combinations refused in one line before any model loads."""

from __future__ import annotations

import importlib.util
import json

import pytest

import contrastive_bert.models
from contrastive_bert.cli import main
from contrastive_bert.inference import CorpusIndex

from conftest import make_beir_folder, one_line_error, run_ok, search_hits

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def saved_tiny(_tiny_model_session, tmp_path_factory) -> str:
    """The tiny BERT as a model folder, loaded by the real ``load_model``."""
    folder = tmp_path_factory.mktemp("tiny_saved") / "model"
    _tiny_model_session.save(str(folder))
    return str(folder)


@pytest.fixture(scope="module")
def _onnx_home(tmp_path_factory):
    return tmp_path_factory.mktemp("xdg_cache")


@pytest.fixture()
def onnx_cache(_onnx_home, monkeypatch):
    """The ONNX exports go to a temporary cache (shared by this module's tests), never ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(_onnx_home))
    return _onnx_home / "contrastive_bert" / "onnx"


def test_eval_through_onnx_scores_as_torch(tmp_path, saved_tiny, onnx_cache, capsys):
    folder = make_beir_folder(tmp_path / "beir")
    scores = {}
    for backend in ("torch", "onnx", "onnx-int8"):
        output = tmp_path / f"{backend}.json"
        run_ok(capsys, ["eval", "--model", saved_tiny, "--tasks", str(folder), "--split", "train", "--model-backend", backend,
                      "--output", str(output), "-q"])
        scores[backend] = json.loads(output.read_text())[str(folder)]
    assert sorted(path.name for path in onnx_cache.glob("*/*.onnx")) == ["model-int8-matmul-per-channel.onnx", "model.onnx"]
    metrics = [name for name, value in scores["torch"].items() if isinstance(value, float)]
    assert "main_score" in metrics and len(metrics) > 3
    for name in metrics:  # fp32 ONNX: torch's embeddings within float rounding, so torch's scores
        assert scores["onnx"][name] == pytest.approx(scores["torch"][name], abs=1e-4), name
    assert 0 <= scores["onnx-int8"]["main_score"] <= 100


def test_search_through_onnx_int8_and_an_index_kept_per_backend(tmp_path, saved_tiny, onnx_cache, capsys):
    folder = make_beir_folder(tmp_path / "beir")
    argv = ["search", "--model", saved_tiny, "--corpus", str(folder), "--query", "cats", "--query", "stars", "--top-k", "3"]
    hits = search_hits(run_ok(capsys, [*argv, "--model-backend", "onnx-int8", "--device", "cpu"]))
    assert len(hits) == 2 and all(len(found) == 3 for found in hits)

    index = tmp_path / "index"
    torch_hits = search_hits(run_ok(capsys, [*argv, "--index", str(index)]))  # built by torch
    torch_weights = CorpusIndex.read_meta(index)["model_weights"]
    err = one_line_error(capsys, [*argv, "--index", str(index), "--model-backend", "onnx-int8"])
    assert f"--index: {index} was built by --model {saved_tiny} with --model-backend torch" in err
    assert "search it with --model-backend torch" in err and "pass --overwrite to rebuild it with --model-backend onnx-int8" in err
    assert CorpusIndex.read_meta(index)["model_weights"] == torch_weights  # refused, not touched

    run_ok(capsys, [*argv, "--index", str(index), "--model-backend", "onnx-int8", "--overwrite"])
    meta = CorpusIndex.read_meta(index)
    assert meta["model_weights"] != torch_weights  # the store's identity names the backend
    assert meta["model"] == f"{saved_tiny} (--model-backend onnx-int8)"
    out = run_ok(capsys, [*argv, "--index", str(index), "--model-backend", "onnx-int8"])
    assert f"loaded the index of 8 documents from {index}" in out and search_hits(out) == hits
    err = one_line_error(capsys, [*argv, "--index", str(index)])  # and the torch model refuses the int8 rows
    assert "with --model-backend onnx-int8; this search runs --model-backend torch" in err
    assert search_hits(run_ok(capsys, [*argv, "--model-backend", "onnx"])) == torch_hits


def _pairs_file(path):
    topics = ["cats purr", "dogs bark", "fish swim", "birds fly", "trees grow", "rivers flow"]
    path.write_text("".join(json.dumps({"anchor": f"what do {t.split()[0]} do?", "positive": t}) + "\n" for t in topics))
    return path


@pytest.mark.parametrize("dataset", ["pairs", "beir"])
def test_mine_through_onnx_mines_torchs_rows(tmp_path, saved_tiny, onnx_cache, capsys, dataset):
    """A pair file (sentence-transformers' mine_hard_negatives, which scores with the model's
    similarity functions) and a retrieval folder (this package's corpus mining)."""
    source = _pairs_file(tmp_path / "pairs.jsonl") if dataset == "pairs" else make_beir_folder(tmp_path / "beir")
    rows = {}
    for backend in ("torch", "onnx"):
        output = tmp_path / f"{backend}.jsonl"
        run_ok(capsys, ["mine", "--dataset", str(source), "--model", saved_tiny, "--output", str(output), "--num-negatives", "1",
                      "--relative-margin", "0", "--model-backend", backend, "-q"])
        rows[backend] = [json.loads(line) for line in output.read_text().splitlines()]
    assert rows["torch"] and rows["onnx"] == rows["torch"]


@pytest.mark.parametrize("extra, message", [
    (["eval", "--model-backend", "onnx", "--devices", "cpu,cpu"],
     "--model-backend: onnx encodes on the CPU in one process; drop --devices cpu,cpu"),
    (["search", "--model-backend", "onnx-int8", "--device", "cuda"],
     "--model-backend: onnx-int8 runs on the CPU only; drop --device cuda"),
    (["mine", "--model-backend", "onnx", "--device", "cuda:1"], "--model-backend: onnx runs on the CPU only; drop --device cuda:1"),
    (["mine", "--model-backend", "onnx-int8", "--devices", "cpu,cpu"], "--model-backend: onnx-int8 encodes on the CPU in one process"),
    (["eval", "--model-backend", "onnx-int8", "--mteb"], "--model-backend: onnx-int8 not with --mteb"),
    (["eval", "--model-backend", "tensorrt"], "--model-backend: invalid choice: 'tensorrt'"),
])
def test_bad_combinations_are_refused_before_any_model_loads(tmp_path, monkeypatch, capsys, extra, message):
    monkeypatch.setattr(contrastive_bert.models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    folder = make_beir_folder(tmp_path / "beir")
    command, *flags = extra
    argv = {"eval": ["eval", "--model", "m", "--tasks", str(folder)],
            "search": ["search", "--model", "m", "--corpus", str(folder), "--query", "cats"],
            "mine": ["mine", "--model", "m", "--dataset", str(folder), "--output", str(tmp_path / "mined.jsonl")]}[command]
    assert message in one_line_error(capsys, [*argv, *flags])


def test_a_missing_onnxruntime_is_named_with_the_extra_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(contrastive_bert.models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None if name == "onnxruntime" else real(name, *a, **k))
    err = one_line_error(capsys, ["search", "--model", "m", "--corpus", str(make_beir_folder(tmp_path / "beir")),
                                   "--query", "cats", "--model-backend", "onnx"])
    assert '--model-backend: the ONNX backends need onnxruntime, not installed; pip install "contrastive_bert[onnx]"' in err


def test_the_two_backend_flags_of_search_say_which_is_which(capsys):
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--backend {exact,faiss} what searches the encoded corpus (not what encodes it: --model-backend)" in text
    assert "--model-backend {torch,torch-bf16,onnx,onnx-int8} what runs the model that encodes the texts (not the search over them)" in text
    assert "dynamic int8 quantisation" in text and "~/.cache/contrastive_bert/onnx" in text

"""``--model-backend torch-bf16`` on ``eval`` and ``search``: the tiny BERT saved to a folder and
encoded under bf16 autocast; its index is kept apart from fp32's, scores stay within bf16 rounding
of fp32's, and a CPU without bf16 instructions gets one warning line."""

from __future__ import annotations

import argparse
import json
import logging

import pytest

import contrastive_bert.training.checks as checks
from contrastive_bert.cli.arguments import check_model_backend
from contrastive_bert.inference import CorpusIndex

from conftest import make_beir_folder, one_line_error, run_ok, search_hits


@pytest.fixture(scope="module")
def saved_tiny(_tiny_model_session, tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("tiny_saved") / "model"
    _tiny_model_session.save(str(folder))
    return str(folder)


def test_eval_in_bf16_scores_as_fp32_within_rounding(tmp_path, saved_tiny, capsys):
    folder = make_beir_folder(tmp_path / "beir")
    scores = {}
    for backend in ("torch", "torch-bf16"):
        output = tmp_path / f"{backend}.json"
        run_ok(capsys, ["eval", "--model", saved_tiny, "--tasks", str(folder), "--split", "train", "--model-backend", backend,
                      "--output", str(output), "-q"])
        scores[backend] = json.loads(output.read_text())[str(folder)]
    assert scores["torch-bf16"]["main_score"] == pytest.approx(scores["torch"]["main_score"], abs=1.0)
    assert "--model-backend: torch-bf16 not with --mteb" in one_line_error(
        capsys, ["eval", "--model", saved_tiny, "--tasks", "stsb", "--model-backend", "torch-bf16", "--mteb"])


def test_a_bf16_index_is_kept_apart_from_fp32s(tmp_path, saved_tiny, capsys):
    folder = make_beir_folder(tmp_path / "beir")
    index = tmp_path / "index"
    argv = ["search", "--model", saved_tiny, "--corpus", str(folder), "--query", "cats", "--query", "stars", "--top-k", "3",
            "--index", str(index)]
    torch_hits = search_hits(run_ok(capsys, argv))
    torch_weights = CorpusIndex.read_meta(index)["model_weights"]
    err = one_line_error(capsys, [*argv, "--model-backend", "torch-bf16"])
    assert f"was built by --model {saved_tiny} with --model-backend torch; this search runs --model-backend torch-bf16" in err
    run_ok(capsys, [*argv, "--model-backend", "torch-bf16", "--overwrite"])
    meta = CorpusIndex.read_meta(index)
    assert meta["model"] == f"{saved_tiny} (--model-backend torch-bf16)" and meta["model_weights"] != torch_weights
    out = run_ok(capsys, [*argv, "--model-backend", "torch-bf16"])
    assert "loaded the index of 8 documents" in out and [set(h) for h in search_hits(out)] == [set(h) for h in torch_hits]
    assert "with --model-backend torch-bf16; this search runs --model-backend torch" in one_line_error(capsys, argv)


@pytest.mark.parametrize("supports_bf16, device, devices, warned", [
    (False, None, None, True), (False, "cpu", None, True), (False, None, "cpu,cpu", True),
    (False, "cuda:0", None, False), (False, None, "cuda:0,cuda:1", False), (True, None, None, False),
])
def test_one_warning_where_bf16_would_run_emulated(monkeypatch, caplog, supports_bf16, device, devices, warned):
    monkeypatch.setattr(checks, "cpu_supports_bf16", lambda: supports_bf16)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    args = argparse.Namespace(model_backend="torch-bf16", device=device, devices=devices)
    with caplog.at_level(logging.WARNING, logger="contrastive_bert.cli.arguments"):
        assert check_model_backend(args) == "torch-bf16"  # any device, several devices: accepted
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert lines == (["--model-backend: torch-bf16 on this CPU, which has no bf16 instructions (avx512_bf16 or amx_bf16): "
                      "bf16 runs emulated and is likely slower than --model-backend torch"] if warned else [])

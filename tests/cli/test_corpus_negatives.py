"""``train --corpus-negatives``: a retrieval set trains on (query, relevant document, hard
negative) rows mined from its own corpus by the model about to be trained, re-mined by the model
being trained with ``refresh_every_epochs`` (ANCE); bad settings are one line before anything loads."""

from __future__ import annotations

import json

import pytest

from contrastive_bert.cli import main

from conftest import make_beir_folder


def _train(folder, run, *extra: str) -> int:
    return main(["train", "--datasets", str(folder), "--model", "tiny", "--loss", "mnrl", "--batch-size", "1",
                 "--max-eval-samples", "0", "--dev-task", "", "--output-dir", str(run), "--logging-steps", "1",
                 "--save-steps", "100", *extra])


def test_mined_rows_and_their_refresh_are_recorded(tmp_path, tiny_loader, capsys):
    folder = make_beir_folder(tmp_path / "my_corpus")
    run = tmp_path / "run"
    assert _train(folder, run, "--epochs", "2",
                  "--corpus-negatives", '{"num_negatives": 1, "perc_pos": null, "refresh_every_epochs": 1}') == 0
    results = json.loads((run / "results.json").read_text())
    mining = results["corpus_negatives"]["mining"][str(folder)]
    assert mining["pairs"] == 6 and mining["kept"] == 6 and results["train_rows"] == 6  # every train pair got a negative
    assert [r["epoch"] for r in results["corpus_negatives"]["refreshes"][0]] == [2]  # mined again before epoch 2
    assert results["global_step"] == 12  # 6 rows at batch 1 (a toy corpus: larger batches repeat a text), two epochs
    assert json.loads((run / "recipe.json").read_text())["corpus_negatives"] == {
        "num_negatives": 1, "perc_pos": None, "refresh_every_epochs": 1}


def test_a_retrieval_set_derives_one_mined_negative_and_none_switches_it_off(tmp_path, tiny_loader, capsys):
    folder = make_beir_folder(tmp_path / "my_corpus")
    assert _train(folder, tmp_path / "mined", "--max-steps", "1") == 0
    recorded = json.loads((tmp_path / "mined" / "recipe.json").read_text())
    assert recorded["corpus_negatives"] == {"num_negatives": 1, "fallback": "pairs"}  # the derived default
    results = json.loads((tmp_path / "mined" / "results.json").read_text())
    assert results["corpus_negatives"]["mining"][str(folder)]["kept"] == 6
    assert _train(folder, tmp_path / "pairs", "--max-steps", "1", "--corpus-negatives", "none") == 0
    results = json.loads((tmp_path / "pairs" / "results.json").read_text())
    assert "corpus_negatives" not in results and results["train_rows"] == 6
    assert json.loads((tmp_path / "pairs" / "recipe.json").read_text())["corpus_negatives"] is None


def test_too_few_mined_pairs_fall_back_to_the_plain_pairs(tmp_path, tiny_loader, capsys):
    """perc_pos 0.01 drops every candidate: with fallback the run trains on the pairs and says so;
    without it the run stops with the miner's reason."""
    folder = make_beir_folder(tmp_path / "my_corpus")
    assert _train(folder, tmp_path / "a", "--max-steps", "1",
                  "--corpus-negatives", '{"perc_pos": 0.01, "fallback": "pairs"}') == 0
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    assert results["corpus_negatives"]["mining"][str(folder)]["fell_back_to_pairs"] and results["train_rows"] == 6
    assert "training on the plain pairs instead" in capsys.readouterr().err
    assert _train(folder, tmp_path / "b", "--max-steps", "1", "--corpus-negatives", '{"perc_pos": 0.01}') == 2
    assert "no pair kept enough negatives" in capsys.readouterr().err


@pytest.mark.parametrize("value, message", [
    ('{"num_negative": 1}', "corpus_negatives.num_negative: unknown key"),
    ('{"num_negatives": 0}', "corpus_negatives.num_negatives: expected a positive integer"),
    ('{"perc_pos": 1.5}', "corpus_negatives.perc_pos: expected a number in (0, 1]"),
    ('{"sampling": "hardest"}', "corpus_negatives.sampling: expected 'top' or 'random'"),
    ('{"fallback": "skip"}', "corpus_negatives.fallback: expected 'pairs' or null"),
    ('[1]', "--corpus-negatives: expected a JSON object"),
])
def test_bad_settings_are_one_line(tmp_path, value, message, capsys):
    folder = make_beir_folder(tmp_path / "my_corpus")
    assert _train(folder, tmp_path / "run", "--corpus-negatives", value) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_only_retrieval_sets_and_pair_losses(tmp_path, shared_data, capsys):
    assert main(["train", "--datasets", "stsb", "--data-dir", str(shared_data), "--corpus-negatives", "{}",
                 "--output-dir", str(tmp_path / "a")]) == 2
    assert "corpus_negatives: mines a retrieval set's own corpus; ['stsb'] are not retrieval data sets" in capsys.readouterr().err
    folder = make_beir_folder(tmp_path / "my_corpus")
    assert main(["train", "--datasets", str(folder), "--loss", "cosent", "--corpus-negatives", "{}",
                 "--output-dir", str(tmp_path / "b")]) == 2
    assert "corpus_negatives: for losses that train on (anchor, positive[, negatives]) rows" in capsys.readouterr().err

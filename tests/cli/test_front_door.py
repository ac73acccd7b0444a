"""What a new user still met at the front door (issue 30), each through ``cli.main``: one line and
exit 2 for a mistyped relative model path or an unreachable hub id (at once, naming the way out),
``--device cuda`` without CUDA, a label column of lists or fractions, a corrupt recipe file, a BEIR
folder without its judgements, non-string texts; faiss's INFO lines quieted."""

from __future__ import annotations

import json
import logging
import time

import pytest

from contrastive_bert.cli import main


def _one_line_error(capsys, argv: list[str], seconds: float = 15.0) -> str:
    """Run ``contrastive-bert ARGV``: exit 2 and one stderr line, no traceback, in under ``seconds``."""
    start = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - start
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert elapsed < seconds, elapsed
    return err


@pytest.fixture()
def no_model_loaded(monkeypatch):
    import contrastive_bert.models

    monkeypatch.setattr(contrastive_bert.models, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))


@pytest.fixture()
def offline(monkeypatch):
    """No hub, as on the machine where the issue was met (HF_HUB_OFFLINE: no network needed to test it)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# --------------------------------------------------------------------------- 1. model names that are not here

@pytest.mark.parametrize("argv", [
    ["train", "--model", "output/nope", "--datasets", "pairs.csv", "--output-dir", "runs/d2", "--dev-task", "", "--eval-tasks", ""],
    ["classify", "--model", "output/acll", "--input", "texts.txt"],
    ["eval", "--model", "sentence-transformers/all-MiniLM-L6-v3", "--tasks", "stsb"],
])
def test_a_model_neither_here_nor_reachable_is_one_line_at_once(argv, tmp_path, monkeypatch, offline, shared_data, capsys):
    """A fresh clone (no output/ folder), offline: a mistyped run folder and a hub id that cannot be
    fetched are one line in seconds (not 75 s of hub retries and a traceback), naming the ways out."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONTRASTIVE_BERT_DATA", str(shared_data))
    (tmp_path / "texts.txt").write_text("my card has not arrived\n")
    (tmp_path / "pairs.csv").write_text("anchor,positive\n" + "".join(f"a cat {i},a kitten {i}\n" for i in range(40)))
    err = _one_line_error(capsys, argv)
    assert f"model: '{argv[2]}' is not a local folder here, the Hugging Face hub cannot be reached (offline)" in err
    assert "use --model default (the bundled all-MiniLM-L6-v2), a local model folder, or a network connection" in err
    assert not (tmp_path / "runs").exists()


# --------------------------------------------------------------------------- 2. --device cuda without CUDA

@pytest.fixture()
def no_cuda(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.mark.parametrize("command", ["mine", "early-exit"])
def test_device_cuda_without_cuda_is_one_line_before_anything_loads(command, tmp_path, shared_data, no_cuda,
                                                                     no_model_loaded, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "texts.txt").write_text("hello\n")
    argv = {"mine": ["mine", "--dataset", "stsb", "--data-dir", str(shared_data), "--output", str(tmp_path / "mined.jsonl")],
            "early-exit": ["early-exit", "--model", str(model), "--input", str(tmp_path / "texts.txt")]}[command]
    err = _one_line_error(capsys, [*argv, "--device", "cuda"])
    assert "device: 'cuda' asked for, but this machine has no CUDA device" in err and "use --device cpu" in err
    assert "not a torch device" in _one_line_error(capsys, [*argv, "--device", "gpu"])
    assert not (tmp_path / "mined.jsonl").exists()


# --------------------------------------------------------------------------- 3. label columns

@pytest.mark.parametrize("rows, said", [
    ([{"text": "a", "label": [1, 2]}, {"text": "b", "label": [0]}], "label: row 0 of {file} is a list ([1, 2])"),
    ([{"text": "a", "label": 0.0}, {"text": "b", "label": 0.5}, {"text": "c", "label": 1.0}],
     "label: row 1 of {file} is 0.5, a fraction"),
])
def test_a_label_column_of_lists_or_fractions_is_one_line(rows, said, tmp_path, no_model_loaded, capsys):
    data = tmp_path / "labels.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows * 8))
    err = _one_line_error(capsys, ["train", "--model", "tiny", "--datasets", str(data), "--loss", "acl",
                                   "--output-dir", str(tmp_path / "run")])
    assert said.format(file=data) in err and "the label column holds one class per row: an integer id or a name (text)" in err
    assert not (tmp_path / "run").exists()


def test_whole_number_float_labels_are_class_ids(tmp_path):
    from contrastive_bert.data import load_dataset

    data = tmp_path / "labels.csv"
    data.write_text("text,label\n" + "".join(f"text {i},{i % 3}.0\n" for i in range(9)))
    split = load_dataset(str(data), split="train")
    assert split.features["label"].names == ["0", "1", "2"] and split["label"][:3] == [0, 1, 2]


def test_non_string_anchors_name_the_file(tmp_path, no_model_loaded, capsys):
    data = tmp_path / "numbers.csv"
    data.write_text("anchor,positive\n1,one\n2,two\n")
    err = _one_line_error(capsys, ["train", "--model", "tiny", "--datasets", str(data), "--output-dir", str(tmp_path / "run")])
    assert f"anchor: row 0 of {data} is 1, expected text (a string)" in err


# --------------------------------------------------------------------------- 4. corrupt recipe files

@pytest.mark.parametrize("name, text, said", [
    ("bad.yaml", "datasets: [stsb\nloss: mnrl\n", "line 2, column 5: not valid YAML (expected ',' or ']', but got ':')"),
    ("bad.yml", "loss: mnrl\n  epochs: 2\n", "line 2, column 9: not valid YAML (mapping values are not allowed here)"),
    ("bad.json", '{"datasets": ["stsb"],\n "loss": mnrl}\n', "line 2, column 10: not valid JSON (Expecting value)"),
])
def test_a_corrupt_recipe_names_the_file_and_line(name, text, said, tmp_path, no_model_loaded, capsys):
    recipe = tmp_path / name
    recipe.write_text(text)
    err = _one_line_error(capsys, ["train", "--recipe", str(recipe)])
    assert f"recipe: {recipe}, {said}" in err


# --------------------------------------------------------------------------- 5. an incomplete BEIR folder

def _corpus_and_queries(folder):
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"doc {i}"}) + "\n" for i in range(4)))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) + "\n" for i in range(4)))
    return folder


def test_a_beir_folder_without_qrels_names_the_missing_file(tmp_path, no_model_loaded, capsys):
    folder = _corpus_and_queries(tmp_path / "my_corpus")
    for argv in (["train", "--datasets", str(folder)], ["eval", "--tasks", str(folder)],
                 ["mine", "--dataset", str(folder), "--output", str(tmp_path / "m.jsonl")]):
        err = _one_line_error(capsys, argv)
        assert f"dataset: {folder} is not a complete BEIR folder: missing qrels/<split>.tsv (qrels/train.tsv to train on" in err
        assert "unknown data set" not in err
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
    err = _one_line_error(capsys, ["train", "--datasets", str(folder), "--output-dir", str(tmp_path / "run")])
    assert f"datasets: {folder} has no qrels/train.tsv, the judgements training pairs come from (it has qrels/test.tsv)" in err


# --------------------------------------------------------------------------- 6. faiss's INFO lines

@pytest.mark.parametrize("flags, shown", [([], False), (["--verbose"], True)])
def test_faiss_info_lines_are_quieted_like_transformers(flags, shown, capsys):
    loggers = [logging.getLogger(name) for name in ("", "faiss", "transformers")]
    levels = [logger.level for logger in loggers]
    try:
        main(["eval", *flags, "--tasks", "stsbb"])  # any command configures logging
        for name in ("faiss", "faiss.loader", "transformers"):
            assert logging.getLogger(name).isEnabledFor(logging.INFO) is shown, name
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def test_train_help_lists_every_registered_loss_in_one_short_entry(capsys):
    """``train --help`` ends with the losses: each registered name once, its description without the
    option list, lines within 100 characters; the queue losses say what was measured."""
    from contrastive_bert.training.losses_registry import LOSSES

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    epilog = capsys.readouterr().out.split("losses (--loss NAME")[1]
    entries = [line.strip().split(":")[0] for line in epilog.splitlines() if line.startswith("  ") and not line.startswith("      ")]
    assert entries == list(LOSSES)
    assert "loss_options" not in epilog and max(len(line) for line in epilog.splitlines()) <= 100
    assert "queue_infonce: InfoNCE + FIFO embedding queue" in epilog and "measured: no gain over mnrl" in epilog

"""``mine``'s output trains as is through ``train --datasets FILE``; an empty input file is a one-line error."""

from __future__ import annotations

import json

from contrastive_bert.cli import main


def test_mined_file_trains(tmp_path, shared_data, tiny_loader, capsys):
    mined = tmp_path / "stsb-hard.jsonl"
    assert main(["mine", "--dataset", "stsb", "--data-dir", str(shared_data), "--output", str(mined),
                 "--num-negatives", "2", "--max-samples", "24", "--relative-margin", "0"]) == 0
    rows = [json.loads(line) for line in mined.read_text().splitlines()]
    assert rows and set(rows[0]) == {"anchor", "positive", "negative"}
    run = tmp_path / "run"
    assert main(["train", "--model", "tiny", "--datasets", str(mined), "--loss", "mnrl", "--max-steps", "2",
                 "--batch-size", "4", "--dev-task", "", "--eval-tasks", "", "--output-dir", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["global_step"] == 2 and results["train_rows"] == len(rows)
    assert results["recipe"]["datasets"] == [str(mined)]


def test_empty_file_is_a_one_line_error(tmp_path, shared_data, tiny_loader, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["mine", "--dataset", str(empty), "--output", str(tmp_path / "out.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("contrastive-bert mine: error: ") and err.count("\n") == 1 and str(empty) in err, err
    assert not (tmp_path / "out.jsonl").exists()
    assert main(["train", "--model", "tiny", "--datasets", str(empty), "--dev-task", "", "--eval-tasks", "",
                 "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("contrastive-bert train: error: ") and err.count("\n") == 1 and str(empty) in err, err
    assert not (tmp_path / "run").exists()

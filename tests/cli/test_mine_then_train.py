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


def _beir_folder(folder):
    """Six documents, four train queries (two judged documents each, one judged only in test)."""
    folder.mkdir()
    docs = {f"d{i}": f"document {i} about {topic}" for i, topic in enumerate(["cats", "dogs", "fish", "birds", "trees", "rocks"])}
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": "", "text": t}) + "\n" for d, t in docs.items()))
    queries = {f"q{i}": f"question {i} about animals" for i in range(5)}
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (folder / "qrels").mkdir()
    train = [(f"q{i}", f"d{i}", 1) for i in range(4)] + [(f"q{i}", f"d{i + 1}", 2) for i in range(4)]
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in train))
    (folder / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq4\td5\t1\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td5\t1\n")
    return docs, train


def test_retrieval_set_mines_its_corpus_without_judged_documents(tmp_path, tiny_loader, capsys):
    folder = tmp_path / "beir"
    docs, train = _beir_folder(folder)
    mined = tmp_path / "mined.jsonl"
    assert main(["mine", "--dataset", str(folder), "--output", str(mined), "--model", "tiny", "--num-negatives", "2",
                 "--relative-margin", "0", "--output-format", "n-tuple", "--no-faiss"]) == 0
    rows = [json.loads(line) for line in mined.read_text().splitlines()]
    assert 4 <= len(rows) <= 8 and set(rows[0]) == {"anchor", "positive", "negative_1", "negative_2"}  # pairs left with < 2 candidates drop
    text_to_doc = {text: doc for doc, text in docs.items()}
    judged = {q: {d for q2, d, _ in train if q2 == q} | ({"d5"} if q == "q0" else set()) for q in ("q0", "q1", "q2", "q3")}
    for row in rows:
        query = "q" + row["anchor"].split()[1]
        negatives = {text_to_doc[row["negative_1"]], text_to_doc[row["negative_2"]]}
        assert not negatives & judged[query], (query, negatives)  # train and test judgements both excluded
    assert main(["mine", "--dataset", str(folder), "--output", str(tmp_path / "x.jsonl"), "--model", "tiny",
                 "--max-score", "0.9"]) == 2
    assert "--max-score: not used for a retrieval data set" in capsys.readouterr().err


def test_retrieval_set_trains_and_evaluates_through_the_cli(tmp_path, tiny_loader, capsys):
    """(query, relevant document) pairs train; the dev evaluator and the before/after scores are nDCG@10."""
    folder = tmp_path / "beir"
    _beir_folder(folder)
    run = tmp_path / "run"
    assert main(["train", "--model", "tiny", "--datasets", str(folder), "--loss", "mnrl", "--max-steps", "2",
                 "--batch-size", "4", "--dev-task", str(folder), "--eval-tasks", str(folder), "--eval-steps", "1",
                 "--output-dir", str(run)]) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["global_step"] == 2 and results["train_rows"] == 8  # 4 train queries x 2 judged documents
    for moment in ("before", "after"):
        scores = results[moment][str(folder)]
        assert scores["main_score"] == scores["ndcg_at_10"] and 0 <= scores["main_score"] <= 100

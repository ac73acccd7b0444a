"""``contrastive-bert search`` through ``cli.main`` with the tiny BERT: every corpus form, the saved
index reused and refused, the output files, and bad input refused before any model loads."""

from __future__ import annotations

import json

import pytest

from contrastive_bert.cli import main
from contrastive_bert.inference import CorpusIndex

from conftest import make_beir_folder, search_hits


def test_search_a_beir_folder_writes_jsonl_and_trec(tmp_path, tiny_loader, capsys):
    folder = make_beir_folder(tmp_path / "beir")
    jsonl, trec = tmp_path / "hits.jsonl", tmp_path / "run.trec"
    argv = ["search", "--model", "tiny", "--corpus", str(folder), "--query", "cats", "--query", "stars", "--top-k", "3"]
    assert main([*argv, "--output", str(jsonl)]) == 0
    printed = search_hits(capsys.readouterr().out)
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["query"] for r in records] == ["cats", "stars"] and [r["query_id"] for r in records] == ["1", "2"]
    assert printed == [[hit["id"] for hit in r["hits"]] for r in records] and all(len(p) == 3 for p in printed)
    first = records[0]["hits"][0]
    assert first["rank"] == 1 and first["text"].endswith(f"document {first['id'][1:]} about {first['text'].split()[0]}")
    assert main([*argv, "--output", str(trec)]) == 0
    rows = [line.split() for line in trec.read_text().splitlines()]
    assert [row[:4] for row in rows[:3]] == [["1", "Q0", hit["id"], str(hit["rank"])] for hit in records[0]["hits"]]
    assert all(row[5] == "contrastive_bert" for row in rows) and len(rows) == 6


def test_beir_queries_keep_their_ids_in_the_trec_run(tmp_path, tiny_loader, capsys):
    """A BEIR queries.jsonl as --input: the run file names its queries by their ids, as its qrels do."""
    folder = make_beir_folder(tmp_path / "beir")
    trec = tmp_path / "run.trec"
    assert main(["search", "--model", "tiny", "--corpus", str(folder), "--input", str(folder / "queries.jsonl"),
                 "--top-k", "2", "--output", str(trec)]) == 0
    assert [line.split()[0] for line in trec.read_text().splitlines()] == [f"q{i // 2}" for i in range(16)]


def test_a_text_file_corpus_has_line_number_ids_and_queries_from_input(tmp_path, tiny_loader, capsys):
    corpus = tmp_path / "docs.txt"
    corpus.write_text("the cat sat\n\nthe dog ran\nstars at night\n")
    queries = tmp_path / "queries.txt"
    queries.write_text("the cat sat\nstars at night\n")
    assert main(["search", "--model", "tiny", "--corpus", str(corpus), "--input", str(queries), "--top-k", "1"]) == 0
    assert search_hits(capsys.readouterr().out) == [["1"], ["4"]]  # identical text, cosine 1; blank line 2 skipped


def test_the_index_folder_is_written_once_then_loaded(tmp_path, tiny_loader, capsys):
    folder = make_beir_folder(tmp_path / "beir")
    index = tmp_path / "index"
    argv = ["search", "--model", "tiny", "--corpus", str(folder), "--query", "fish", "--index", str(index)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert f"encoded 8 documents; index saved to {index}" in first
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert f"loaded the index of 8 documents from {index}" in second and search_hits(second) == search_hits(first)
    other = tmp_path / "other.txt"
    other.write_text("one document\n")
    assert main(["search", "--model", "tiny", "--corpus", str(other), "--query", "x", "--index", str(index)]) == 2
    assert "--index: " in capsys.readouterr().err
    assert CorpusIndex.read_meta(index)["documents"] == 8  # refused, not overwritten
    assert main(["search", "--model", "tiny", "--corpus", str(other), "--query", "x", "--index", str(index), "--overwrite"]) == 0
    assert CorpusIndex.read_meta(index)["documents"] == 1
    empty = tmp_path / "made-by-hand"
    empty.mkdir()
    assert main(["search", "--model", "tiny", "--corpus", str(other), "--query", "x", "--index", str(empty)]) == 0
    assert CorpusIndex.read_meta(empty)["documents"] == 1
    (tmp_path / "stranger").mkdir()
    (tmp_path / "stranger" / "notes.txt").write_text("mine")
    assert main(["search", "--model", "tiny", "--corpus", str(other), "--query", "x", "--index", str(tmp_path / "stranger")]) == 2
    assert "--index: " in (err := capsys.readouterr().err) and "is not a saved CorpusIndex" in err and (tmp_path / "stranger" / "notes.txt").read_text() == "mine"


def test_search_a_registry_retrieval_set(shared_data, tiny_loader, capsys):
    assert main(["search", "--model", "tiny", "--corpus", "scifact", "--data-dir", str(shared_data), "--query",
                 "vitamin D", "--top-k", "2", "--batch-size", "256"]) == 0
    assert len(search_hits(capsys.readouterr().out)[0]) == 2


@pytest.mark.parametrize("extra, message", [
    ([], "--query / --input: give at least one query"),
    (["--query", "x", "--output", "hits.csv"], "--output: expected a .jsonl or .trec file"),
    (["--query", "x", "--index-type", "hnsw"], "--index-type: hnsw needs --backend faiss"),
    (["--query", "x", "--corpus", "stsb"], "--corpus: 'stsb' is a pair-score data set; expected a retrieval one"),
    (["--query", "x", "--corpus", "missing.txt"], "--corpus: file missing.txt does not exist"),
    (["--query", "x", "--corpus", "scifcat"], "--corpus: unknown data set 'scifcat'; known: "),
    (["--input", "missing.jsonl"], "--input: file missing.jsonl does not exist"),
])
def test_bad_input_is_refused_before_the_model_loads(tmp_path, tiny_loader, capsys, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    folder = make_beir_folder(tmp_path / "beir")
    argv = ["search", "--model", "tiny", "--corpus", str(folder)]
    if "--corpus" in extra:
        argv = argv[:-2]
    assert main([*argv, *extra]) == 2
    assert message in capsys.readouterr().err
    assert tiny_loader == []

"""``search`` and ``mine`` follow the corpus size: ``--index-type auto`` is exact below the
threshold (monkeypatched here) and approximate above it, an approximate index prints its recall@100
against exact search in one line and warns (one line naming the knob) when a setting loses
neighbours; ``search --index`` keeps the approximate index and resumes an interrupted encoding."""

from __future__ import annotations

import json

import pytest

import contrastive_bert.embedding_store as embedding_store
import contrastive_bert.vector_index as vector_index
from contrastive_bert.cli import main

from conftest import make_beir_folder

pytest.importorskip("faiss")


def _search(folder, *extra):
    return ["search", "--model", "tiny", "--corpus", str(folder), "--query", "cats", "--top-k", "3", *extra]


def test_search_auto_goes_approximate_above_the_threshold_and_prints_recall(tmp_path, tiny_loader, capsys, monkeypatch):
    folder = make_beir_folder(tmp_path / "beir")
    assert main(_search(folder)) == 0
    assert "search:" not in capsys.readouterr().out  # 8 documents: exact, as the scores were measured
    monkeypatch.setattr(vector_index, "AUTO_EXACT_MAX_DOCUMENTS", 5)
    assert main(_search(folder, "--index", str(tmp_path / "index"))) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "search: FAISS IndexIVFFlat (approximate) over 8 documents" in lines
    recall = [line for line in lines if line.startswith("search: recall@")]
    assert len(recall) == 1 and "on 9 sample queries (1 given, 8 documents as queries): 1.000" in recall[0]
    assert (tmp_path / "index" / "faiss-ivf.index").is_file()  # kept for the next search
    assert main(_search(folder, "--index", str(tmp_path / "index"))) == 0
    assert "loaded the index of 8 documents" in capsys.readouterr().out


def test_search_with_a_bad_setting_warns_naming_the_knob(tmp_path, tiny_loader, capsys):
    folder = make_beir_folder(tmp_path / "beir")
    assert main(_search(folder, "--backend", "faiss", "--index-type", "ivf", "--nprobe", "1")) == 0
    captured = capsys.readouterr()
    assert "search: FAISS IndexIVFFlat (approximate) over 8 documents" in captured.out
    warnings = [line for line in captured.err.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "is below 0.95" in warnings[0] and "raise nprobe (--nprobe, now 1)" in warnings[0]
    assert main(_search(folder, "--index-type", "ivf")) == 2
    assert "--index-type: ivf needs --backend faiss" in capsys.readouterr().err


def test_an_interrupted_index_build_resumes(tmp_path, tiny_loader, capsys, monkeypatch):
    import sentence_transformers

    folder, index = make_beir_folder(tmp_path / "beir"), tmp_path / "index"
    monkeypatch.setattr(embedding_store, "CHUNK_ROWS", 2)
    calls = []
    original = sentence_transformers.SentenceTransformer.encode_document

    def encode_document(self, texts, **options):
        if len(texts) > 1:  # the corpus's chunks, not the probe
            calls.append(list(texts))
            if len(calls) == 3:
                raise KeyboardInterrupt
        return original(self, texts, **options)

    monkeypatch.setattr(sentence_transformers.SentenceTransformer, "encode_document", encode_document)
    assert main(_search(folder, "--index", str(index))) == 130
    assert json.loads((index / "manifest.json").read_text())["rows_done"] == 4 and not (index / "index.json").exists()
    assert main(_search(folder, "--index", str(index))) == 0
    assert "encoded 4 documents (resumed: 4 were encoded before); index saved to" in capsys.readouterr().out
    assert len(calls) == 5  # 3 chunks (the third interrupted), then the 2 missing ones
    other = make_beir_folder(tmp_path / "other")
    (other / "corpus.jsonl").write_text((other / "corpus.jsonl").read_text().replace("cats", "lions"))
    (index / "index.json").unlink()  # unfinished again, now for another corpus: refused, naming --overwrite
    assert main(_search(other, "--index", str(index))) == 2
    assert "--index: " in (err := capsys.readouterr().err) and "another corpus" in err and "--overwrite" in err


def test_mine_auto_approximate_logs_recall_and_cleans_its_embeddings(tmp_path, tiny_loader, capsys, caplog, monkeypatch):
    folder = make_beir_folder(tmp_path / "beir")
    output = tmp_path / "mined.jsonl"
    argv = ["mine", "--model", "tiny", "--dataset", str(folder), "--output", str(output), "--num-negatives", "1",
            "--range-max", "4", "--relative-margin", "0"]
    assert main(argv) == 0
    exact = output.read_text()
    assert "recall@" not in caplog.text and not (tmp_path / "mined.jsonl.embeddings").exists()
    monkeypatch.setattr(vector_index, "AUTO_EXACT_MAX_DOCUMENTS", 5)
    assert main([*argv, "--overwrite", "--embeddings-dir", str(tmp_path / "kept")]) == 0
    assert sum("recall@8 of the approximate index against exact search, on 6 sample queries" in r.message
               for r in caplog.records) == 1
    assert output.read_text() == exact and (tmp_path / "kept").is_dir()  # asked for: kept
    assert main([*argv, "--overwrite", "--index-type", "hnsw", "--no-faiss"]) == 2
    assert "--index-type: hnsw is a FAISS index" in capsys.readouterr().err

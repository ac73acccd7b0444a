"""eval/bench_scale.py's pieces: tiled rows (real ones first, copies moved by noise of the given
norm, a smaller size a prefix of a larger one) written once to a store on disk; each stage's cell
(index, mine, encode, quality) on tiny inputs; the growth exponents, the HNSW cap, the JSON and
the figure rebuilt from a run log."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from bench_modules import load_bench
from contrastive_bert.benchmarking import run_key
from contrastive_bert.data.beir import RetrievalData

pytest.importorskip("faiss")
bench = load_bench("bench_scale")


def _unit(rows: int, seed: int, dim: int = 16) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return values / np.linalg.norm(values, axis=1, keepdims=True)


def _store(folder, rows: np.ndarray) -> str:
    folder.mkdir()
    np.save(folder / "embeddings.npy", rows)
    return str(folder)


def test_tiled_rows_keep_the_real_ones_first_and_move_each_copy_by_the_noise():
    base = _unit(50, 7)
    rows = bench.tiled_rows(base, 130, noise=0.5)
    assert rows.shape == (130, 16) and np.array_equal(rows[:50], base)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    # copy 2 by hand: base + noise of norm 0.5 drawn with seed [0, 2], normalised
    noise = np.random.default_rng([0, 2]).standard_normal(base.shape).astype(np.float32)
    moved = base + 0.5 * noise / np.linalg.norm(noise, axis=1, keepdims=True)
    assert np.allclose(rows[100:130], (moved / np.linalg.norm(moved, axis=1, keepdims=True))[:30], atol=1e-6)
    cosine = (rows[50:100] * base).sum(axis=1)  # cos = (1 + <b, n>) / |b + n|, |n| = 0.5: about 0.89
    assert 0.75 < cosine.mean() < 0.95
    assert np.array_equal(bench.tiled_rows(base, 20, 0.5), base[:20])
    assert np.array_equal(bench.tiled_rows(base, 90, 0.5), rows[:90])  # a smaller size is a prefix


def test_tiled_store_is_written_once_and_memory_mapped(tmp_path):
    a, b = _unit(30, 1), _unit(20, 2)
    folders = [_store(tmp_path / "a", a), _store(tmp_path / "b", b)]
    folder = bench.tiled_store(folders, 120, 0.5, tmp_path / "cache")
    rows = bench.open_rows(folder)
    assert isinstance(rows, np.memmap) and rows.shape == (120, 16)
    assert np.array_equal(rows, bench.tiled_rows(np.concatenate([a, b]), 120, 0.5))
    written = os.stat(folder / "embeddings.npy").st_mtime_ns
    assert bench.tiled_store(folders, 120, 0.5, tmp_path / "cache") == folder
    assert os.stat(folder / "embeddings.npy").st_mtime_ns == written and not list(folder.glob("*partial*"))
    assert bench.tiled_store(folders, 120, 0.3, tmp_path / "cache") != folder  # another noise, another store


def test_anon_peak_sees_memory_allocated_and_freed_inside_the_block():
    with bench.anon_peak(interval=0.005) as peak:
        block = np.ones(64 * 2**20 // 8)  # 64 MiB, touched
        import time

        time.sleep(0.05)
        del block
    assert peak.peak_mb - peak.before_mb > 48


def test_index_cell_over_a_mapped_store(tmp_path):
    rows = bench.tiled_store([_store(tmp_path / "a", _unit(120, 1))], 500, 0.5, tmp_path / "cache")
    queries = _store(tmp_path / "q", _unit(30, 3))
    spec = {"stage": "index", "size": 500, "index_type": "hnsw", "threads": 1, "rows": str(rows), "queries": queries,
            "queries_used": 30}
    cell = bench.run_cell(spec)
    assert cell["size"] == 500 and cell["queries"] == 30 and cell["ef_search"] == 128
    assert 0.9 <= cell["recall_at_100"] <= 1.0 and cell["build_seconds"] > 0
    assert cell["peak_rss_mib"] >= cell["peak_anon_mib"] >= cell["before_anon_mib"] and cell["stage_mib"] >= 0
    assert cell["index_copy_mib"] == cell["rows_mib"] == 500 * 16 * 4 / 2**20
    flat = bench.run_cell({**spec, "index_type": "flat", "queries_used": 10})
    assert flat["recall_at_10"] == flat["recall_at_100"] == 1.0 and flat["index_copy_mib"] == 0.0 and flat["queries"] == 10


def _query_set() -> RetrievalData:
    """Ten queries q0..q9, q_i judged relevant to documents d_i (grade 1) and d_{i+20} (grade 2, q0..q4)."""
    qrels = {"train": {f"q{i}": {f"d{i}": 1} for i in range(6)}, "test": {f"q{i}": {f"d{i}": 1} for i in range(6, 10)}}
    for i in range(5):
        qrels["train"][f"q{i}"][f"d{i + 20}"] = 2
    return RetrievalData({f"d{i}": f"document {i}" for i in range(30)}, {f"q{i}": f"query {i}" for i in range(10)}, qrels)


def test_mining_data_tiles_ids_and_takes_the_first_pairs():
    ids = [f"scifact/d{i}" for i in range(30)] + ["nfcorpus/x0", "nfcorpus/x1"]
    texts = [f"document {i}" for i in range(30)] + ["other 0", "other 1"]
    data = bench.mining_data(ids, texts, _query_set(), size=70, pairs=5)
    assert len(data.corpus) == 70 and list(data.corpus)[:32] == ids
    assert list(data.corpus)[32] == "scifact/d0#1" and data.corpus["scifact/d0#1"] == "document 0"
    assert list(data.corpus)[-1] == "scifact/d5#2"
    # sorted query ids, most relevant first: q0 (d20, d0), q1 (d21, d1), q2 (d22): five pairs
    assert data.split("train") == {"q0": {"scifact/d20": 2, "scifact/d0": 1}, "q1": {"scifact/d21": 2, "scifact/d1": 1},
                                   "q2": {"scifact/d22": 2}}
    assert data.relevant("q7") == {"scifact/d7"}  # every judgement stays in, to be excluded
    small = bench.mining_data(ids, texts, _query_set(), size=3, pairs=5)  # only d0..d2 in the corpus
    assert small.split("train") == {"q0": {"scifact/d0": 1}, "q1": {"scifact/d1": 1}, "q2": {"scifact/d2": 1}}
    with pytest.raises(ValueError, match="size: none of the first"):
        bench.mining_data(["nfcorpus/x0"], ["other"], _query_set(), size=1, pairs=5)


def _fake_documents(monkeypatch):
    ids = [f"scifact/d{i}" for i in range(30)]
    texts = [f"document number {i} about topic {i % 4}" for i in range(30)]
    monkeypatch.setattr(bench, "real_documents", lambda data_dir: (ids, texts))
    monkeypatch.setattr(bench, "load_query_set", lambda data_dir: _query_set())
    return ids, texts


def test_mine_cell_runs_the_library_miner_over_the_mapped_rows(tmp_path, monkeypatch, tiny_loader):
    _fake_documents(monkeypatch)
    rows = bench.tiled_store([_store(tmp_path / "a", _unit(30, 1, dim=32))], 100, 0.5, tmp_path / "cache")
    spec = {"stage": "mine", "size": 100, "index_type": "flat", "threads": 1, "rows": str(rows), "pairs": 6, "data_dir": None}
    cell = bench.run_cell(spec)
    assert tiny_loader == ["default"]
    assert cell["pairs"] == 6 and cell["queries"] == 3 and cell["kept"] + cell["dropped_near_positive"] + cell["dropped_small_corpus"] == 6
    assert cell["negatives_per_row"] == 4 and cell["recall_at_100"] is None  # flat: exact, no recall to measure
    assert cell["seconds"] > 0 and cell["seconds_without_query_encoding"] >= 0 and cell["stage_mib"] >= 0
    hnsw = bench.run_cell({**spec, "index_type": "hnsw"})
    assert hnsw["pairs"] == 6 and 0 <= hnsw["recall_at_100"] <= 1


def test_encode_cell_encodes_the_repeated_documents_into_a_scratch_store(tmp_path, monkeypatch, tiny_loader):
    _fake_documents(monkeypatch)
    spec = {"stage": "encode", "documents": 45, "backend": "torch", "threads": 1, "data_dir": None, "scratch": str(tmp_path / "s")}
    cell = bench.run_cell(spec)
    assert cell["documents"] == 45 and cell["distinct_documents"] == 30 and cell["dim"] == 32
    assert cell["documents_per_second"] == pytest.approx(45 / cell["seconds"]) and cell["peak_rss_mib"] > 0
    assert not list((tmp_path / "s").iterdir())  # the scratch store is removed


def test_quality_cell_scores_the_test_split_with_the_package_scorer(monkeypatch, tiny_loader):
    _fake_documents(monkeypatch)
    cell = bench.run_cell({"stage": "quality", "backend": "torch", "threads": 1, "data_dir": None})
    assert cell["num_queries"] == 4 and cell["num_documents"] == 30 and 0 <= cell["ndcg_at_10"] <= 100
    dry = bench.run_cell({"stage": "quality", "backend": "torch", "threads": 1, "data_dir": None, "max_queries": 2,
                          "max_documents": 5})
    assert dry["num_queries"] == 2 and dry["num_documents"] == 7  # d0..d4 and the judged d6, d7


def test_backend_problem_names_what_is_missing(monkeypatch):
    from contrastive_bert import models

    assert bench.backend_problem("torch") is None
    assert "unknown backend" in bench.backend_problem("tpu")

    def with_backend(name_or_path="default", device=None, backend="torch", **kwargs):
        raise AssertionError("never loaded")

    def check_backend(backend):
        raise ValueError("backend: 'onnx' needs onnxruntime (pip install 'contrastive_bert[onnx]')")

    monkeypatch.setattr(models, "load_model", with_backend)
    monkeypatch.setattr(models, "check_backend", check_backend, raising=False)
    assert "onnxruntime" in bench.backend_problem("onnx")
    monkeypatch.setattr(models, "check_backend", lambda backend: None)
    assert bench.backend_problem("onnx-int8") is None


def test_growth_exponent_and_power_fit_are_the_log_log_line():
    sizes = [1e4, 1e5, 1e6]
    assert bench.growth_exponent(sizes, [2 * s**1.5 for s in sizes]) == pytest.approx(1.5)
    assert bench.growth_exponent(sizes, [7.0, 7.0, 7.0]) == pytest.approx(0.0, abs=1e-12)
    assert bench.growth_exponent([1e4, 1e4], [1.0, 2.0]) is None and bench.growth_exponent([1e4], [1.0]) is None
    assert bench.growth_exponent([1e4, 1e5, 1e6], [0.0, 1.0, 10.0]) == pytest.approx(1.0)  # non-positive points left out
    assert bench.power_fit([1e4, 1e5], [1.0, 30.0], 1e6) == pytest.approx(900.0)


def _index(size, kind, build, query, stage_mib=10.0, dry=False):
    return {"stage": "index", "size": size, "index_type": kind, "build_seconds": build, "query_seconds": query,
            "peak_rss_mib": 300.0 + size / 1000, "stage_mib": stage_mib, "threads": 2, "dry_run": dry,
            "key": f"index-{size}-{kind}-{dry}"}


def _records() -> list[dict]:
    records = [_index(10_000, "flat", 0.0, 0.1), _index(100_000, "flat", 0.0, 1.0),
               _index(10_000, "hnsw", 1.0, 0.2, 20.0), _index(100_000, "hnsw", 30.0, 0.4, 200.0),
               _index(1_000, "ivf", 1.0, 1.0, dry=True)]
    for documents, seconds in ((1_000, 40.0), (10_000, 400.0)):
        records.append({"stage": "encode", "backend": "torch", "documents": documents, "seconds": seconds,
                        "documents_per_second": documents / seconds, "peak_rss_mib": 900.0, "stage_mib": 100.0,
                        "key": f"encode-{documents}"})
    records += [{"stage": "quality", "backend": b, "ndcg_at_10": v, "key": f"quality-{b}"} for b, v in (("torch", 64.5), ("onnx-int8", 63.8))]
    records.append({"size": 10_000, "index_type": "flat", "build_seconds": 0.0, "key": "old"})  # the first version's
    return records


def test_summary_growth_extrapolation_quality_and_cap():
    summary = bench.summarize(_records())
    assert [c["size"] for c in summary["cells"]["index"]] == [10_000, 10_000, 100_000, 100_000]
    assert summary["superseded_records"] == 1
    series = {(g["series"], g["variant"]): g for g in summary["growth"]}
    assert ("build", "flat") not in series  # exact search builds nothing
    assert series[("build", "hnsw")]["seconds_exponent"] == pytest.approx(math.log10(30))
    assert series[("search", "flat")]["seconds_exponent"] == pytest.approx(1.0)
    assert series[("search", "hnsw")]["stage_memory_exponent"] == pytest.approx(1.0)
    assert series[("encode", "torch")]["seconds_exponent"] == pytest.approx(1.0)
    extrapolated = summary["encoding_extrapolated"]["torch"]
    assert extrapolated["extrapolated"] and extrapolated["seconds_from_largest_cell"] == pytest.approx(40_000.0)
    assert extrapolated["seconds_from_power_fit"] == pytest.approx(40_000.0)
    assert summary["quality"]["onnx-int8"]["minus_torch"] == pytest.approx(-0.7)
    assert not summary["quality"]["onnx-int8"]["loss_under_half_a_point"]
    index_cells = summary["cells"]["index"]
    assert bench.hnsw_estimate(index_cells, 1_000_000) == pytest.approx(900.0)  # 30 s x 10 ** log10(30)
    assert bench.hnsw_estimate(index_cells, 100_000) == 30.0  # measured
    assert bench.hnsw_cap(index_cells, "mine", 1_000_000, 30) is None
    note = bench.hnsw_cap(index_cells, "index", 1_000_000, 10)
    assert note["estimated_build_seconds"] == pytest.approx(900.0) and "not run" in note["reason"]
    # measured HNSW builds (10k, 100k) are under the cap; 1M is not, for both stages that would build it
    assert [(n["stage"], n["size"]) for n in bench.capped_cells(summary, [10_000, 100_000, 1_000_000], 10)] == [
        ("index", 1_000_000), ("mine", 1_000_000)]
    dry = bench.summarize(_records(), dry_run=True)
    assert [c["index_type"] for c in dry["cells"]["index"]] == ["ivf"] and dry["superseded_records"] == 0


def test_cli_cells_are_kept_by_the_version_in_their_run_log_key():
    """A cli record as the runner appends it names its version only in its key (the settings it ran
    with): kept at the current version, superseded at an older one or without one."""
    def cli(command: str, version: int | None) -> dict:
        key = {"stage": "cli", "command": command, "documents": 1_000_000, "backend": "torch-bf16", "threads": 2,
               "batch_size": 64, **({} if version is None else {"version": version})}
        runs = {"read_back": {"seconds": 1.0}} if command == "search" else {"mine": {"seconds": 1.0}}
        return {"stage": "cli", "command": command, "documents": 1_000_000, "runs": runs, "peak_rss_mib": 1.0,
                "peak_anon_mib": 1.0, "rows_mib": 1.0, "same_hits_encoded_and_read_back": True, "key": run_key(key)}

    records = [cli("search", None), cli("mine", bench.CLI_VERSION - 1), cli("search", bench.CLI_VERSION),
               cli("mine", bench.CLI_VERSION)]
    summary = bench.summarize(records)
    assert [c["command"] for c in summary["cells"]["cli"]] == ["search", "mine"]
    assert set(summary["cli"]) == {"search", "mine", "totals"} and summary["superseded_records"] == 2


def test_onnx_encode_cells_of_an_older_session_stay_marked_until_measured_again():
    """An onnx cell measured with the per-shape memory pattern (no ``onnx_session`` in its key) stays
    in the table, marked, until the current session measured the same backend and size."""
    def encode(backend: str, documents: int, session: int | None) -> dict:
        key = {"stage": "encode", "documents": documents, "backend": backend, "threads": 2, "batch_size": 64,
               **({} if session is None else {"onnx_session": session})}
        return {"stage": "encode", "backend": backend, "documents": documents, "seconds": documents / 30.0,
                "documents_per_second": 30.0, "peak_rss_mib": 900.0, "stage_mib": 100.0, "key": run_key(key)}

    records = [encode("torch", 1_000, None), encode("onnx-int8", 1_000, None), encode("onnx-int8", 10_000, None),
               encode("onnx-int8", 10_000, bench.ONNX_SESSION), encode("onnx", 1_000, bench.ONNX_SESSION)]
    summary = bench.summarize(records)
    cells = {(c["backend"], c["documents"]): c.get("onnx_memory_pattern", False) for c in summary["cells"]["encode"]}
    assert cells == {("torch", 1_000): False, ("onnx", 1_000): False, ("onnx-int8", 1_000): True, ("onnx-int8", 10_000): False}
    assert summary["superseded_records"] == 1
    args = bench.argparse.Namespace(encode_sizes=[1_000], backends=["torch", "onnx-int8"], threads=2, data_dir=None,
                                    cache_dir="/c", dry_run=False)
    assert [key.get("onnx_session") for key, _ in bench.cell_keys(args, "encode")] == [None, bench.ONNX_SESSION]


def test_cli_totals_add_the_encoding_runs_and_take_the_largest_peak():
    def run(seconds: float, anon: float, rss: float, **extra) -> dict:
        return {"seconds": seconds, "peak_anon_mib": anon, "peak_rss_mib": rss, **extra}

    search = {"documents": 1_000, "rows_mib": 1.5, "same_hits_encoded_and_read_back": True, "peak_anon_mib": 900.0,
              "peak_rss_mib": 2_000.0, "runs": {"interrupted": run(60.0, 800.0, 1_500.0, rows_done=512),
                                                "resumed": run(50.0, 900.0, 2_000.0), "read_back": run(2.0, 700.0, 1_900.0)}}
    mine = {"documents": 1_000, "rows_mib": 1.5, "peak_anon_mib": 950.0, "peak_rss_mib": 1_800.0, "runs": {"mine": run(4.0, 950.0, 1_800.0)}}
    assert bench.cli_totals({"search": search, "mine": mine}) == {
        "documents": 1_000, "peak_anon_mib": 950.0, "peak_rss_mib": 2_000.0, "rows_mib": 1.5, "search_encode_seconds": 110.0,
        "read_back_seconds": 2.0, "interrupted_at": 512, "same_hits": True, "mine_seconds": 4.0}


def test_summary_only_writes_the_json_and_the_figure(tmp_path):
    log = tmp_path / "runs.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in _records()))
    output = tmp_path / "scale.json"
    bench.main(["--summary-only", "--run-log", str(log), "--output", str(output), "--cache-dir", str(tmp_path / "cache"),
                "--threads", "1", "-q"])
    data = json.loads(output.read_text())
    assert data["benchmark"] == "bench_scale" and data["environment"] and not data["dry_run"]
    assert data["protocol"]["auto_index_type"] == {"10000": "flat", "100000": "flat", "1000000": "flat"}  # auto: exact up to a million documents
    assert data["capped"] == [] and len(data["cells"]["index"]) == 4
    assert output.with_suffix(".png").stat().st_size > 10_000


def test_cell_keys_of_a_real_and_a_dry_run():
    args = bench.argparse.Namespace(sizes=[10_000, 1_000_000], index_types=["flat"], encode_sizes=[1_000], backends=["torch"],
                                    threads=1, noise=0.5, queries=1000, pairs=1000, data_dir=None, cache_dir="/c", dry_run=False)
    keys = [key for key, _ in bench.cell_keys(args, "index")]
    assert keys == [{"stage": "index", "size": 10_000, "index_type": "flat", "threads": 1, "noise": 0.5, "queries": 1000},
                    {"stage": "index", "size": 1_000_000, "index_type": "flat", "threads": 1, "noise": 0.5, "queries": 1000}]
    assert [k["pairs"] for k, _ in bench.cell_keys(args, "mine")] == [1000, 1000]
    (key, spec), = bench.cell_keys(args, "encode")
    assert key == {"stage": "encode", "documents": 1000, "backend": "torch", "threads": 1, "batch_size": 64}
    assert spec["scratch"] == os.path.join("/c", "scratch")
    args.dry_run = True
    assert [k["size"] for k, _ in bench.cell_keys(args, "index")] == [100, 10_000]
    assert all(k["dry_run"] for k, _ in bench.cell_keys(args, "index"))
    (key, spec), = bench.cell_keys(args, "quality")
    assert key["dry_run"] and spec["max_queries"] == bench.DRY_RUN_QUALITY_QUERIES


def test_a_dry_run_never_writes_under_eval_results(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.tempfile, "gettempdir", lambda: str(tmp_path))
    before = {p.name: p.stat().st_mtime_ns for p in bench.RESULTS.glob("scale*")}
    bench.main(["--dry-run", "--summary-only", "--cache-dir", str(tmp_path / "cache"), "--threads", "1", "-q"])
    written = json.loads((tmp_path / "bench_scale_dry_run" / "scale.json").read_text())
    assert written["dry_run"] and (tmp_path / "bench_scale_dry_run" / "scale.json").is_file()
    assert {p.name: p.stat().st_mtime_ns for p in bench.RESULTS.glob("scale*")} == before


def test_largest_cells_are_what_the_readme_quotes():
    cells = {
        "index": [{"size": 10, "index_type": "flat", "query_seconds": 1.0}, {"size": 100, "index_type": "flat", "query_seconds": 4.0},
                  {"size": 100, "index_type": "ivf", "query_seconds": 2.0}],
        "mine": [{"size": 10, "index_type": "flat", "seconds": 3.0}],
        "encode": [{"backend": "torch", "documents": 1000, "documents_per_second": 20.0},
                   {"backend": "torch", "documents": 10000, "documents_per_second": 25.0},
                   {"backend": "onnx-int8", "documents": 1000, "documents_per_second": 50.0}],
        "quality": [],
    }
    largest = bench.largest_cells(cells)
    assert largest["index"]["size"] == 100 and set(largest["index"]) == {"size", "flat", "ivf"}
    assert largest["index"]["flat"]["query_seconds"] == 4.0 and largest["mine"]["flat"]["seconds"] == 3.0
    # 10,000 documents has torch only: the largest size both backends reached is 1,000
    assert largest["encode"] == {"documents": 1000, "torch": {"documents_per_second": 20.0, "vs_torch": 1.0},
                                 "onnx-int8": {"documents_per_second": 50.0, "vs_torch": 2.5}}


def test_cli_corpus_is_scifact_then_its_sentences_written_once(tmp_path, monkeypatch):
    _fake_documents(monkeypatch)
    info = bench.cli_corpus(None, 45, tmp_path / "cli")
    assert info == {"documents": 45, "scifact_documents": 30, "sentences": 15, "distinct_sentences": 15,
                    "mean_sentence_words": 6.0, "test_queries": 4}
    rows = [json.loads(line) for line in (tmp_path / "cli" / "corpus.jsonl").read_text().splitlines()]
    assert [r["_id"] for r in rows] == [f"d{i}" for i in range(30)] + [f"s{i}" for i in range(15)]
    assert rows[30]["text"] == "document number 0 about topic 0" and rows[0]["text"] == "document 0"
    assert (tmp_path / "cli" / "qrels" / "train.tsv").read_text().splitlines()[:2] == ["query-id\tcorpus-id\tscore", "q0\td0\t1"]
    assert len((tmp_path / "cli" / "test_queries.jsonl").read_text().splitlines()) == 4
    before = (tmp_path / "cli" / "corpus.jsonl").stat().st_mtime_ns
    assert bench.cli_corpus(None, 45, tmp_path / "cli") == info  # read back, not written again
    assert (tmp_path / "cli" / "corpus.jsonl").stat().st_mtime_ns == before
    with pytest.raises(ValueError, match="documents: at least SciFact's 30 documents, got 20"):
        bench.cli_corpus(None, 20, tmp_path / "other")


def test_cli_cells_run_search_then_read_back_then_mine_on_its_store(tmp_path, monkeypatch, _tiny_model_session):
    """The real CLI in fresh processes (the tiny BERT saved to a folder): the search cell's encoding
    and read-back runs give the same hits, and the mine cell reads the search cell's rows back."""
    _fake_documents(monkeypatch)
    model = tmp_path / "model"
    _tiny_model_session.save(str(model))
    spec = {"stage": "cli", "documents": 45, "backend": "torch", "threads": 1, "data_dir": None,
            "folder": str(tmp_path / "cli"), "model": str(model)}
    search = bench.run_cell({**spec, "command": "search"})
    assert list(search["runs"]) == ["encoded", "read_back"]  # one chunk: nothing to interrupt half-way
    assert search["same_hits_encoded_and_read_back"] and search["encoded_line"].startswith("encoded 45 documents")
    assert search["rows_mib"] == pytest.approx(45 * 32 * 4 / 2**20, rel=0.1) and search["peak_rss_mib"] > 0
    assert search["runs"]["read_back"]["lines"][0].startswith("loaded the index of 45 documents")
    mine = bench.run_cell({**spec, "command": "mine"})
    assert mine["store_from_search_cell"] and mine["store_untouched"] and mine["rows_mined"] > 0
    assert not (tmp_path / "cli" / "mine").exists() and (tmp_path / "cli" / "search" / "index" / "embeddings.npy").is_file()


def test_ctrl_c_reaches_the_cli_even_from_a_background_benchmark(tmp_path):
    """A shell's background job ignores SIGINT and its children inherit that: run_cli gives the CLI
    Ctrl-C's default back, so the interruption stops it instead of being ignored."""
    import signal

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one document\nanother document\n", encoding="utf-8")
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under `nohup ... &`
    try:
        run = bench.run_cli(["search", "--corpus", str(corpus), "--query", "q"], threads=1, interrupt=lambda: True)
    finally:
        signal.signal(signal.SIGINT, before)
    assert run["interrupted"] and run["returncode"] != 0 and "query: q" not in run["stdout_tail"]

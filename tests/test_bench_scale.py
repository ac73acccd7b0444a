"""eval/bench_scale.py's pieces: real rows first, then tiled copies moved by noise of the given
norm (unit rows); one cell measures build, query time, memory and recall against exact search."""

from __future__ import annotations

import numpy as np
import pytest

from bench_modules import load_bench

pytest.importorskip("faiss")
bench = load_bench("bench_scale")


def _unit(rows: int, seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal((rows, 16)).astype(np.float32)
    return values / np.linalg.norm(values, axis=1, keepdims=True)


def test_tiled_rows_keep_the_real_ones_first_and_move_each_copy_by_the_noise():
    base = _unit(50, 7)  # not seed 0: the noise is drawn with seed 0
    rows = bench.tiled_rows(base, 130, noise=0.5)
    assert rows.shape == (130, 16) and np.array_equal(rows[:50], base)
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    cosine = (rows[50:100] * base).sum(axis=1)  # moved by norm 0.5, normalised: cos = (1 + <b, n>) / |b + n|
    assert 0.75 < cosine.mean() < 0.95 and np.array_equal(bench.tiled_rows(base, 20, 0.5), base[:20])


def test_one_cell(tmp_path):
    for name, rows in (("a", _unit(120, 1)), ("b", _unit(80, 2)), ("q", _unit(30, 3))):
        (tmp_path / name).mkdir()
        np.save(tmp_path / name / "embeddings.npy", rows)
    spec = {"size": 500, "index_type": "hnsw", "threads": 1, "noise": 0.5,
            "documents": [str(tmp_path / "a"), str(tmp_path / "b")], "queries": str(tmp_path / "q")}
    cell = bench.run_cell(spec)
    assert cell["size"] == 500 and cell["queries"] == 30 and cell["ef_search"] == 128
    assert 0.9 <= cell["recall_at_100"] <= 1.0 and cell["build_seconds"] > 0 and cell["peak_rss_mib"] >= cell["rows_rss_mib"]
    flat = bench.run_cell({**spec, "index_type": "flat"})
    assert flat["recall_at_10"] == flat["recall_at_100"] == 1.0

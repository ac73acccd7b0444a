"""eval/bench_acl.py ``--dry-run --only emotion:full16k`` end to end on a tiny model and a small imbalanced
stand-in for emotion: the grid's first runs in order (logistic regression, the encoded method's two rates,
its group_by_label twin), each trained through the package in its batch order, scored by its label head
and by a linear probe of its own embeddings, logged as dry runs and left out of the summary."""

from __future__ import annotations

import json

from bench_modules import load_bench

NAMES = ["sadness", "joy", "love", "anger", "fear", "surprise"]
COUNTS = (20, 24, 6, 10, 8, 4)  # imbalanced like emotion's train


def _splits():
    from datasets import Dataset

    def split(counts, tag):
        labels = [k for k, n in enumerate(counts) for _ in range(n)]
        return Dataset.from_dict({"text": [f"{tag} {i} I feel {NAMES[k]}" for i, k in enumerate(labels)], "label": labels})

    return {"train": split(COUNTS, "train"), "dev": split((4,) * 6, "dev"), "test": split((4,) * 6, "test"), "names": NAMES}


def test_a_dry_run_of_the_full16k_grid(tmp_path, monkeypatch, tiny_loader):
    bench = load_bench("bench_acl", "bench_acl_dry_run")
    loaded = []
    monkeypatch.setattr(bench, "load_splits", lambda name, data_dir, eval_rows=None, regime="full": loaded.append((name, regime)) or _splits())
    monkeypatch.setattr(bench, "general_ability", lambda model, data_dir, max_rows=None: None)
    monkeypatch.setattr(bench, "label_name_geometry", lambda data_dir, device=None: {})
    run_log, output = tmp_path / "runs.jsonl", tmp_path / "acl.json"
    assert bench.main(["--dry-run", "--only", "emotion:full16k", "--max-runs", "20", "--run-log", str(run_log),
                       "--output", str(output), "-q"]) == 0
    records = [json.loads(line) for line in run_log.read_text().splitlines()]
    assert loaded == [("emotion", "full16k")]  # all of train, loaded once
    # the encoded method (the recipe's) first, the baselines before the free head, the old-order twin, then
    # the seeds of the rows the dev scores pick (dry-run scores: whichever won here)
    assert [(r["method"], r.get("learning_rate"), r["seed"]) for r in records[:10]] == [
        ("logreg", None, 0), ("acl_embed_encoded", 2e-4, 0), ("acl_embed_encoded", 5e-5, 0), ("ce", 2e-4, 0), ("ce", 5e-5, 0),
        ("supcon", 2e-4, 0), ("supcon", 5e-5, 0), ("acl_embed", 2e-4, 0), ("acl_embed", 5e-5, 0),
        ("acl_embed_encoded_group_by_label", 2e-4, 0)]
    assert sorted(r["seed"] for r in records[10:]) == [1, 1, 2, 2] and len(records) == 14
    assert all(r["dry_run"] and r["regime"] == "full16k" for r in records)
    trained = records[1:]
    assert [r["method"] for r in trained if r["batch_order"] == "group_by_label"] == ["acl_embed_encoded_group_by_label"]
    for record in trained:
        assert record["steps"] == 2 and record["train_rows"] == sum(COUNTS)
        assert set(record["probe"]) == {"dev", "test"} and 0.0 <= record["probe"]["test"]["accuracy"] <= 100.0
        assert 0.0 <= record["test"]["accuracy"] <= 100.0
    # dry runs never reach the summary
    assert json.loads(output.read_text())["settings"] == {}

"""The offline GPU bundle: fp16-stored weights load as fp32 with the same embeddings, and the whole
bundle path (build, run.sh on the CPU in dry-run mode, merge back) works with a tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO_ROOT, SHARED_DATA


def test_half_precision_folder_loads_as_fp32_with_the_same_embeddings(tiny_model, tmp_path):
    from safetensors import safe_open

    from contrastive_bert.models import HALF_PRECISION_MARKER, load_model, save_half_precision

    tiny_model.save(str(tmp_path / "fp32"))
    folder = save_half_precision(tmp_path / "fp32", tmp_path / "fp16")
    assert (folder / HALF_PRECISION_MARKER).is_file()
    with safe_open(str(folder / "model.safetensors"), framework="pt") as weights:
        dtypes = {weights.get_tensor(name).dtype for name in weights.keys()}
    assert dtypes == {torch.float16}
    restored = load_model(str(folder))
    assert {p.dtype for p in restored.parameters()} == {torch.float32}
    original = {n: p.detach() for n, p in tiny_model.named_parameters()}
    for name, parameter in restored.named_parameters():  # every weight is the fp16 rounding of the original
        assert torch.equal(parameter.detach(), original[name].half().float()), name
    texts = ["A man is playing a guitar.", "The cat sits on the mat.", "Stocks fell sharply today."]
    expected = tiny_model.encode(texts, convert_to_tensor=True)
    got = restored.encode(texts, convert_to_tensor=True)
    assert torch.nn.functional.cosine_similarity(expected, got).min() > 0.9999


def test_half_precision_refuses_an_existing_destination(tiny_model, tmp_path):
    from contrastive_bert.models import save_half_precision

    tiny_model.save(str(tmp_path / "fp32"))
    (tmp_path / "taken").mkdir()
    with pytest.raises(ValueError, match="destination"):
        save_half_precision(tmp_path / "fp32", tmp_path / "taken")


@pytest.mark.slow
def test_fp16_stored_model_scores_stsb_like_the_fp32_model(tmp_path):
    from contrastive_bert.evaluation.tasks import evaluate_task
    from contrastive_bert.models import load_model, save_half_precision

    fp32 = evaluate_task(load_model("default"), "stsb", data_dir=str(SHARED_DATA))["main_score"]
    fp16 = evaluate_task(load_model(str(save_half_precision("default", tmp_path / "fp16"))), "stsb",
                         data_dir=str(SHARED_DATA))["main_score"]
    assert abs(fp32 - fp16) < 0.1, (fp32, fp16)


@pytest.mark.skipif(not (SHARED_DATA / "stsb").is_dir(), reason="needs the shared data sets")
def test_bundle_dry_run_on_the_cpu_leaves_run_logs_and_merges_nothing(_tiny_model_session, tmp_path):
    from contrastive_bert.benchmarking import RunLog, merge

    _tiny_model_session.save(str(tmp_path / "tiny"))
    environment = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "CONTRASTIVE_BERT_DATA": str(SHARED_DATA)}
    bundle, out = tmp_path / "bundle", tmp_path / "out"
    build = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "offline_bundle.sh"), str(bundle), "--benchmarks",
                            "queue_speed,pairs_quality,retrieval_quality", "--model", str(tmp_path / "tiny"), "--compression", "gz",
                            "--no-wheels"], env=environment, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    assert {"run.sh", "model.tar.gz", "src.tar.gz", "data.tar.gz", "README.md", "blocks.txt"} <= {p.name for p in bundle.iterdir()}
    assert (bundle / "blocks.txt").read_text().strip() == "queue_speed,pairs_quality,retrieval_quality"
    run = subprocess.run(["bash", str(bundle / "run.sh"), "--dry-run", "--device", "cpu", "--threads", "1", "--minutes", "6",
                          "--out", str(out)], env=environment, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    timing = json.loads((out / "timing.json").read_text())
    assert [timing[b]["returncode"] for b in ("queue_speed", "pairs_quality", "retrieval_quality")] == [0, 0, 0], timing
    retrieval = RunLog(out / "retrieval_quality_runs.jsonl").records()
    assert {r["method"] for r in retrieval} == {"untrained", "mnrl"} and all(r["dry_run"] for r in retrieval)
    records = RunLog(out / "pairs_quality_runs.jsonl").records()
    assert records and all(r["dry_run"] for r in records)
    assert {r["method"] for r in records} == {"untrained", "angle"}
    assert all(r.get("steps", 2) <= 2 for r in records)
    assert json.loads((out / "queue_speed_gpu.json").read_text())["setup"]["dry_run"] is True
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dry_run"] is True and manifest["files"] == ["queue_speed_gpu.json"]
    assert manifest["benchmarks"] == [{"script": "eval/bench_pairs_quality.py", "run_log": "pairs_quality_runs.jsonl",
                                       "output": "pairs_quality.json"},
                                      {"script": "eval/bench_retrieval.py", "run_log": "retrieval_quality_runs.jsonl",
                                       "output": "retrieval_quality.json"}]
    report = merge(out, tmp_path / "results", repo=REPO_ROOT)  # a dry run's records and files are never merged
    assert report["pairs_quality_runs.jsonl"]["added"] == 0
    assert report["pairs_quality_runs.jsonl"]["dry_run"] == len(records)
    assert not (tmp_path / "results" / "queue_speed_gpu.json").exists()

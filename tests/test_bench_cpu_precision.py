"""eval/bench_cpu_precision.py: the peak arithmetic, the FLOP count of a tiny BERT against its formula,
the summary of a hand-built run log (speed ratios, the nDCG difference, FLOP rates worked out by
hand), a timing run of each precision on a tiny model, and a dry run end to end in a temporary folder."""

from __future__ import annotations

import argparse
import copy
import json
import logging

import datasets
import pytest
import torch
from bench_modules import load_bench

from contrastive_bert.data.beir import RetrievalData
from contrastive_bert.training import retrieval_runs


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_cpu_precision")


# --------------------------------------------------------------------------- the peak


def test_flops_per_cycle_by_the_cpus_flags(bench):
    amx = bench.flops_per_cycle({"avx2", "avx512f", "avx512_bf16", "amx_bf16"})
    assert (amx["fp32"]["flops_per_cycle"], amx["bf16"]["flops_per_cycle"]) == (64, 1024)
    vnni = bench.flops_per_cycle({"avx2", "avx512f", "avx512_bf16"})
    assert (vnni["fp32"]["flops_per_cycle"], vnni["bf16"]["flops_per_cycle"]) == (64, 128)
    avx2 = bench.flops_per_cycle({"avx2", "fma"})  # most users' CPUs: bf16 emulated, fp32's figure
    assert (avx2["fp32"]["flops_per_cycle"], avx2["bf16"]["flops_per_cycle"]) == (32, 32) and avx2["bf16"]["flag"] is None


def test_the_clock_and_the_peak(bench, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\ncpu MHz\t\t: 2600.000\n\nprocessor\t: 1\ncpu MHz\t\t: 2400.000\n")
    assert bench.cpu_clock_ghz(cpuinfo) == pytest.approx(2.5)
    assert bench.cpu_clock_ghz(tmp_path / "missing") is None
    block = {"cores": 2, "clock_ghz": 2.5, "per_core": bench.flops_per_cycle({"avx512f", "amx_bf16"})}
    assert bench.peak_gflops(block, "fp32") == pytest.approx(2 * 2.5 * 64)  # 320 GFLOP/s
    assert bench.peak_gflops(block, "bf16") == pytest.approx(2 * 2.5 * 1024)  # 5120 GFLOP/s
    assert bench.peak_gflops({**block, "clock_ghz": None}, "fp32") is None
    assert bench.machine(2, clock_ghz=3.0)["clock_source"] == "--clock-ghz"


# --------------------------------------------------------------------------- counting FLOPs


def _bert_formula(rows: int, length: int, training: bool, hidden: int = 32, intermediate: int = 64, layers: int = 2) -> tuple[int, int]:
    """The tiny BERT's FLOPs by hand: per layer Q, K, V, O projections (4 x 2 L H^2), the feed-forward
    (2 x 2 L H I), attention scores and mix (2 x 2 L^2 H); the pooler (2 H^2, its output unused: no
    backward). Backward: twice a linear layer's forward; attention's twice its forward in train mode
    (dropout: plain matrix products), 2.5 x in eval mode (torch's formula for the fused kernel)."""
    linear = layers * (4 * 2 * length * hidden**2 + 2 * 2 * length * hidden * intermediate)
    attention = layers * 2 * 2 * length**2 * hidden
    pooler = 2 * hidden**2
    forward = linear + attention + pooler
    return rows * forward, int(rows * (3 * linear + (3 if training else 3.5) * attention + pooler))


@pytest.mark.parametrize("training", [False, True])
def test_the_flop_count_of_a_tiny_bert_is_its_formula(bench, tiny_model, training):
    model = copy.deepcopy(tiny_model).train(training)
    assert bench.count_sequence_flops(model, 10) == _bert_formula(1, 10, training)
    assert bench.count_sequence_flops(model, 20) == _bert_formula(1, 20, training)


def test_the_counter_counts_steps_in_train_mode_and_encoding_in_eval_mode(bench, tiny_model):
    assert _bert_formula(1, 10, False) == (355328, 1074688)
    counter = bench.FlopCounter(tiny_model)
    assert counter.batches([(3, 10), (2, 20)], backward=True) == _bert_formula(3, 10, True)[1] + _bert_formula(2, 20, True)[1]
    assert counter.batches([(3, 10)], backward=False) == _bert_formula(3, 10, False)[0]
    assert counter.approximate([(3, 10)], backward=True) == 6 * counter.non_embedding_parameters * 30
    assert all(p.grad is None for p in tiny_model.parameters())  # counted on a copy


def test_a_padded_batch_counts_rows_times_one_sequence(bench, tiny_model):
    """The counted operations are linear in the rows: a batch of 3 (one row padded) counted at once
    equals 3 x one sequence of the padded length."""
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    features = tiny_model.preprocess(["a short one", "a somewhat longer sentence than that", "mid length text"])
    with FlopCounterMode(display=False, custom_mapping={aten._scaled_dot_product_flash_attention_for_cpu: bench._sdpa_forward}) as fc:
        tiny_model.eval()(features)
    assert fc.get_total_flops() == 3 * bench.count_sequence_flops(copy.deepcopy(tiny_model).eval(), features["attention_mask"].shape[1])[0]


# --------------------------------------------------------------------------- the summary of a hand-built log


def _machine(bench):
    return {"cores": 2, "clock_ghz": 2.5, "clock_source": "test", "cpu_count": 2,
            "per_core": bench.flops_per_cycle({"avx512f", "avx512_bf16", "amx_bf16"})}


def _timing(bench, precision, seconds, matmul):
    flops = [1.0e12, 1.2e12, 0.8e12, 1.0e12]
    return {"key": bench.timing_key(precision), "part": "timing", "precision": precision, "seed": 0, "steps": 4,
            "step_seconds": seconds, "step_flops": flops, "step_approx_6pt_flops": [0.9 * f for f in flops],
            "autocast": "bfloat16" if precision == "bf16" else None, "memory": {"kind": "rss", "peak_mb": 900.0, "training_mb": 400.0},
            "encoding": {"documents": 512, "seconds": 16.0 if precision == "fp32" else 4.0, "flops": 512 * 4.0e10, "tokens": 512 * 200},
            "matmul_gflops": matmul, "machine": _machine(bench), "load_average_1min": 0.5, "torch_threads": 2, "dry_run": False}


def _full(bench, precision, test, bf16_test, seconds):
    metrics = lambda v: {"ndcg_at_10": v, "map_at_100": 0.0, "mrr_at_10": 0.0, "recall_at_100": 0.0}
    return {"key": bench.run_key(precision, 0), "part": "full", "precision": precision, "seed": 0, "steps": 69, "train_rows": 747,
            "step_seconds": [10.0] * 69, "step_flops": [1.0e12] * 69, "train_seconds": seconds, "seconds_per_step": seconds / 69,
            "autocast": "bfloat16" if precision == "bf16" else None, "memory": {"kind": "rss", "peak_mb": 1000.0, "training_mb": 500.0},
            "dev": metrics(test + 1), "test": metrics(test), "general": {"stsb": 80.0},
            "bf16_encoding": {"dev": metrics(bf16_test + 1), "test": metrics(bf16_test)},
            "machine": _machine(bench), "load_average_15min": 1.0, "torch_threads": 2, "dry_run": False}


def test_summary_of_a_hand_built_log(bench):
    """fp32 steps 10, 4, 6, 5 s and bf16 3, 2, 2.5, 1.5 s, both at FLOPs 1.0, 1.2, 0.8, 1.0 TFLOP; the
    first step left out. fp32: median 5 s; 3.0 TFLOP / 15 s = 200 GFLOP/s, peak 2 x 2.5 x 64 = 320 ->
    0.625. bf16: median 2 s; 3.0 / 6 = 500 GFLOP/s, peak 2 x 2.5 x 1024 = 5120 -> 0.09765625. Speed
    ratio 5 / 2 = 2.5. Encoding: 512 documents of 40 GFLOP in 16 s (fp32: 32 a second, 1280 GFLOP/s... of
    a 320 peak: 4.0) and 4 s (128 a second, 5120 GFLOP/s, 1.0); ratio 4. Full runs: test 73.9 and
    73.6 -> -0.3, within 0.5: bf16 for auto. A dry run's record never counts."""
    records = [_timing(bench, "fp32", [10.0, 4.0, 6.0, 5.0], 160.0), _timing(bench, "bf16", [3.0, 2.0, 2.5, 1.5], 2560.0),
               _full(bench, "fp32", 73.9, 73.7, 1100.0), _full(bench, "bf16", 73.6, 73.6, 440.0),
               {**_full(bench, "bf16", 10.0, 10.0, 1.0), "key": "dry", "dry_run": True}]
    summary = bench.summarize(records)
    fp32, bf16 = summary["timing"]["fp32"], summary["timing"]["bf16"]
    assert fp32["median_step_seconds"] == 5.0 and bf16["median_step_seconds"] == 2.0 and fp32["steps_counted"] == 3
    assert fp32["flops_per_step"] == pytest.approx(1.0e12) and fp32["approx_6pt_over_counted"] == pytest.approx(0.9)
    assert fp32["gflops_per_second"] == pytest.approx(200.0) and fp32["peak_gflops"] == pytest.approx(320.0)
    assert fp32["fraction_of_peak"] == pytest.approx(0.625)
    assert bf16["gflops_per_second"] == pytest.approx(500.0) and bf16["fraction_of_peak"] == pytest.approx(500 / 5120)
    assert fp32["encoding"]["documents_per_second"] == pytest.approx(32.0) and fp32["encoding"]["flops_per_document"] == 4.0e10
    assert fp32["encoding"]["gflops_per_second"] == pytest.approx(1280.0) and fp32["encoding"]["tokens_per_document"] == 200
    assert bf16["encoding"]["fraction_of_peak"] == pytest.approx(1.0)
    assert fp32["matmul"]["fraction_of_peak"] == pytest.approx(0.5) and bf16["matmul"]["fraction_of_peak"] == pytest.approx(0.5)
    full = summary["full"]
    assert full["fp32"]["test"]["ndcg_at_10"] == 73.9 and full["fp32"]["gflops_per_second"] == pytest.approx(69e12 / 1100 / 1e9)
    comparison = summary["comparison"]
    assert comparison["step_speed_ratio"] == pytest.approx(2.5) and comparison["encoding_speed_ratio"] == pytest.approx(4.0)
    assert comparison["train_seconds_ratio"] == pytest.approx(2.5)
    assert comparison["bf16_minus_fp32_test_ndcg_at_10"] == pytest.approx(-0.3)
    assert comparison["bf16_encoding_minus_fp32_test_ndcg_at_10"] == pytest.approx({"fp32": -0.2, "bf16": 0.0})
    assert comparison["bf16_for_auto"] is True and not comparison["pending"]


def test_bf16_is_not_for_auto_when_it_loses_quality_or_speed(bench):
    timing = [_timing(bench, "fp32", [10.0, 4.0, 6.0, 5.0], 160.0), _timing(bench, "bf16", [3.0, 2.0, 2.5, 1.5], 2560.0)]
    worse = bench.summarize(timing + [_full(bench, "fp32", 73.9, 73.9, 1100.0), _full(bench, "bf16", 73.3, 73.3, 440.0)])
    assert worse["comparison"]["bf16_for_auto"] is False  # 0.6 points below
    slower = bench.summarize([_timing(bench, "fp32", [1.0, 1.0, 1.0, 1.0], 160.0), _timing(bench, "bf16", [3.0, 2.0, 2.5, 1.5], 2560.0),
                              _full(bench, "fp32", 73.9, 73.9, 1100.0), _full(bench, "bf16", 73.9, 73.9, 440.0)])
    assert slower["comparison"]["bf16_for_auto"] is False
    pending = bench.summarize(timing)
    assert pending["comparison"]["pending"] and pending["comparison"]["bf16_for_auto"] is None and pending["full"] == {}


def test_the_plan_is_each_precision_at_the_seed(bench):
    assert [(r.method, r.seed) for r in bench.grid([0]).plan({})] == [("fp32", 0), ("bf16", 0)]


def test_the_recipe_is_the_scifact_recipe_on_the_cached_rows(bench):
    recipe = bench.recipe_fields("bf16", 0, -1, 256, None)
    assert (recipe.loss, recipe.batch_size, recipe.epochs, recipe.learning_rate, recipe.max_seq_length) == ("mnrl", 32, 3, 5e-5, 256)
    assert recipe.mixed_precision == "bf16" and recipe.dev_task is None and recipe.eval_tasks == []


# --------------------------------------------------------------------------- runs on a tiny model


def _context(bench, rows: int = 80):
    data = RetrievalData(corpus={f"d{i}": f"document {i} about topic {i % 5}" for i in range(40)},
                         queries={"q0": "question 0"}, qrels={"train": {"q0": {"d0": 1}}})
    triplets = datasets.Dataset.from_dict({"anchor": [f"question {i} on topic {i % 7}" for i in range(rows)],
                                           "positive": [f"answer {i} on topic {i % 7}" for i in range(rows)],
                                           "negative": [f"an unrelated text {i}" for i in range(rows)]})
    args = argparse.Namespace(device="cpu", data_dir=None, dry_run=True, rows_cache=None)
    ctx = retrieval_runs.TrainingRows(args, bench.PROTOCOLS)
    ctx.rows[(bench.SETTING, bench.ROWS, "{}")] = (triplets, 0.0, False)
    ctx.data["scifact"] = data
    return ctx


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_timing_run_of_each_precision(bench, precision, monkeypatch, tiny_model):
    """Three optimizer steps of the recipe, timed and FLOP-counted step by step, in the precision
    asked (bf16: the forward under CPU autocast), then 16 documents encoded; nothing scored."""
    monkeypatch.setattr(retrieval_runs, "base_model", lambda device, name="default": copy.deepcopy(tiny_model))
    monkeypatch.setattr(retrieval_runs, "score", lambda *a: pytest.fail("timing scores nothing"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    record = bench.run_one(precision, 0, _context(bench), clock_ghz=2.5, timing_steps=3)
    assert record["part"] == "timing" and record["steps"] == 3 and len(record["step_seconds"]) == len(record["step_flops"]) == 3
    assert record["autocast"] == ("bfloat16" if precision == "bf16" else None)
    counter = bench.FlopCounter(tiny_model)
    # every step: 3 columns of 32 rows, each row costing one sequence of its batch's padded length
    for flops, tokens in zip(record["step_flops"], record["step_tokens"]):
        assert tokens % 32 == 0 and flops >= 32 * 3 * counter.sequence(2, True)[1]
    assert record["encoding"]["documents"] == 16 and record["encoding"]["flops"] > 0
    assert record["encoding"]["autocast"] == ("bfloat16" if precision == "bf16" else None)
    assert record["machine"]["clock_ghz"] == 2.5 and record["matmul_gflops"] > 0
    entry = bench.timing_entry({**record, "key": bench.timing_key(precision)})
    assert entry["fraction_of_peak"] > 0 and entry["encoding"]["fraction_of_peak"] > 0


def _scifact_stand_in(folder, words: list[str]) -> None:
    """400 documents of 4 random words, 110 claims each its document's words reversed (so that even
    a random model ranks the positive first and the miner finds negatives), 100 train, 10 test."""
    import random

    rng = random.Random(0)
    documents = [" ".join(rng.sample(words, 4)) for _ in range(400)]
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n"
                                                 for i, text in enumerate(documents)))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": " ".join(reversed(documents[i].split()))}) + "\n"
                                                  for i in range(110)))
    header = "query-id\tcorpus-id\tscore\n"
    (folder / "qrels" / "train.tsv").write_text(header + "".join(f"q{i}\td{i}\t1\n" for i in range(100)))
    (folder / "qrels" / "test.tsv").write_text(header + "".join(f"q{i}\td{i}\t1\n" for i in range(100, 110)))


def test_a_dry_run_end_to_end_writes_only_to_the_temporary_folder(bench, tmp_path, monkeypatch, tiny_loader, tiny_model):
    """``--dry-run --timing`` then ``--dry-run``: a SciFact stand-in mined, trained 2 steps per
    precision, scored; results in the temporary folder, eval/results untouched."""
    from contrastive_bert.inference import general_ability

    _scifact_stand_in(tmp_path / "data" / "scifact", sorted(w for w in tiny_model.tokenizer.vocab if w.isalpha() and len(w) > 4))
    monkeypatch.setattr(general_ability, "general_ability", lambda model, data_dir=None, max_rows=None: {"stsb": 0.0})
    monkeypatch.setattr(bench.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    before = {p.name: p.stat().st_mtime_ns for p in bench.RESULTS.glob("cpu_precision*")}
    common = ["--dry-run", "--threads", "1", "--data-dir", str(tmp_path / "data"), "--rows-cache", "none", "-q"]
    for variable in ("TQDM_DISABLE", "HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.setenv(variable, "1")  # what -q sets, undone after the test
    loggers = [logging.getLogger(name) for name in ("", "transformers", "sentence_transformers", "datasets", "mteb", "urllib3",
                                                    "filelock", "httpx", "faiss")]
    levels = [logger.level for logger in loggers]
    try:
        assert bench.main([*common, "--timing"]) == 0
        assert bench.main(common) == 0
    finally:  # -q set the process's logging to errors only: later tests' caplog must see warnings again
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
    scratch = tmp_path / "bench_cpu_precision_dry_run"
    written = json.loads((scratch / "cpu_precision.json").read_text())
    assert written["dry_run"] and set(written["timing"]) == set(written["full"]) == {"fp32", "bf16"}
    assert written["full"]["bf16"]["autocast"] == "bfloat16" and written["full"]["fp32"]["steps"] == 2
    assert written["timing"]["bf16"]["steps_counted"] == 1  # 2 steps, the first not counted
    assert written["comparison"]["bf16_for_auto"] in (True, False)
    keys = [json.loads(line)["key"] for line in (scratch / "cpu_precision_runs.jsonl").read_text().splitlines()]
    assert keys == ["timing/fp32", "timing/bf16", "full/fp32/0", "full/bf16/0"]
    assert {p.name: p.stat().st_mtime_ns for p in bench.RESULTS.glob("cpu_precision*")} == before

"""The offline bundle's ``multi_gpu`` block (eval/bench_multi_gpu.py): with fewer GPUs than processes
it says why and writes nothing (the bundle goes on); its CPU dry run trains through
``torchrun -m contrastive_bert.cli train`` on 2 gloo processes and encodes with 2 pool processes."""

from __future__ import annotations

import json

import pytest
import torch

from bench_modules import load_bench
from conftest import REPO_ROOT, SHARED_DATA


def test_the_block_runs_the_script_with_two_processes():
    blocks = {block["name"]: block for block in json.loads((REPO_ROOT / "scripts" / "offline" / "blocks.json").read_text())["blocks"]}
    block = blocks["multi_gpu"]
    assert (REPO_ROOT / "eval" / block["script"]).is_file() and block["args"] == ["--nproc", "2"]
    assert block["run_log"] is None and block["output"] == "multi_gpu.json" and block["work_dir_flag"] == "--work-dir"


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="this machine has two GPUs: the block would run")
def test_fewer_gpus_than_processes_is_skipped_with_a_message(tmp_path, capsys):
    bench = load_bench("bench_multi_gpu")
    output = tmp_path / "multi_gpu.json"
    assert bench.main(["--device", "cuda", "--nproc", "2", "--output", str(output), "--work-dir", str(tmp_path / "w")]) == 0
    assert f"skipped: needs 2 GPUs for 2 processes, this machine has {torch.cuda.device_count()}" in capsys.readouterr().out
    assert not output.exists()
    with pytest.raises(SystemExit, match="--nproc: expected at least 2"):
        bench.main(["--device", "cpu", "--nproc", "1"])
    with pytest.raises(SystemExit, match="--device cpu: only with --dry-run"):
        bench.main(["--device", "cpu", "--output", str(output)])


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "stsb").is_dir(), reason="needs the shared data sets")
def test_cpu_dry_run_trains_under_torchrun_and_encodes_on_two_processes(_tiny_model_session, tmp_path, monkeypatch):
    _tiny_model_session.save(str(tmp_path / "tiny"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    bench = load_bench("bench_multi_gpu")
    output = tmp_path / "multi_gpu.json"
    assert bench.main(["--dry-run", "--device", "cpu", "--threads", "1", "--model", str(tmp_path / "tiny"),
                       "--data-dir", str(SHARED_DATA), "--output", str(output), "--work-dir", str(tmp_path / "w")]) == 0
    written = json.loads(output.read_text())
    assert written["setup"]["dry_run"] is True and "environment" in written
    one, ddp = written["training"]["one"], written["training"]["ddp"]
    assert one["returncode"] == ddp["returncode"] == 0, (one.get("log_tail"), ddp.get("log_tail"))
    assert (one["processes"], ddp["processes"]) == (1, 2) and one["global_step"] == ddp["global_step"] == 2
    assert "torch.distributed.run --standalone --nproc_per_node 2 -m contrastive_bert.cli train" in ddp["command"]
    encoding = written["encoding"]
    assert encoding["documents"] == 64 and encoding["several"]["devices"] == ["cpu", "cpu"]
    assert encoding["max_abs_difference"] < 1e-5

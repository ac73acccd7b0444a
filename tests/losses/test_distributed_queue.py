"""Two CPU processes under torchrun (gloo): the queue and the dual bank are identical on both ranks,
training completes, and under gradient accumulation the dual bank counts optimizer steps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


def test_two_process_queue_is_identical_and_training_completes(tiny_model, tmp_path):
    model_dir = tmp_path / "tiny"
    tiny_model.save(str(model_dir))
    worker = Path(__file__).with_name("distributed_queue_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(worker), str(model_dir), str(tmp_path)]
    try:
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as error:  # a hang is a failure, with what it printed
        pytest.fail(f"torchrun timed out: {error.stderr}")
    assert result.returncode == 0, result.stderr[-4000:]

    direct = [torch.load(tmp_path / f"queue_direct_{r}.pt") for r in (0, 1)]
    for key in direct[0]:
        assert torch.equal(direct[0][key], direct[1][key]), key
    assert int(direct[0]["queue_fill"]) == 16  # 3 steps x (3 + 4) rows = 21 > 16: wrapped
    assert int(direct[0]["queue_ptr"]) == 21 % 16
    ids = set(direct[0]["queue_ids"].tolist())
    assert any(i >= 100 and i % 1000 >= 100 for i in ids) and any(i % 1000 < 100 for i in ids)  # both ranks' rows

    trained = [torch.load(tmp_path / f"queue_train_{r}.pt", weights_only=False) for r in (0, 1)]
    assert trained[0]["num_steps"] == trained[1]["num_steps"] == 3
    q0, q1 = trained[0]["queue"], trained[1]["queue"]
    assert int(q0["queue_fill"]) == 3 * 4 * 2  # 3 steps x 4 rows x 2 ranks, gathered
    for key in q0:
        assert torch.equal(q0[key], q1[key]), key

    bank = [torch.load(tmp_path / f"bank_direct_{r}.pt") for r in (0, 1)]
    for key in bank[0]:
        assert torch.equal(bank[0][key], bank[1][key]), key
    assert int(bank[0]["bank_fill"]) == 16 and int(bank[0]["bank_ptr"]) == 21 % 16  # 3 x (3 + 4) rows into 16
    assert {i // 100 % 10 for i in bank[0]["bank_anchor_ids"].tolist()} == {0, 1}  # both ranks' rows

    # 3 optimizer steps of 2 micro-batches of 4 rows on 2 ranks: the FIFO bank holds 3 x 2 x 4 x 2 = 48
    # gathered rows, the same on both ranks; the per-step bank is empty after each optimizer step
    fifo = [torch.load(tmp_path / f"dual_fifo_{r}.pt", weights_only=False) for r in (0, 1)]
    assert fifo[0]["num_steps"] == fifo[1]["num_steps"] == 3
    assert int(fifo[0]["bank"]["bank_fill"]) == 48
    for key in fifo[0]["bank"]:
        assert torch.equal(fifo[0]["bank"][key], fifo[1]["bank"][key]), key
    step = [torch.load(tmp_path / f"dual_step_{r}.pt", weights_only=False) for r in (0, 1)]
    assert step[0]["num_steps"] == step[1]["num_steps"] == 3
    assert int(step[0]["bank"]["bank_fill"]) == int(step[1]["bank"]["bank_fill"]) == 0

"""Small shared pieces of the benchmark scripts in ``eval/``: seeds, mean/std, result files."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch


def mean_std(values: list[float]) -> dict[str, float]:
    """``{"mean", "std", "values"}`` of per-seed scores (sample std; 0 for one value)."""
    if not values:
        raise ValueError("values: expected at least one score")
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": list(values),
    }


def environment() -> dict[str, object]:
    """Where a benchmark ran: numbers are only comparable on the same machine."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch": torch.__version__,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
    }


def write_results(path: str | Path, payload: dict) -> Path:
    """Write ``payload`` (plus the environment) as pretty JSON, creating the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**payload, "environment": environment()}, indent=2, allow_nan=False))
    return path

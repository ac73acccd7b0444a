"""Result files of the benchmarks: per-seed mean/std, where a run ran, and atomic JSON writing.

A results file is written to a temporary file in the same folder and renamed over the old one, so
a killed benchmark never leaves half a JSON file; non-finite numbers are refused (``allow_nan=False``)
because ``NaN`` is not JSON and would break every reader but Python's.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def mean_std(values: list[float]) -> dict[str, float]:
    """``{"mean", "std", "values"}`` of per-seed scores (sample std; 0 for one value)."""
    if not values:
        raise ValueError("values: expected at least one score")
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "values": list(values),
    }


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def environment(device: str | None = None) -> dict[str, object]:
    """Where a benchmark ran: numbers are only comparable on the same machine.

    ``device``: the torch device the benchmark used (default: ``cuda`` when one is visible, else
    ``cpu``); ``gpu`` names the CUDA device (None on CPU)."""
    import torch

    cuda = torch.cuda.is_available()
    device = str(device) if device else ("cuda" if cuda else "cpu")
    gpu = None
    if cuda and device.startswith("cuda"):
        index = torch.device(device).index
        gpu = torch.cuda.get_device_name(index if index is not None else torch.cuda.current_device())
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "torch": torch.__version__,
        "device": device,
        "gpu": gpu,
        "cuda": torch.version.cuda if cuda else None,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sentence_transformers": _version("sentence-transformers"),
        "transformers": _version("transformers"),
    }


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as None, numpy scalars/arrays as Python numbers/lists,
    tuples as lists and paths as strings: what a run record may hold before it is logged."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # numpy / torch scalars and arrays
        return json_safe(value.tolist())
    return str(value)


def write_json(path: str | Path, payload: Any, indent: int = 2) -> Path:
    """Write ``payload`` as JSON atomically (temporary file + rename), creating the folder.
    ``ValueError("payload: ...")`` for a non-finite number or a value JSON cannot hold; the old
    file is then left as it was."""
    path = Path(path)
    try:
        text = json.dumps(payload, indent=indent, allow_nan=False)
    except (ValueError, TypeError) as error:
        raise ValueError(f"payload: expected finite numbers and JSON types only for {path.name} ({error})") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_results(path: str | Path, payload: dict, device: str | None = None, indent: int = 2) -> Path:
    """Write ``payload`` plus ``"environment"`` (see :func:`environment`) as pretty JSON, atomically:
    every results file of ``eval/`` is written through here (``payload``'s own ``"environment"``,
    if any, is replaced). A file already holding the same results is left untouched, environment
    included: a benchmark restarted with nothing left to run does not re-date (or dirty) its results."""
    if not isinstance(payload, dict):
        raise ValueError(f"payload: expected a dict, got {type(payload).__name__}")
    if _holds(path, payload):
        return Path(path)
    return write_json(path, {**payload, "environment": environment(device)}, indent=indent)


def _holds(path: str | Path, payload: dict) -> bool:
    """Whether the JSON file at ``path`` holds ``payload`` as it would be written (``"environment"`` aside
    on both sides); False for a payload JSON cannot hold, so :func:`write_json` raises on it."""
    def results(value: dict) -> dict:
        return {key: item for key, item in value.items() if key != "environment"}

    try:
        wanted = json.loads(json.dumps(results(payload), allow_nan=False))
        existing = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError):
        return False
    return isinstance(existing, dict) and results(existing) == wanted

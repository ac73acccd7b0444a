"""Merge run logs brought back from another machine (an offline GPU run) into the local results.

``python -m contrastive_bert.benchmarking merge OUT_DIR eval/results/`` appends every record of
``OUT_DIR/*.jsonl`` whose key is not yet in the run log of the same name under the destination
(records of a ``--dry-run`` are never merged), then rebuilds each benchmark's results JSON from
the merged log with the benchmark's own ``--summary-only``, as listed in ``OUT_DIR/manifest.json``
(written by the offline bundle's runner: ``{"benchmarks": [{"script", "run_log", "output"}],
"files": [...], "dry_run": bool}``). The ``files`` (results of benchmarks without a run log, e.g.
``queue_speed_gpu.json``) are copied over the destination's, except from a dry run.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

from contrastive_bert.benchmarking.run_log import RunLog

logger = logging.getLogger(__name__)
MANIFEST = "manifest.json"


def merge_run_log(source: str | Path, destination: str | Path) -> dict[str, int]:
    """Append the records of run log ``source`` whose keys ``destination`` lacks; counts of
    ``added``, ``present`` (key already there: the local record is kept) and ``dry_run`` (skipped)."""
    incoming, target = RunLog(source), RunLog(destination)
    counts = {"added": 0, "present": 0, "dry_run": 0}
    for record in incoming.records():
        if record.get("dry_run"):
            counts["dry_run"] += 1
        elif target.done(record["key"]):
            counts["present"] += 1
        else:
            target.append(record["key"], record)
            counts["added"] += 1
    return counts


def read_manifest(folder: Path) -> dict:
    """``folder/manifest.json`` (``{"benchmarks": [], "files": [], "dry_run": False}`` without one)."""
    path = folder / MANIFEST
    manifest = {"benchmarks": [], "files": [], "dry_run": False}
    if path.is_file():
        manifest.update(json.loads(path.read_text(encoding="utf-8")))
    for entry in manifest["benchmarks"]:
        missing = {"script", "run_log", "output"} - set(entry)
        if missing:
            raise ValueError(f"{path}: benchmark entry {entry} lacks {sorted(missing)}")
    return manifest


def merge(source_dir: str | Path, destination_dir: str | Path, repo: str | Path = ".", summarise: bool = True) -> dict[str, dict]:
    """Merge every ``*.jsonl`` of ``source_dir`` into ``destination_dir`` and rebuild the results
    JSON of each benchmark in the manifest whose log changed (``repo``: where its scripts are)."""
    source_dir, destination_dir, repo = Path(source_dir), Path(destination_dir), Path(repo)
    if not source_dir.is_dir():
        raise ValueError(f"source_dir: expected a folder of run logs, got {source_dir}")
    logs = sorted(source_dir.glob("*.jsonl"))
    if not logs and not (source_dir / MANIFEST).is_file():
        raise ValueError(f"source_dir: no run logs (*.jsonl) nor {MANIFEST} in {source_dir}")
    destination_dir.mkdir(parents=True, exist_ok=True)
    report = {}
    for log in logs:
        report[log.name] = merge_run_log(log, destination_dir / log.name)
        logger.info("%s: %s", log.name, report[log.name])
    manifest = read_manifest(source_dir)
    for name in manifest["files"]:
        source = source_dir / Path(name).name
        if manifest["dry_run"] or not source.is_file():
            report[Path(name).name] = {"copied": False}
            continue
        shutil.copyfile(source, destination_dir / source.name)
        report[source.name] = {"copied": True}
    if summarise:
        for entry in manifest["benchmarks"]:
            name = Path(entry["run_log"]).name
            if report.get(name, {}).get("added"):
                command = [sys.executable, str(repo / entry["script"]), "--summary-only",
                           "--run-log", str(destination_dir / name), "--output", str(destination_dir / Path(entry["output"]).name)]
                logger.info("re-summarising: %s", " ".join(command))
                subprocess.run(command, check=True, cwd=repo)
                report[name]["summarised"] = True
    return report

"""Run benchmark blocks of the offline bundle one after another within one wall-clock limit.

Called by the bundle's ``run.sh`` (which sets PYTHONPATH, the data folder and the default model):
``python run_blocks.py --src SRC --out OUT --minutes 9 --blocks queue_speed,pairs_quality``.
Each block is one ``eval/`` script run as a subprocess with ``--device``, ``--max-minutes`` (its
share of the time left; what a block does not use passes to the next) and a hard timeout a little
above that; a resumable block appends to its run log in OUT (seeded from the bundle's copy of
the repository's run log, so runs done before are skipped). OUT ends with the run logs, the
results JSONs, one ``<block>.log`` per block, ``manifest.json`` (what ``python -m
contrastive_bert.benchmarking merge OUT eval/results/`` reads) and ``timing.json`` (seconds per
block: the expected times of the bundle's README).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

GRACE_SECONDS = 45  # past a block's share before it is killed (a run log survives a kill)
MARGIN_MINUTES = 0.25  # kept back from each block's --max-minutes for start-up and the summary


def load_blocks(path: Path) -> dict[str, dict]:
    return {block["name"]: block for block in json.loads(path.read_text(encoding="utf-8"))["blocks"]}


def block_command(block: dict, args, minutes: float, scratch: Path) -> list[str]:
    command = [sys.executable, str(args.src / "eval" / block["script"]), *block["args"],
               "--device", args.device, "--threads", str(args.threads), "--max-minutes", f"{max(minutes, 0.1):.2f}",
               "--output", str(args.out / block["output"])]
    if block["run_log"]:
        command += ["--run-log", str(args.out / block["run_log"])]
    if block.get("work_dir_flag"):
        command += [block["work_dir_flag"], str(scratch / block["name"])]
    if args.dry_run:
        command += ["--dry-run", *block.get("dry_run_args", [])]
    return command


def count_lines(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()) if path.is_file() else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, required=True, help="the repository copy (holds eval/ and scripts/offline/)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the run logs and results to copy back")
    parser.add_argument("--results", type=Path, default=None, help="the bundle's copy of eval/results run logs (seed OUT)")
    parser.add_argument("--blocks", required=True, help="comma-separated block names, in order")
    parser.add_argument("--minutes", type=float, required=True, help="wall-clock limit for all blocks together")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--dry-run", action="store_true", help="each block with --dry-run (two steps per run; CI)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    known = load_blocks(args.src / "scripts" / "offline" / "blocks.json")
    names = [name.strip() for name in args.blocks.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise SystemExit(f"--blocks: unknown {unknown}; known: {', '.join(known)}")
    if args.minutes <= 0:
        raise SystemExit(f"--minutes: expected a positive number, got {args.minutes}")
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = args.out.parent / f".{args.out.name}_scratch"
    manifest = {"dry_run": args.dry_run, "device": args.device, "minutes": args.minutes, "benchmarks": [], "files": []}
    timing: dict[str, dict] = {}
    for index, name in enumerate(names):
        block = known[name]
        if block["run_log"]:
            seed = (args.results / block["run_log"]) if args.results else None
            target = args.out / block["run_log"]
            if seed is not None and seed.is_file() and not target.exists() and not args.dry_run:
                shutil.copyfile(seed, target)
            manifest["benchmarks"].append({"script": f"eval/{block['script']}", "run_log": block["run_log"], "output": block["output"]})
        else:
            manifest["files"].append(block["output"])
        left = args.minutes * 60 - (time.monotonic() - start)
        shares = [known[n]["share"] for n in names[index:]]
        budget = left * block["share"] / sum(shares)
        if budget < 20:
            timing[name] = {"skipped": f"{left:.0f} s left"}
            continue
        command = block_command(block, args, budget / 60 - MARGIN_MINUTES, scratch)
        before = count_lines(args.out / block["run_log"]) if block["run_log"] else 0
        began = time.monotonic()
        print(f"[run_blocks] {name}: {budget:.0f} s: {' '.join(command)}", flush=True)
        with (args.out / f"{name}.log").open("w", encoding="utf-8") as log:
            try:
                code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=budget + GRACE_SECONDS).returncode
                timed_out = False
            except subprocess.TimeoutExpired:
                code, timed_out = None, True
        seconds = time.monotonic() - began
        timing[name] = {"seconds": round(seconds, 1), "budget_seconds": round(budget, 1), "returncode": code,
                        "killed_at_timeout": timed_out,
                        "new_runs": (count_lines(args.out / block["run_log"]) - before) if block["run_log"] else None}
        print(f"[run_blocks] {name}: {timing[name]}", flush=True)
        (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        (args.out / "timing.json").write_text(json.dumps(timing, indent=1) + "\n")
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (args.out / "timing.json").write_text(json.dumps(timing, indent=1) + "\n")
    shutil.rmtree(scratch, ignore_errors=True)
    failed = [n for n, t in timing.items() if t.get("returncode") not in (0, None) and not t.get("killed_at_timeout")]
    print(f"[run_blocks] done in {time.monotonic() - start:.0f} s; out: {args.out}" + (f"; FAILED: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

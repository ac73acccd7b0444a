"""Every results file carries its environment block, and every benchmark writes its results
through ``contrastive_bert.benchmarking.write_results`` (which adds it)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Writing a file other than through write_results (RunLog appends its own log; figures are PNGs).
OTHER_WRITERS = re.compile(r"\bwrite_json\(|\bjson\.dump\(|\.write_text\(|open\([^)]*['\"]w")
# Scripts of eval/ that write no results file, and why.
NOT_BENCHMARKS = {"profile_early_exit.py": "a profile of one call, printed (or written to a path given), not a results file"}
# Scripts that also write a cache of their own inputs or their own work state (never under eval/results/), and what it is.
CACHE_WRITERS = {"bench_scale.py": "base.json beside its encoded documents under ~/.cache (--cache-dir), not a results file",
                 "bench_recipes.py": "DIR.bench_recipes.json beside an unfinished run's folder under --work-dir (what its "
                                     "restart continues with --resume; removed when the run ends), not a results file"}


def _tracked_scripts() -> list[Path]:
    """eval/*.py under version control (a script still being written in the tree is not judged)."""
    try:
        names = subprocess.run(["git", "ls-files", "eval/*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return sorted((ROOT / "eval").glob("*.py"))
    return [ROOT / name for name in names if (ROOT / name).is_file()]


def test_every_results_file_has_an_environment_block():
    missing = []
    for path in sorted((ROOT / "eval" / "results").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("environment"), dict):
            missing.append(path.name)
    assert not missing, f"results without an environment block: {missing}"


def test_every_benchmark_writes_its_results_through_write_results():
    scripts = _tracked_scripts()
    assert scripts
    writers = [path.name for path in scripts if "write_results(" in path.read_text(encoding="utf-8")]
    others = [path.name for path in scripts
              if path.name not in NOT_BENCHMARKS and path.name not in CACHE_WRITERS
              and OTHER_WRITERS.search(path.read_text(encoding="utf-8"))]
    assert not others, f"these write files other than through write_results: {others}"
    for name in ("bench_acl.py", "bench_zero_shot.py", "bench_multi_exit.py", "bench_pairs_quality.py"):
        assert name in writers

"""The rendered docs show the same figures before and after the benchmarks moved onto the shared
protocol (contrastive_bert.benchmarking.protocol) and its one result shape (issue 29).

``tests/fixtures/rendered_figures.json`` holds, per section of docs/results.md and
docs/results_archive.md and per README block, the numbers the renderer wrote from the results
files of the run logs it names (their SHA-256), captured before the change. While those logs are
unchanged, rendering now must give the same numbers in the same order. Once a benchmark appends
runs the figures may move: the test then skips, naming the log; re-capture with
``PYTHONPATH=scripts python tests/test_docs_same_figures.py --write`` (pytest puts scripts/ on the path itself: pyproject.toml). Only the sections of the migrated benchmarks
(pairs, ACL, zero-shot) are compared.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "rendered_figures.json"
RUN_LOGS = ("acl_quality_runs.jsonl", "pairs_quality_runs.jsonl", "zero_shot_runs.jsonl")
# The sections drawn from the benchmarks on the shared protocol (the others are not on it).
SECTIONS = ("## Pairs: answer selection and STS", "## ACL on labelled data", "## Zero-shot on unseen intents",
            "## ACL at 40 steps")
OTHER_ROWS = ("| SciFact", "| NFCorpus")  # README rows of the retrieval benchmark (plans on the protocol, keeps its own result shape)
NUMBER = re.compile(r"[-+−]?\d[\d,]*(?:\.\d+)?%?")


def _renderer():
    """scripts/render_docs.py and its README blocks (render_readme.py), imported from scripts/."""
    import render_docs
    import render_readme

    return render_docs, render_readme


def _sections(text: str) -> dict[str, list[str]]:
    """Numbers per ``## `` section (the text before the first heading: ``""``)."""
    sections: dict[str, list[str]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line.strip()
        sections.setdefault(heading, []).extend(NUMBER.findall(line))
    return {k: v for k, v in sections.items() if k in SECTIONS}


def figures() -> dict[str, dict[str, list[str]]]:
    render_docs, render_readme = _renderer()
    results = render_docs.Results(ROOT / "eval" / "results")
    pages = {name: _sections(render_docs.render_results_page(f"{name}.in", results))
             for name in ("results.md", "results_archive.md")}
    pages["README.md"] = {f"{begin} ... {end}": [n for line in render(results).splitlines() if not line.startswith(OTHER_ROWS)
                                                 for n in NUMBER.findall(line)]
                          for (begin, end), render in render_readme.README_BLOCKS.items()
                          if begin != render_readme.MEMORY_BEGIN}  # the memory-budget grid is not a migrated benchmark
    return pages


def log_hashes() -> dict[str, str]:
    return {name: hashlib.sha256((ROOT / "eval" / "results" / name).read_bytes()).hexdigest() for name in RUN_LOGS}


def test_rendered_docs_show_the_figures_captured_before_the_shared_protocol():
    fixture = json.loads(FIXTURE.read_text(encoding="utf-8"))
    changed = [name for name, digest in log_hashes().items() if fixture["run_logs"].get(name) != digest]
    if changed:
        pytest.skip(f"run logs changed since the figures were captured: {', '.join(changed)}")
    now = figures()
    for page, sections in fixture["figures"].items():
        assert list(now[page]) == list(sections), page
        for section, numbers in sections.items():
            assert now[page][section] == numbers, f"{page}: {section}"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps({"run_logs": log_hashes(), "figures": figures()}, indent=1, ensure_ascii=False) + "\n",
                       encoding="utf-8")
    print(f"wrote {FIXTURE.relative_to(ROOT)}")

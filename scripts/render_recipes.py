"""The recipes' comments from their templates: ``scripts/recipes/comments/NAME.in`` is the leading
comment block of ``scripts/recipes/NAME.yaml`` with its figures as template values, so a recipe's
figures come from eval/results/*.json as the README's do. ``render_recipes`` writes each template over
the recipe's leading ``#`` lines and leaves the settings below them as they are (called by
scripts/render_docs.py; tests/test_docs_current.py fails on a stale recipe).

Besides the pages' ``{{v FILE PATH}}`` and ``{{d FILE PATH FILE PATH}}`` (scripts/render_docs.py), a
recipe's template has:

- ``{{claim METRIC FILE PATH}}``: the claim line eval/bench_recipes.py checks,
  ``METRIC VALUE (eval/results/FILE.json PATH)``: METRIC a path into what the run writes (e.g.
  ``after.stsb.main_score``), VALUE the figure at PATH (``mean ± std`` for a record over seeds);
- ``{{run}}``: what the recipe's own run reached (eval/results/recipes.json, written by
  eval/bench_recipes.py), beside its claims, or that it has not run yet.

The pages' ``{{table recipes}}`` and ``{{table recipes_summary}}`` (docs/results.md, the README) show every
recipe's run from the same file: each claim, the figure reached, the verdict, minutes and peak memory.
"""

from __future__ import annotations

import re
from pathlib import Path

from render_values import Results, fmt, lookup, table

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "scripts" / "recipes"
COMMENTS = RECIPES / "comments"
CLAIM = re.compile(r"\{\{\s*claim\s+(\S+)\s+(\S+)\s+(\S+)\s*\}\}")
RUN = re.compile(r"\{\{\s*run\s*\}\}")
RUN_SOURCE = "eval/results/recipes.json"


def claim_text(metric: str, stem: str, path: str, results: Results) -> str:
    """``METRIC VALUE (eval/results/STEM.json PATH)``: the claim line's figure, read from its file."""
    return f"{metric} {fmt(lookup(results[stem], path))} (eval/results/{stem}.json {path})"


def _points(value: float) -> str:
    return f"{value:+.2f}"


def _unclaimed_figure(entry: dict) -> dict | None:
    """The run's trained figure where no claim covers it (the quickstart claims only its untrained score)."""
    figure = entry.get("test_figure") or {}
    if figure.get("metric") and figure["metric"] not in {c["metric"] for c in entry["claims"]}:
        return figure
    return None


def _minutes(run: dict) -> str:
    """A run's training minutes; a run continued with ``--resume`` from a checkpoint that carried no
    training seconds (written before the training clock) timed only its last part, and says so."""
    minutes = f"{run['train_seconds'] / 60:.0f} min"
    return f"{minutes} (last part only: resumed)" if run.get("resumed") and run.get("train_seconds_before_resume") is None else minutes


def run_text(name: str, results: Results) -> str:
    """The recipe's own run from recipes.json: each claimed figure it reached, its difference from the
    claim and the verdict (``ok``/``defect``), the seed, training minutes and peak memory; or that it
    has not run yet."""
    entry = results["recipes"]["recipes"].get(name) if results.has("recipes") else None
    run = (entry or {}).get("run")
    if not run:
        return f"not run yet ({RUN_SOURCE})"
    if entry["claims"]:
        figures = "; ".join(f"{c['metric']} {fmt(c['measured'])} ({_points(c['difference'])} against its claim: {c['verdict']})"
                            if c["measured"] is not None else f"{c['metric']} not written by the run ({c['verdict']})"
                            for c in entry["claims"])
        figure = _unclaimed_figure(entry)
        if figure:
            figures += f"; trained: {figure['metric']} {fmt(figure['value'])} (no claim)"
    else:
        figure = entry["test_figure"] or {}
        figures = f"{figure.get('metric')} {fmt(figure.get('value'))}"
    cost = f"{_minutes(run)} of training" if run.get("train_seconds") is not None else "training time not written"
    return f"{figures}; seed {run['seed']}, {cost}, peak memory {run['peak_rss_mb'] / 1024:.1f} GiB ({RUN_SOURCE})"


def render_comment(template: str, name: str, results: Results) -> str:
    """A recipe's comment block from its template (every line a ``#`` comment)."""
    from render_docs import render_template  # the pages' {{v}} and {{d}}; imported here, as render_docs imports this module

    text = CLAIM.sub(lambda m: claim_text(m.group(1), m.group(2), m.group(3), results), template)
    text = RUN.sub(lambda m: run_text(name, results), text)
    text = render_template(text, results)
    lines = text.rstrip("\n").split("\n")
    stray = [line for line in lines if not line.startswith("#")]
    if stray:
        raise ValueError(f"template: scripts/recipes/comments/{name}.in: every line must be a '#' comment, got {stray[0]!r}")
    note = f"# (This comment is rendered from scripts/recipes/comments/{name}.in by scripts/render_docs.py: edit that file.)"
    return "\n".join([*lines, note]) + "\n"


def split_header(text: str) -> tuple[str, str]:
    """A recipe's text as ``(its leading '#' lines, the rest)``."""
    lines = text.splitlines(keepends=True)
    count = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "".join(lines[:count]), "".join(lines[count:])


def render_recipes(results: Results, recipes: Path = RECIPES) -> dict[Path, str]:
    """``scripts/recipes/NAME.yaml`` -> its text with the comment rendered from ``comments/NAME.in``
    (recipes without a template are left out); ``ValueError`` for a template without its recipe."""
    pages = {}
    for template in sorted((recipes / "comments").glob("*.in")):
        recipe = recipes / f"{template.stem}.yaml"
        if not recipe.is_file():
            raise ValueError(f"template: {template.name} has no recipe {recipe.name} beside it")
        _, settings = split_header(recipe.read_text(encoding="utf-8"))
        pages[recipe] = render_comment(template.read_text(encoding="utf-8"), template.stem, results) + settings
    return pages


def _claim_rows(name: str, entry: dict) -> list[list[str]]:
    """One table row per claim of a recipe (a recipe without a claim: one row with its figure)."""
    run = entry.get("run") or {}
    cost = [_minutes(run) if run.get("train_seconds") is not None else "",
            f"{run['peak_rss_mb'] / 1024:.1f} GiB" if run.get("peak_rss_mb") is not None else ""]
    recipe = f"[`{name}.yaml`](../scripts/recipes/{name}.yaml)"
    if not run:
        return [[recipe, "", "", "not run yet", "", "not run", "", ""]]
    if not entry["claims"]:
        figure = entry.get("test_figure") or {}
        return [[recipe, f"`{figure.get('metric')}`", "none", fmt(figure.get("value")), "", "no claim", *cost]]
    rows = []
    for i, claim in enumerate(entry["claims"]):
        verdict = claim["verdict"] + (f" (corrected: {entry['corrected']})" if claim["verdict"] == "defect" and entry.get("corrected") else "")
        measured = fmt(claim["measured"]) if claim["measured"] is not None else "not written"
        difference = _points(claim["difference"]) if claim["difference"] is not None else ""
        source = Path(claim["source"]).name
        rows.append([recipe if i == 0 else "", f"`{claim['metric']}`", f"{claim['typed']} (`{source}`)", measured,
                     difference, verdict, *(cost if i == 0 else ["", ""])])
    figure = _unclaimed_figure(entry)
    if figure:
        rows.append(["", f"`{figure['metric']}`", "none", fmt(figure["value"]), "", "no claim", "", ""])
    return rows


def table_recipes(results: Results) -> str:
    """Every shipped recipe run once as written (eval/bench_recipes.py -> recipes.json): each claimed
    figure, what the run reached, the difference, the verdict, training minutes and peak memory."""
    header = ["recipe", "figure", "claim (its source)", "run as written", "difference", "verdict", "training", "peak memory"]
    return table(header, [row for name, entry in sorted(results["recipes"]["recipes"].items()) for row in _claim_rows(name, entry)])


def table_recipes_summary(results: Results) -> str:
    """One sentence on recipes.json: how many recipes ran, how many claims held, which fell short or
    have not run."""
    summary = results["recipes"]
    recipes = summary["recipes"]
    ran = [name for name, entry in recipes.items() if entry.get("run")]
    claims = [claim for name in ran for claim in recipes[name]["claims"]]
    held = sum(claim["verdict"] == "ok" for claim in claims)
    text = f"{len(ran)} of {len(recipes)} shipped recipes run as written (seed 0 where a recipe fixes none): {held} of {len(claims)} claimed figures reached"
    text += ("; short of their claim: " + ", ".join(f"`{name}`" for name in summary["defects"])) if summary["defects"] else ", none short"
    if summary["not_run"]:
        text += "; not run yet: " + ", ".join(f"`{name}`" for name in summary["not_run"])
    return text

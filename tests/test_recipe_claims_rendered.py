"""Every shipped recipe states its claim in a machine-readable line whose figure equals the results
file it cites; its comment is rendered from scripts/recipes/comments/NAME.in (no figure typed by hand)
and current; once eval/results/recipes.json holds the recipe's own run, the comment shows that run's
figure beside the claim."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from bench_modules import load_bench

import render_recipes
import render_values

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "scripts" / "recipes").glob("*.yaml"))
DECIMAL = re.compile(r"(?<![\w.])[-+]?\d+\.\d+(?![\w.])")  # 73.52, +2.85; not versions or file names


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_recipes")


def expected_figure(value: object) -> str:
    """A claim's figure as the comment should type it, written out here: ``mean ± std`` to 2 decimals, or the number."""
    if isinstance(value, dict):
        return f"{value['mean']:.2f} ± {value['std']:.2f}"
    return f"{value:.2f}"


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_each_claim_figure_equals_the_value_it_cites(bench, path):
    recipe = bench.read_recipe(path)
    results = render_values.Results()
    for claim in recipe.claims:
        cited = render_values.lookup(results[claim.stem], claim.path)
        assert claim.typed == expected_figure(cited), (
            f"{path.name}: claim {claim.metric} says {claim.typed}, {claim.source} {claim.path} holds {expected_figure(cited)}; "
            "run: python scripts/render_docs.py")
    assert recipe.claims or recipe.no_claim, f"{path.name}: give its claim or say why it has none"


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_the_comment_shows_the_recipes_own_run_beside_its_claim(path):
    """With a run in recipes.json: each claimed figure the run reached, formatted here from the JSON;
    without one: 'not run yet'."""
    line = next((l for l in path.read_text(encoding="utf-8").splitlines() if l.startswith("# run as written")), None)
    assert line is not None, f"{path.name}: no '# run as written' line"
    summary = ROOT / "eval" / "results" / "recipes.json"
    entry = json.loads(summary.read_text())["recipes"].get(path.stem) if summary.is_file() else None
    if not entry or not entry.get("run"):
        assert "not run yet" in line
        return
    for claim in entry["claims"]:
        if claim["measured"] is not None:
            assert f"{claim['metric']} {claim['measured']:.2f} ({claim['difference']:+.2f} against its claim: {claim['verdict']})" in line
    if not entry["claims"]:
        assert f"{entry['test_figure']['metric']} {entry['test_figure']['value']:.2f}" in line


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_the_comment_is_rendered_from_its_template_and_current(path):
    template = ROOT / "scripts" / "recipes" / "comments" / f"{path.stem}.in"
    assert template.is_file(), f"{path.name}: its comment needs a template, scripts/recipes/comments/{path.stem}.in"
    rendered = render_recipes.render_recipes(render_values.Results())[path]
    assert rendered == path.read_text(encoding="utf-8"), f"{path.name} is out of date; run: python scripts/render_docs.py"
    prose = re.sub(r"\{\{.*?\}\}", "", template.read_text(encoding="utf-8"))
    typed = DECIMAL.findall(re.sub(r"`[^`]*`", "", prose))
    assert not typed, f"{template.name}: typed figures (use {{{{v FILE PATH}}}}): {typed}"


def _results(tmp_path: Path, files: dict) -> render_values.Results:
    for stem, data in files.items():
        (tmp_path / f"{stem}.json").write_text(json.dumps(data))
    return render_values.Results(tmp_path)


def test_a_template_renders_claims_values_and_the_run(tmp_path):
    results = _results(tmp_path, {"bench": {"m": {"a": {"mean": 86.5701, "std": 0.0524, "values": [1, 2, 3]}, "b": 64.5}}})
    template = ("# CoSENT tests {{v bench m.a}}, untrained {{v bench m.b|.1f}}.\n"
                "# claim: {{claim after.stsb.main_score bench m.a}}\n# run as written: {{run}}\n")
    assert render_recipes.render_comment(template, "r", results) == (
        "# CoSENT tests 86.57 ± 0.05, untrained 64.5.\n"
        "# claim: after.stsb.main_score 86.57 ± 0.05 (eval/results/bench.json m.a)\n"
        "# run as written: not run yet (eval/results/recipes.json)\n"
        "# (This comment is rendered from scripts/recipes/comments/r.in by scripts/render_docs.py: edit that file.)\n")
    run = {"seed": 0, "train_seconds": 1500.0, "peak_rss_mb": 3072.0}
    claim = {"metric": "after.stsb.main_score", "measured": 85.07, "difference": -1.5001, "verdict": "defect"}
    results = _results(tmp_path, {"recipes": {"recipes": {"r": {"run": run, "claims": [claim], "test_figure": None}}}})
    assert render_recipes.run_text("r", results) == (
        "after.stsb.main_score 85.07 (-1.50 against its claim: defect); seed 0, 25 min of training, peak memory 3.0 GiB "
        "(eval/results/recipes.json)")
    with pytest.raises(ValueError, match="every line must be a '#' comment"):
        render_recipes.render_comment("# fine\nepochs: 3\n", "r", results)
    # a run continued with --resume timed only its last part: the minutes say so
    resumed = _results(tmp_path, {"recipes": {"recipes": {"r": {"run": {**run, "resumed": 1}, "test_figure": None,
        "claims": [{**claim, "source": "eval/results/bench.json", "typed": "86.57 ± 0.05"}]}}}})
    assert "seed 0, 25 min (last part only: resumed) of training, peak" in render_recipes.run_text("r", resumed)
    assert "| 25 min (last part only: resumed) | 3.0 GiB |" in render_recipes.table_recipes(resumed)
    # ... unless its checkpoint carried the seconds before (contrastive_bert.training.training_clock)
    clocked = {"run": {**run, "resumed": 1, "train_seconds_before_resume": 600.0}, "claims": [claim], "test_figure": None}
    assert "seed 0, 25 min of training," in render_recipes.run_text("r", _results(tmp_path, {"recipes": {"recipes": {"r": clocked}}}))


def test_rendering_keeps_the_settings_and_replaces_only_the_leading_comment(tmp_path):
    folder = tmp_path / "recipes"
    (folder / "comments").mkdir(parents=True)
    (folder / "r.yaml").write_text("# old words 1.5\n# more\nmodel: default\n# a note between settings\nepochs: 3  # inline\n")
    (folder / "comments" / "r.in").write_text("# new words {{v bench x}}\n# claim: none (x)\n")
    pages = render_recipes.render_recipes(_results(tmp_path, {"bench": {"x": 2.25}}), folder)
    text = pages[folder / "r.yaml"]
    assert text == ("# new words 2.25\n# claim: none (x)\n"
                    "# (This comment is rendered from scripts/recipes/comments/r.in by scripts/render_docs.py: edit that file.)\n"
                    "model: default\n# a note between settings\nepochs: 3  # inline\n")
    assert yaml.safe_load(text) == yaml.safe_load((folder / "r.yaml").read_text())
    (folder / "comments" / "orphan.in").write_text("# x\n")
    with pytest.raises(ValueError, match="has no recipe orphan.yaml"):
        render_recipes.render_recipes(_results(tmp_path, {"bench": {"x": 2.25}}), folder)


def test_the_recipes_table_and_sentence_of_a_hand_built_summary(tmp_path):
    """recipes.json cut down to four recipes, the markdown written out by hand: a row per claim, the
    trained figure of a recipe that claims only its untrained score, a recipe without a claim, one not run."""
    run = lambda seconds, mib: {"seed": 0, "train_seconds": seconds, "peak_rss_mb": mib}  # noqa: E731
    claim = lambda metric, typed, measured, difference, verdict: {  # noqa: E731
        "metric": metric, "source": "eval/results/bench.json", "typed": typed, "measured": measured,
        "difference": difference, "verdict": verdict}
    recipes = {
        "two": {"run": run(720.0, 1536.0), "test_figure": {"metric": "m.final", "value": 93.31},
                "claims": [claim("m.final", "93.28", 93.31, 0.03, "ok"), claim("m.exit", "89.58 ± 0.18", 87.5, -2.08, "defect")],
                "corrected": "pending"},
        "quick": {"run": run(189.4, 2027.3), "test_figure": {"metric": "after.stsb.main_score", "value": 83.01},
                  "claims": [claim("before.stsb.main_score", "82.03", 82.03, 0.0, "ok")]},
        "free": {"run": run(180.0, 1945.6), "test_figure": {"metric": "after.stsb.main_score", "value": 82.77}, "claims": []},
        "later": {"run": None, "test_figure": None, "claims": []}}
    results = _results(tmp_path, {"recipes": {"recipes": recipes, "defects": ["two"], "not_run": ["later"]}})
    link = lambda name: f"[`{name}.yaml`](../scripts/recipes/{name}.yaml)"  # noqa: E731
    assert render_recipes.table_recipes(results) == "\n".join([
        "| recipe | figure | claim (its source) | run as written | difference | verdict | training | peak memory |",
        "|---|---|---|---|---|---|---|---|",
        f"| {link('free')} | `after.stsb.main_score` | none | 82.77 |  | no claim | 3 min | 1.9 GiB |",
        f"| {link('later')} |  |  | not run yet |  | not run |  |  |",
        f"| {link('quick')} | `before.stsb.main_score` | 82.03 (`bench.json`) | 82.03 | +0.00 | ok | 3 min | 2.0 GiB |",
        "|  | `after.stsb.main_score` | none | 83.01 |  | no claim |  |  |",
        f"| {link('two')} | `m.final` | 93.28 (`bench.json`) | 93.31 | +0.03 | ok | 12 min | 1.5 GiB |",
        "|  | `m.exit` | 89.58 ± 0.18 (`bench.json`) | 87.50 | -2.08 | defect (corrected: pending) |  |  |"])
    assert render_recipes.table_recipes_summary(results) == (
        "3 of 4 shipped recipes run as written (seed 0 where a recipe fixes none): 2 of 3 claimed figures reached; short of their claim: `two`; "
        "not run yet: `later`")
    assert render_recipes.run_text("quick", results) == (
        "before.stsb.main_score 82.03 (+0.00 against its claim: ok); trained: after.stsb.main_score 83.01 (no claim); "
        "seed 0, 3 min of training, peak memory 2.0 GiB (eval/results/recipes.json)")

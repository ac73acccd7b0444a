"""eval/bench_recipes.py: claims read from their files, the verdicts of a hand-built run log worked out
by hand, the user's command, the plan, bad input, and one real ``--dry-run`` through the command
line (a tiny BERT classifier; the quickstart recipe itself in a slow test)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench_modules import load_bench

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = "model: default\ndatasets: [stsb]\nloss: mnrl\n"


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_recipes")


def _recipe(bench, folder: Path, name: str, claim: str, settings: str = SETTINGS):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(f"# A recipe.\n# claim: {claim}\n{settings}", encoding="utf-8")
    return bench.read_recipe(path)


def _record(recipe, measured: float | None, claims_at_run: list[dict] | None = None, settings_sha256: str | None = None) -> dict:
    outputs = {"after": {"stsb": {"main_score": measured}}} if measured is not None else {"after": {}}
    return {"key": f"{recipe.name}/x", "recipe": recipe.name, "settings_sha256": settings_sha256 or recipe.settings_sha256,
            "recipe_sha256": recipe.file_sha256, "seed": 0, "command": f"contrastive-bert train --recipe {recipe.name}.yaml",
            "train_seconds": 60.0, "wall_seconds": 90.0, "peak_rss_mb": 2048.0, "outputs": outputs,
            "test_figure": {"metric": "after.stsb.main_score", "value": measured}, "claims": claims_at_run or []}


def test_a_claim_is_judged_against_max_of_one_point_and_its_std(bench):
    """By hand: 1.5 below a claim of std 0.4 -> tolerance 1 -> defect; 0.8 below std 0.3 -> ok;
    1.2 below std 1.5 -> tolerance 1.5 -> ok; exactly 1 below std 0 -> not *more* than 1 -> ok."""
    assert bench.judge(85.0, 86.5, 0.4) == {"measured": 85.0, "difference": -1.5, "tolerance": 1.0, "verdict": "defect"}
    ok = bench.judge(79.2, 80.0, 0.3)
    assert ok["verdict"] == "ok" and ok["difference"] == pytest.approx(-0.8) and ok["tolerance"] == 1.0
    noisy = bench.judge(68.8, 70.0, 1.5)
    assert noisy["verdict"] == "ok" and noisy["difference"] == pytest.approx(-1.2) and noisy["tolerance"] == 1.5
    assert bench.judge(69.0, 70.0, 0.0)["verdict"] == "ok"
    assert bench.judge(None, 70.0, 0.0)["verdict"] == "missing"


def test_summary_of_a_hand_built_log(bench, tmp_path):
    """Seven recipes, verdicts worked out by hand:
    defect (claim 86.5 ± 0.4, run 85.0: 1.5 below > 1) -> defect, correction pending;
    close (80.0 ± 0.3, run 79.2: 0.8 below) -> ok; noisy (70.0 ± 1.5, run 68.8: 1.2 below < 1.5) -> ok;
    free (no claim, run 81.0) -> no claim; fresh (no run) -> not run;
    fixed (its earlier settings fell short: 60.0 against 70.0) -> not run, the recipe corrected;
    reclaimed (ran 49.5 against a claim of 70.0, claim now 50.0 ± 0: 0.5 below) -> ok, the claim corrected."""
    results = {"bench": {"a": {"mean": 86.5, "std": 0.4, "values": [86.1, 86.5, 86.9]}, "b": {"mean": 80.0, "std": 0.3},
                         "c": {"mean": 70.0, "std": 1.5}, "d": 50.0}}
    line = lambda path, typed: f"after.stsb.main_score {typed} (eval/results/bench.json {path})"  # noqa: E731
    folder = tmp_path / "recipes"
    recipes = {name: _recipe(bench, folder, name, claim) for name, claim in {
        "defect": line("a", "86.50 ± 0.40"), "close": line("b", "80.00 ± 0.30"), "noisy": line("c", "70.00 ± 1.50"),
        "free": "none (no benchmark measures it)", "fresh": line("d", "50.00"), "fixed": line("c", "70.00 ± 1.50"),
        "reclaimed": line("d", "50.00")}.items()}
    fell_short = [{"metric": "after.stsb.main_score", "claim": 70.0, "std": 0.0, "verdict": "defect"}]
    records = [_record(recipes["defect"], 85.0), _record(recipes["close"], 79.2), _record(recipes["noisy"], 68.8),
               _record(recipes["free"], 81.0), _record(recipes["fixed"], 60.0, fell_short, settings_sha256="0" * 64),
               _record(recipes["reclaimed"], 49.5, fell_short)]
    summary = bench.summarize(records, list(recipes.values()), results, seed=0)
    entries = summary["recipes"]
    assert {name: (e["verdict"], e["corrected"]) for name, e in entries.items()} == {
        "defect": ("defect", "pending"), "close": ("ok", None), "noisy": ("ok", None), "free": ("no claim", None),
        "fresh": ("not run", None), "fixed": ("not run", "recipe"), "reclaimed": ("ok", "claim")}
    defect = entries["defect"]["claims"][0]
    assert (defect["claim"], defect["std"], defect["measured"], defect["difference"], defect["tolerance"]) == (86.5, 0.4, 85.0, -1.5, 1.0)
    assert entries["noisy"]["claims"][0]["tolerance"] == 1.5
    assert entries["reclaimed"]["claims"][0]["difference"] == pytest.approx(-0.5)
    assert entries["reclaimed"]["claims_at_run"] == fell_short
    assert entries["free"]["test_figure"] == {"metric": "after.stsb.main_score", "value": 81.0}
    assert entries["fixed"]["earlier_runs"][0]["settings_sha256"] == "0" * 64 and entries["fixed"]["run"] is None
    assert entries["close"]["run"]["peak_rss_mb"] == 2048.0 and entries["close"]["run"]["train_seconds"] == 60.0
    assert (summary["defects"], summary["ok"], summary["no_claim"]) == (["defect"], ["close", "noisy", "reclaimed"], ["free"])
    assert summary["not_run"] == ["fresh", "fixed"]


def test_a_claim_is_read_from_its_file_not_from_the_comment(bench, tmp_path):
    recipe = _recipe(bench, tmp_path, "r", "after.stsb.main_score 99.99 (eval/results/bench.json m.a)")
    assert bench.claim_value(recipe.claims[0], {"bench": {"m": {"a": {"mean": 71.5, "std": 0.25}}}}) == (71.5, 0.25)
    assert bench.claim_value(recipe.claims[0], {"bench": {"m": {"a": 64.5}}}) == (64.5, 0.0)
    with pytest.raises(ValueError, match="no key 'a'"):
        bench.claim_value(recipe.claims[0], {"bench": {"m": {}}})
    with pytest.raises(ValueError, match="does not exist"):
        bench.claim_value(recipe.claims[0], bench.ResultsFiles(tmp_path))


@pytest.mark.parametrize(("text", "message"), [
    ("# claim: after.stsb 86.5 pairs_quality.json a.b\nmodel: default\n", "line 1: expected"),
    ("# nothing claimed\nmodel: default\n", "no '# claim:' line"),
    ("# claim: none (x)\n# claim: after.stsb 1.00 (eval/results/b.json a)\nmodel: default\n", "beside figures"),
])
def test_a_malformed_or_missing_claim_is_an_error_naming_the_file(bench, tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as error:
        bench.read_recipe(path)
    assert str(path) in str(error.value)


def test_the_command_is_the_users_with_the_seed_only_where_the_recipe_fixes_none(bench, tmp_path):
    recipes = tmp_path / "recipes"
    unseeded = _recipe(bench, recipes, "unseeded", "none (y)")
    seeded = _recipe(bench, recipes, "seeded", "none (y)", settings=SETTINGS + "seed: 42\n")
    out = tmp_path / "run"
    assert bench.command(unseeded, out, 0) == ["contrastive-bert", "train", "--recipe", str(unseeded.path), "--output-dir", str(out),
                                               "--seed", "0"]
    assert bench.command(seeded, out, 0) == ["contrastive-bert", "train", "--recipe", str(seeded.path), "--output-dir", str(out)]
    assert bench.command(seeded, out, 0, 2, 32)[-4:] == ["--max-steps", "2", "--max-eval-samples", "32"]
    shipped = bench.read_recipe(ROOT / "scripts" / "recipes" / "stsb_best.yaml")
    assert bench.command(shipped, ROOT / "output" / "r", 0)[2:] == ["--recipe", "scripts/recipes/stsb_best.yaml", "--output-dir", "output/r"]
    assert (bench.run_key(unseeded, 0), bench.run_key(seeded, 0, dry_run=True)) == (
        f"unseeded/{unseeded.settings_sha256[:16]}/seed-0", f"dry-run/seeded/{seeded.settings_sha256[:16]}/seed-42")


def test_a_comment_change_keeps_the_run_a_settings_change_does_not(bench, tmp_path):
    one = _recipe(bench, tmp_path / "a", "r", "none (x)")
    reworded = _recipe(bench, tmp_path / "b", "r", "none (reworded)")
    changed = _recipe(bench, tmp_path / "c", "r", "none (x)", settings=SETTINGS + "epochs: 2\n")
    assert one.settings_sha256 == reworded.settings_sha256 != changed.settings_sha256
    assert one.file_sha256 != reworded.file_sha256


def test_the_plan_is_cheapest_first_and_skips_a_recipe_run_with_its_settings(bench, tmp_path):
    recipes = [_recipe(bench, tmp_path, name, "none (x)") for name in ("nfcorpus_best", "quickstart", "stsb_best")]
    plan = bench.grid(recipes, 0, dry_run=False)
    assert [run.method for run in plan.plan({})] == ["quickstart", "stsb_best", "nfcorpus_best"]
    done = {bench.run_key(recipes[1], 0): {"recipe": "quickstart"}}
    assert [run.method for run in plan.plan(done)] == ["stsb_best", "nfcorpus_best"]
    dry = bench.grid(recipes, 0, dry_run=True)
    assert [run.method for run in dry.plan(done)] == ["quickstart", "stsb_best", "nfcorpus_best"]  # a real run is no dry run
    measured = [{"recipe": "nfcorpus_best", "wall_seconds": 60.0}]  # a run's own time wins over the estimate
    assert [run.method for run in bench.grid(recipes, 0, False, measured).plan({})][0] == "nfcorpus_best"


@pytest.mark.parametrize(("argv", "message"), [
    (["--only", "nowhere"], "--only: unknown nowhere"),
    (["--max-steps", "3"], "only with --dry-run"),
    (["--seeds", "0,1"], "--seeds: expected one seed"),
])
def test_bad_flags_fail_before_anything_is_written(bench, tmp_path, argv, message):
    with pytest.raises(ValueError, match=message):
        bench.main([*argv, "--output", str(tmp_path / "out.json"), "--run-log", str(tmp_path / "runs.jsonl"),
                    "--work-dir", str(tmp_path / "work")])
    assert list(tmp_path.iterdir()) == []


def test_the_shipped_recipes_list_cheapest_first(bench, capsys):
    assert bench.main(["--list", "--run-log", "/nonexistent/runs.jsonl"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert sorted(names) == sorted(p.stem for p in (ROOT / "scripts" / "recipes").glob("*.yaml"))
    assert names[-1] == "nfcorpus_best"


def _tiny_classifier_recipe(tmp_path: Path, model: Path) -> Path:
    from conftest import build_tiny_model

    build_tiny_model(tmp_path / "tiny_build").save(str(model))
    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "tiny_head.yaml").write_text(
        "# A tiny BERT's label head on emotion.\n"
        "# claim: label_head.emotion.accuracy 50.00 (eval/results/claims.json emotion.head)\n"
        f"model: {model}\ndatasets: [emotion]\nloss: acl\nloss_options: {{mode: ce}}\nbatch_size: 8\nlearning_rate: 1.0e-4\n"
        "head_learning_rate: 5.0e-3\nmax_seq_length: 16\ndev_task: null\neval_tasks: [emotion]\nsave_steps: 500\n", encoding="utf-8")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "claims.json").write_text(json.dumps({"emotion": {"head": {"mean": 50.0, "std": 2.0}}}))
    return folder


def test_dry_run_end_to_end_through_the_command_line(bench, tmp_path, shared_data, monkeypatch):
    """A tiny BERT classifier recipe through the real ``contrastive-bert train`` (2 steps, 32 test rows):
    the record holds the command, what results.json says, the label head's accuracy (checked against
    an argmax of the head's logits computed here), the peak memory; a second call finds nothing left."""
    import numpy as np
    import torch

    from contrastive_bert.data import load_dataset
    from contrastive_bert.heads.label_embedding import find_label_head
    from contrastive_bert.models import load_model

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    folder = _tiny_classifier_recipe(tmp_path, tmp_path / "tiny")
    work, output = tmp_path / "work", tmp_path / "recipes.json"
    argv = ["--dry-run", "--recipes-dir", str(folder), "--results-dir", str(tmp_path / "results"), "--work-dir", str(work),
            "--output", str(output), "--data-dir", str(shared_data)]
    assert bench.main(argv) == 0
    [record] = [json.loads(line) for line in (work / "dry-run" / "recipes_runs.jsonl").read_text().splitlines()]
    run_dir = ROOT / record["output_dir"] if not Path(record["output_dir"]).is_absolute() else Path(record["output_dir"])
    assert record["command"] == (f"contrastive-bert train --recipe {folder / 'tiny_head.yaml'} --output-dir {run_dir} --seed 0 "
                                 "--max-steps 2 --max-eval-samples 32")
    assert record["dry_run"] and record["seed"] == 0 and record["key"].startswith("dry-run/tiny_head/")
    written = json.loads((run_dir / "results.json").read_text())
    assert record["outputs"]["after"] == written["after"] and written["global_step"] == 2
    assert record["train_seconds"] == written["train_seconds"] and record["peak_rss_mb"] > 100
    assert not (run_dir / "checkpoints").exists() and (run_dir / "final").is_dir()

    test = load_dataset("emotion", split="test", data_dir=shared_data).shuffle(seed=0).select(range(32))
    model = load_model(str(run_dir / "final"))
    head = find_label_head(model)
    with torch.inference_mode():
        logits = head.logits(model.encode(list(test["text"]), convert_to_tensor=True).float())
    expected = 100.0 * float((logits.argmax(1).numpy() == np.asarray(test["label"])).mean())
    assert record["outputs"]["label_head"]["emotion"] == {"accuracy": pytest.approx(expected), "rows": 32}
    [claim] = record["claims"]
    assert (claim["claim"], claim["std"], claim["tolerance"]) == (50.0, 2.0, 2.0)
    assert claim["verdict"] == ("defect" if expected < 48.0 else "ok")

    summary = json.loads(output.read_text())
    assert summary["protocol"]["dry_run"] and summary["recipes"]["tiny_head"]["run"]["command"] == record["command"]
    assert "environment" in summary
    assert bench.main([*argv, "--max-runs", "1"]) == bench.NOTHING_LEFT  # the dry run is in its log: nothing left to run
    assert len((work / "dry-run" / "recipes_runs.jsonl").read_text().splitlines()) == 1


@pytest.mark.slow
def test_dry_run_of_the_quickstart_recipe(bench, tmp_path, shared_data, monkeypatch):
    """The quickstart recipe itself, as shipped, through ``--dry-run`` (about 45 s on one thread): its
    claim (STS-B test before training) is read from what the run wrote; eval/results is not touched."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    real = ROOT / "eval" / "results" / "recipes_runs.jsonl"
    before = real.stat().st_mtime_ns if real.is_file() else None
    work = tmp_path / "work"
    assert bench.main(["--dry-run", "--only", "quickstart", "--work-dir", str(work), "--data-dir", str(shared_data)]) == 0
    [record] = [json.loads(line) for line in (work / "dry-run" / "recipes_runs.jsonl").read_text().splitlines()]
    assert record["command"].startswith("contrastive-bert train --recipe scripts/recipes/quickstart.yaml --output-dir ")
    assert "--seed" not in record["command"] and record["seed"] == 42  # the recipe fixes its seed
    written = json.loads((Path(record["output_dir"]) / "results.json").read_text())
    [claim] = record["claims"]
    assert claim["measured"] == written["before"]["stsb"]["main_score"] and claim["metric"] == "before.stsb.main_score"
    summary = json.loads((work / "dry-run" / "recipes.json").read_text())
    assert summary["recipes"]["quickstart"]["run"]["seed"] == 42 and summary["not_run"]
    assert (real.stat().st_mtime_ns if real.is_file() else None) == before


def _started(bench, work: Path, recipe, seed: int, name: str, files: dict[str, str]) -> Path:
    """A run folder under ``work`` as an interrupted run leaves it: its marker, and ``files`` (path: text)."""
    folder = work / name
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
    bench.pending_marker(folder).write_text(json.dumps({"recipe": recipe.name, "settings_sha256": recipe.settings_sha256,
                                                        "seed": seed, "command": "x", "resumed": 0}))
    return folder


def test_an_interrupted_run_is_found_only_where_resume_can_continue_it(bench, tmp_path):
    recipe = _recipe(bench, tmp_path / "recipes", "r", "none (x)")
    staged = _recipe(bench, tmp_path / "recipes", "s", "none (x)", settings=SETTINGS + "stages: [{loss: mnrl}]\n")
    work = tmp_path / "work"
    checkpointed = {"recipe.json": "{}", "checkpoints/checkpoint-50/trainer_state.json": "{}"}
    assert bench.interrupted_run(work, recipe, 0) is None  # nothing started
    _started(bench, work, recipe, 0, "r-20260101-000000", {"recipe.json": "{}"})  # stopped before its first checkpoint
    assert bench.interrupted_run(work, recipe, 0) is None
    older = _started(bench, work, recipe, 0, "r-20260102-000000", checkpointed)
    assert bench.interrupted_run(work, recipe, 0) == older
    newer = _started(bench, work, recipe, 0, "r-20260103-000000", checkpointed)
    assert bench.interrupted_run(work, recipe, 0) == newer  # the newest
    (newer / "results.json").write_text("{}")  # finished (its marker left by a crash after the run): not resumed
    assert bench.interrupted_run(work, recipe, 0) == older
    assert bench.interrupted_run(work, recipe, 1) is None  # another seed
    changed = _recipe(bench, tmp_path / "changed", "r", "none (x)", settings=SETTINGS + "epochs: 2\n")
    assert bench.interrupted_run(work, changed, 0) is None  # other settings
    assert bench.interrupted_run(work, staged, 0) is None
    begun = _started(bench, work, staged, 0, "s-20260101-000000", {"recipe.json": "{}"})  # a staged run restarts its stage
    assert bench.interrupted_run(work, staged, 0) == begun


def test_a_run_interrupted_after_a_checkpoint_is_continued_by_the_users_resume(bench, tmp_path, shared_data, monkeypatch):
    """A tiny recipe through the real command line, stopped after its last checkpoint (the bench process
    dies, results.json and final/ never written): the next call continues it with ``contrastive-bert train
    --output-dir DIR --resume`` in the same folder, records it once with ``resumed: 1`` and the first
    command, and removes the marker."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    folder = _tiny_classifier_recipe(tmp_path, tmp_path / "tiny")
    recipe_file = folder / "tiny_head.yaml"
    recipe_file.write_text(recipe_file.read_text().replace("save_steps: 500", "save_steps: 1"))
    work, output = tmp_path / "work", tmp_path / "recipes.json"
    argv = ["--dry-run", "--recipes-dir", str(folder), "--results-dir", str(tmp_path / "results"), "--work-dir", str(work),
            "--output", str(output), "--data-dir", str(shared_data)]
    real_run_child, commands = bench.run_child, []

    def killed_after_training(child_argv, env, cwd):
        commands.append(list(child_argv))
        real_run_child(child_argv, env, cwd)
        run_dir = Path(child_argv[child_argv.index("--output-dir") + 1])
        run_dir = run_dir if run_dir.is_absolute() else ROOT / run_dir
        (run_dir / "results.json").unlink()
        shutil.rmtree(run_dir / "final")
        raise KeyboardInterrupt  # the session ends: the bench process is gone before it records the run

    monkeypatch.setattr(bench, "run_child", killed_after_training)
    with pytest.raises(KeyboardInterrupt):
        bench.main(argv)
    assert not (work / "dry-run" / "recipes_runs.jsonl").exists()
    [marker] = list((work / "dry-run").glob(f"*{bench.PENDING_SUFFIX}"))
    run_dir = marker.with_name(marker.name[: -len(bench.PENDING_SUFFIX)])
    assert (run_dir / "checkpoints" / "checkpoint-2").is_dir()

    monkeypatch.setattr(bench, "run_child", lambda child_argv, env, cwd: (commands.append(list(child_argv))
                                                                           or real_run_child(child_argv, env, cwd)))
    assert bench.main(argv) == 0
    assert commands[1][1:] == ["train", "--output-dir", bench.display_path(run_dir), "--resume"]
    [record] = [json.loads(line) for line in (work / "dry-run" / "recipes_runs.jsonl").read_text().splitlines()]
    assert record["resumed"] == 1 and record["output_dir"] == bench.display_path(run_dir)
    assert 0 < record["train_seconds_before_resume"] <= record["train_seconds"]  # the whole run's, from its checkpoint
    assert record["command"].startswith(f"contrastive-bert train --recipe {recipe_file} --output-dir ")  # the first, a user's
    written = json.loads((run_dir / "results.json").read_text())
    assert written["global_step"] == 2 and record["outputs"]["after"] == written["after"]
    assert "emotion" in record["outputs"]["label_head"] and not marker.exists()


def test_a_run_is_summed_up_by_its_trained_figure_not_an_untrained_claim(bench, tmp_path):
    """The quickstart claims only the untrained model's score (``before.*``): its summary figure is the
    trained one (the first task's ``after`` main score); a claim on the trained model is its own figure."""
    outputs = {"before": {"stsb": {"main_score": 82.0}}, "after": {"stsb": {"main_score": 83.0, "cosine_pearson": 84.0}}}
    assert bench.trained_figure(["before.stsb.main_score"], outputs) == {"metric": "after.stsb.main_score", "value": 83.0}
    assert bench.trained_figure(["before.stsb.main_score", "after.stsb.cosine_pearson"], outputs) == {
        "metric": "after.stsb.cosine_pearson", "value": 84.0}
    assert bench.trained_figure([], {"after": {}}) == {"metric": None, "value": None}
    quick = _recipe(bench, tmp_path / "recipes", "quick", "before.stsb.main_score 82.00 (eval/results/bench.json u)")
    record = {**_record(quick, 83.0), "outputs": outputs,  # logged before the rule: its figure named the first claim
              "test_figure": {"metric": "before.stsb.main_score", "value": 82.0}}
    entry = bench.summarize([record], [quick], {"bench": {"u": 82.0}}, seed=0)["recipes"]["quick"]
    assert entry["verdict"] == "ok" and entry["claims"][0]["measured"] == 82.0
    assert entry["test_figure"] == entry["run"]["test_figure"] == {"metric": "after.stsb.main_score", "value": 83.0}

"""Every shipped recipe checked against its claim (issue 38): does ``scripts/recipes/X.yaml``, run as a
user runs it, reach the figure its comment gives?

Each recipe is trained once through the real command line, in a child process::

    contrastive-bert train --recipe scripts/recipes/X.yaml --output-dir output/bench_recipes/X-<time> [--seed 0]

with nothing else added: ``--seed 0`` only where the recipe fixes no seed, the data folder through
``CONTRASTIVE_BERT_DATA``, the threads through ``OMP_NUM_THREADS`` (the command picks its device itself,
CUDA when visible; ``--device`` only names it in the environment block). Per recipe the run log keeps the
exact command, the recipe file's sha256 and the hash of its settings (the parsed YAML, comments left
out: a run is skipped on restart when a run of the same settings and seed is in; re-rendering a
comment does not make an hours-long run stale), the training seconds (``results.json``), the wall
seconds, the peak resident memory of the child (``os.wait4``: the child and the processes it waited
for) and what the run wrote: ``results.json``'s before/after scores, its stages and multi-exit block,
and, where the final model of a one-stage recipe has a label head, that head's test accuracy
(``label_head.<data set>.accuracy``: ``results.json`` scores a logistic-regression probe of the
embeddings only, while the classifier recipes claim the head's accuracy; scored by the package's
``predict``, the code behind ``contrastive-bert classify``).

A recipe's claims are its ``# claim:`` comment lines, rendered from the results file they cite
(``scripts/render_recipes.py``)::

    # claim: METRIC VALUE [± STD] (eval/results/FILE.json PATH)
    # claim: none (WHY)

METRIC is a path into what the run wrote (e.g. ``after.stsb.main_score``,
``multi_exit.final_layer_accuracy``, ``label_head.banking77.accuracy``); the claimed value and std are
read from ``FILE.json`` at ``PATH`` (a ``{mean, std, values}`` record: its mean and std; a number:
std 0), never from the typed figure. A run more than ``max(1 point, the claim's std)`` below a claim,
or one that writes no figure at METRIC, is a **defect**. ``recipes.json`` says per recipe ``verdict`` (``ok``, ``defect``, ``no claim``,
``not run``) and ``corrected``: ``recipe`` (its settings changed since a run that fell short: rerun
pending or done), ``claim`` (the claim changed since and the run now meets it), ``pending`` (a defect
not corrected yet: fix the recipe or its claim) or None.

Resumable: each finished recipe is one line of ``eval/results/recipes_runs.jsonl``; ``recipes.json``
is rebuilt after each. A run stopped part-way (the session ended) is continued on restart as a user
continues one, ``contrastive-bert train --output-dir DIR --resume``, from its last checkpoint: a marker
``DIR.bench_recipes.json`` beside its folder names its settings and seed until it finishes; the record
counts the continuations (``resumed``) and its wall seconds and peak memory are then the last part's;
its training seconds are the whole run's where its checkpoint carried them (``train_seconds_before_resume``,
:mod:`contrastive_bert.training.training_clock`), else the last part's too.
``--dry-run`` (2 steps, 32 evaluation rows per split) tests the pipeline; its runs go to a log and
summary of their own under ``--work-dir`` and never count as done. ``--list`` prints the plan,
cheapest first, with each recipe's estimated minutes.

    .venv/bin/python eval/bench_recipes.py --list      # the plan: estimated minutes, what is done
    OMP_NUM_THREADS=2 nohup flock /tmp/cbert_bench.lock .venv/bin/python eval/bench_recipes.py --threads 2 > recipes.log 2>&1 &
    while flock /tmp/cbert_bench.lock .venv/bin/python eval/bench_recipes.py --threads 2 --max-runs 1; do :; done  # one a process
    python scripts/render_docs.py                      # then: the recipes' comments show their runs

Estimated time on this machine (2 CPU cores; from the benchmarks that measured each recipe's
protocol), cheapest first: stsb_mrpc_mnrl 5 min, stsb_mrpc_queue 6, quickstart 7,
answer_selection_best 7, banking77_acl 16, banking77_multi_exit 25, stsb_best 30, emotion_acl 32,
scifact_best 40, emotion_multi_exit 45, nfcorpus_best 80 (243 steps of 3 texts x 256 tokens at
~15 s a step, measured on its first 100; better on a GPU); about 4.9 hours in all.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from contrastive_bert.benchmarking import RunLog, add_common_arguments, setup_from_args, write_results
from contrastive_bert.benchmarking.plan_loop import NOTHING_LEFT, run_plan  # noqa: F401 (NOTHING_LEFT: the loop's exit status)
from contrastive_bert.benchmarking.protocol import Grid, Method, Run

logger = logging.getLogger("bench_recipes")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "eval" / "results"
RECIPES = ROOT / "scripts" / "recipes"
WORK_DIR = ROOT / "output" / "bench_recipes"
SETTING = "recipes"
DEFECT_POINTS = 1.0  # a run more than max(this, the claim's std) below its claim is a defect
# Estimated minutes per recipe on 2 CPU cores (see the module doc); a recipe not listed: DEFAULT_MINUTES.
ESTIMATED_MINUTES = {
    "stsb_mrpc_mnrl": 5, "stsb_mrpc_queue": 6, "quickstart": 7, "answer_selection_best": 7, "banking77_acl": 16,
    "banking77_multi_exit": 25, "stsb_best": 30, "emotion_acl": 32, "scifact_best": 40, "emotion_multi_exit": 45,
    "nfcorpus_best": 80,
}
DEFAULT_MINUTES = 60
CLAIM = re.compile(r"^#\s*claim:\s*(?P<body>.*?)\s*$")
CLAIM_FIGURE = re.compile(r"^(?P<metric>\S+)\s+(?P<typed>[-+]?\d[\d.]*(?:\s*(?:±|\+-)\s*\d[\d.]*)?)\s+"
                          r"\(eval/results/(?P<stem>[\w./-]+)\.json\s+(?P<path>\S+)\)$")
CLAIM_NONE = re.compile(r"^none(?:\s+\((?P<why>.*)\))?$")


@dataclasses.dataclass(frozen=True)
class Claim:
    """One ``# claim:`` line: ``metric`` (a path into what the run wrote), the results file ``stem`` and
    ``path`` its figure is read from, and the figure as typed in the comment."""

    metric: str
    stem: str
    path: str
    typed: str

    @property
    def source(self) -> str:
        return f"eval/results/{self.stem}.json"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A recipe file: its name (the file's stem), path, text, parsed settings and claims."""

    name: str
    path: Path
    text: str
    settings: Mapping[str, Any]
    claims: tuple[Claim, ...]
    no_claim: str | None = None  # the reason given by ``# claim: none (...)``

    @property
    def file_sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def settings_sha256(self) -> str:
        """The hash of what the command runs: the parsed settings, comments left out."""
        return hashlib.sha256(json.dumps(self.settings, sort_keys=True, default=str).encode("utf-8")).hexdigest()

    @property
    def fixes_seed(self) -> bool:
        return "seed" in self.settings


def parse_claims(text: str, where: str = "recipe") -> tuple[tuple[Claim, ...], str | None]:
    """The ``# claim:`` lines of a recipe's text: ``(claims, reason)``, reason the text of a ``# claim:
    none (...)`` line (None without one). ``ValueError`` naming ``where`` and the line for a malformed
    one, for none mixed with figures, or for no claim line at all."""
    claims, none = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        match = CLAIM.match(line.strip())
        if not match:
            continue
        body = match.group("body")
        if (figure := CLAIM_FIGURE.match(body)) is not None:
            claims.append(Claim(figure["metric"], figure["stem"], figure["path"], figure["typed"]))
        elif (empty := CLAIM_NONE.match(body)) is not None:
            none = empty["why"] or ""
        else:
            raise ValueError(f"{where}: line {number}: expected '# claim: METRIC VALUE [± STD] (eval/results/FILE.json PATH)' "
                             f"or '# claim: none (WHY)', got {line.strip()!r}")
    if claims and none is not None:
        raise ValueError(f"{where}: '# claim: none' beside figures; keep one or the other")
    if not claims and none is None:
        raise ValueError(f"{where}: no '# claim:' line; give the figure it claims or '# claim: none (WHY)'")
    return tuple(claims), none


def read_recipe(path: Path) -> Recipe:
    """One recipe file, its settings parsed as the CLI reads them and its claims."""
    from contrastive_bert.training.recipe import TrainingRecipe

    text = path.read_text(encoding="utf-8")
    claims, none = parse_claims(text, where=str(path))
    return Recipe(path.stem, path, text, TrainingRecipe.read_file(path), claims, none)


def read_recipes(folder: Path) -> list[Recipe]:
    """Every ``*.yaml`` of ``folder`` (``ValueError`` when there is none)."""
    paths = sorted(Path(folder).glob("*.yaml"))
    if not paths:
        raise ValueError(f"--recipes-dir: no *.yaml recipe in {folder}")
    return [read_recipe(path) for path in paths]


def walk(data: Any, path: str) -> Any:
    """``data[k1][k2]...`` for ``path = "k1.k2..."`` (a list by index; a key holding a dot itself, such as
    ``within_0.1``, found by joining the parts, shortest first), as scripts/render_values.py reads a
    template value; ``KeyError`` naming the first part not found."""
    parts = path.split(".") if path else []
    i = 0
    while i < len(parts):
        if isinstance(data, list) and parts[i].isdigit() and int(parts[i]) < len(data):
            data, i = data[int(parts[i])], i + 1
            continue
        found = next((j for j in range(i + 1, len(parts) + 1) if isinstance(data, Mapping) and ".".join(parts[i:j]) in data), None)
        if found is None:
            raise KeyError(parts[i])
        data, i = data[".".join(parts[i:found])], found
    return data


def claim_value(claim: Claim, results: Mapping[str, Any]) -> tuple[float, float]:
    """The claimed ``(value, std)`` read from its results file: a ``{mean, std}`` record or a number (std 0).
    ``results``: stem -> parsed file (``render_values.Results``-like: a missing file is a ``ValueError``)."""
    try:
        value = walk(results[claim.stem], claim.path)
    except KeyError as error:
        raise ValueError(f"claim: no key {error.args[0]!r} of {claim.path!r} in {claim.source}") from None
    if isinstance(value, Mapping) and "mean" in value:
        return float(value["mean"]), float(value.get("std") or 0.0)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), 0.0
    raise ValueError(f"claim: {claim.source} {claim.path} is not a figure (a number or a {{mean, std}} record): {value!r}")


class ResultsFiles(dict):
    """``eval/results/<stem>.json`` by stem, read on first use (a missing file is a ``ValueError``)."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = Path(folder)

    def __missing__(self, stem: str) -> Any:
        path = self.folder / f"{stem}.json"
        if not path.is_file():
            raise ValueError(f"claim: {path} does not exist")
        self[stem] = json.loads(path.read_text(encoding="utf-8"))
        return self[stem]


def measured_value(outputs: Mapping[str, Any], metric: str) -> float | None:
    """The figure at ``metric`` (dotted path) in what a run wrote, None where it wrote none."""
    try:
        value = walk(outputs, metric)
    except KeyError:
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def judge(measured: float | None, claim: float, std: float) -> dict[str, Any]:
    """One claim against one run: ``defect`` when the run is more than ``max(1, std)`` below it,
    ``missing`` when the run wrote no such figure, else ``ok``."""
    tolerance = max(DEFECT_POINTS, std)
    if measured is None:
        return {"measured": None, "difference": None, "tolerance": tolerance, "verdict": "missing"}
    difference = measured - claim
    return {"measured": measured, "difference": difference, "tolerance": tolerance,
            "verdict": "defect" if -difference > tolerance else "ok"}


def primary_metric(outputs: Mapping[str, Any]) -> str | None:
    """The figure a recipe without a claim is summed up by: the multi-exit model's final layer, else
    the first evaluation task's main score after training."""
    if isinstance(outputs.get("multi_exit"), Mapping):
        return "multi_exit.final_layer_accuracy"
    after = outputs.get("after") or {}
    return f"after.{next(iter(after))}.main_score" if after else None


def trained_figure(claim_metrics: Sequence[str], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """The figure a run is summed up by: its first claim on the trained model, else :func:`primary_metric`
    (a claim on the untrained model, the quickstart's ``before.*``, says nothing of what training did)."""
    metric = next((m for m in claim_metrics if not m.startswith("before.")), None) or primary_metric(outputs)
    return {"metric": metric, "value": measured_value(outputs, metric) if metric else None}


# ---------------------------------------------------------------- one run


def display_path(path: Path) -> str:
    """``path`` relative to the repository root where it lies under it (as a user there types it)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def command(recipe: Recipe, output_dir: Path, seed: int, max_steps: int | None = None,
            max_eval_samples: int | None = None) -> list[str]:
    """The user's command for ``recipe`` (``contrastive-bert`` first, paths as typed from the repository
    root): the recipe and the output folder, ``--seed`` where the recipe fixes none, the smoke-test caps."""
    argv = ["contrastive-bert", "train", "--recipe", display_path(recipe.path), "--output-dir", display_path(output_dir)]
    if not recipe.fixes_seed:
        argv += ["--seed", str(seed)]
    if max_steps is not None:
        argv += ["--max-steps", str(max_steps)]
    if max_eval_samples is not None:
        argv += ["--max-eval-samples", str(max_eval_samples)]
    return argv


def run_child(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[int, float, float]:
    """Run ``argv`` to its end: ``(exit status, wall seconds, peak resident MiB)``, the peak being that of
    the child and of the processes it waited for (``os.wait4``'s ``ru_maxrss``)."""
    start = time.perf_counter()
    process = subprocess.Popen(list(argv), env=dict(env), cwd=cwd)
    try:
        _, status, usage = os.wait4(process.pid, 0)
    except BaseException:
        process.terminate()
        process.wait()
        raise
    process.returncode = os.waitstatus_to_exitcode(status)
    peak = usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)  # bytes on macOS, KiB on Linux
    return process.returncode, time.perf_counter() - start, peak


def label_head_scores(final_dir: Path, datasets: Sequence[str], data_dir: str | None, rows: int | None) -> dict[str, dict]:
    """Test accuracy (x100) of the saved model's label head on each classification data set it trained
    on (the first ``rows`` of the test split shuffled with seed 0, as ``--max-eval-samples`` cuts it),
    by ``heads.label_embedding.predict``; ``{}`` when the model has no label head."""
    from contrastive_bert.data import get_dataset, load_dataset
    from contrastive_bert.heads.label_embedding import find_label_head, predict
    from contrastive_bert.models import load_model

    tasks = [name for name in datasets if get_dataset(name).task_type == "classification"]
    if not tasks:
        return {}
    model = load_model(str(final_dir))
    if find_label_head(model) is None:
        return {}
    scores = {}
    for name in tasks:
        test = load_dataset(name, split="test", data_dir=data_dir)
        if rows is not None:
            test = test.shuffle(seed=0).select(range(min(rows, len(test))))
        names = test.features["label"].names
        predicted = predict(model, list(test["text"]), batch_size=64)
        correct = sum(p == names[gold] for p, gold in zip(predicted, test["label"]))
        scores[name] = {"accuracy": 100.0 * correct / len(test), "rows": len(test)}
    return scores


def run_outputs(results: Mapping[str, Any]) -> dict[str, Any]:
    """What the run wrote in ``results.json`` that a claim may name: before/after, the stages' (without
    their recorded recipes), the multi-exit block, training seconds, rows and steps."""
    keep = ("before", "after", "train_seconds", "train_rows", "global_step", "multi_exit")
    out = {key: results[key] for key in keep if key in results}
    if "stages" in results:
        out["stages"] = [{key: stage[key] for key in keep if key in stage} for stage in results["stages"]]
    return out


PENDING_SUFFIX = ".bench_recipes.json"  # beside a started run's folder until it finishes: what --resume continues


def pending_marker(output_dir: Path) -> Path:
    return output_dir.with_name(output_dir.name + PENDING_SUFFIX)


def can_resume(output_dir: Path, staged: bool) -> bool:
    """Whether ``contrastive-bert train --output-dir DIR --resume`` continues the interrupted run in
    ``output_dir``: a staged run once its recipe is recorded (each stage resumes or restarts itself), a
    one-stage run from a checkpoint (or from its mined corpus negatives)."""
    from contrastive_bert.training.output_dir import CHECKPOINTS, RECIPE_FILE, last_checkpoint, resumable_before_checkpoint

    if not (output_dir / RECIPE_FILE).is_file():
        return False
    return staged or last_checkpoint(output_dir / CHECKPOINTS) is not None or resumable_before_checkpoint(output_dir)


def interrupted_run(work: Path, recipe: Recipe, seed: int) -> Path | None:
    """The newest folder under ``work`` where a run of ``recipe``'s settings at ``seed`` started and did not
    finish (its marker is still there) and can be resumed; None when there is none."""
    for marker in sorted(work.glob(f"{recipe.name}-*{PENDING_SUFFIX}"), reverse=True):
        try:
            started = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        output_dir = marker.with_name(marker.name[: -len(PENDING_SUFFIX)])
        if (started.get("settings_sha256"), started.get("seed")) == (recipe.settings_sha256, seed) \
                and not (output_dir / "results.json").is_file() and can_resume(output_dir, "stages" in recipe.settings):
            return output_dir
    return None


def run_one(recipe: Recipe, args: argparse.Namespace, results: Mapping[str, Any]) -> dict[str, Any]:
    """Train ``recipe`` with the user's command in a fresh folder under ``--work-dir``, or continue an
    interrupted run of the same settings and seed there with the user's ``--resume`` (a run of hours
    survives the end of a session); its record."""
    seed = args.seeds[0]
    work = Path(args.work_dir) / ("dry-run" if args.dry_run else "")
    caps = (args.max_steps, args.eval_rows) if args.dry_run else (None, None)
    output_dir = interrupted_run(work, recipe, run_seed(recipe, seed))
    resumed = output_dir is not None
    if resumed:
        argv = ["contrastive-bert", "train", "--output-dir", display_path(output_dir), "--resume"]
    else:
        output_dir = work / f"{recipe.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        suffix = 1
        while output_dir.exists():  # never into an existing folder
            output_dir = output_dir.with_name(f"{output_dir.name.split('~')[0]}~{suffix}")
            suffix += 1
        argv = command(recipe, output_dir, seed, *caps)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    if args.data_dir:
        env["CONTRASTIVE_BERT_DATA"] = str(Path(args.data_dir).resolve())
    executable = str(Path(sys.executable).with_name("contrastive-bert"))
    logger.info("%s: %s%s", recipe.name, " ".join(argv), " (an interrupted run, continued)" if resumed else "")
    work.mkdir(parents=True, exist_ok=True)
    marker = pending_marker(output_dir)
    started = json.loads(marker.read_text(encoding="utf-8")) if resumed else {
        "recipe": recipe.name, "settings_sha256": recipe.settings_sha256, "seed": run_seed(recipe, seed),
        "command": " ".join(argv), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "resumed": 0}
    if resumed:
        started["resumed"] = int(started.get("resumed", 0)) + 1
    marker.write_text(json.dumps(started, indent=1) + "\n", encoding="utf-8")
    status, wall, peak = run_child([executable, *argv[1:]], env, ROOT)
    if status != 0:
        raise RuntimeError(f"{recipe.name}: {' '.join(argv)} exited with status {status} (its folder: {output_dir})")
    marker.unlink()
    written = json.loads((output_dir / "results.json").read_text(encoding="utf-8"))
    outputs = run_outputs(written)
    if "stages" not in written:  # a staged (multi-exit) run scores its final classifier itself: multi_exit.final_layer_accuracy
        outputs["label_head"] = label_head_scores(output_dir / "final", written["recipe"].get("datasets", []),
                                                  env.get("CONTRASTIVE_BERT_DATA"), caps[1])
    if not args.keep_checkpoints:  # final/ and results.json stay; the checkpoints (optimizer state) go
        for folder in [output_dir / "checkpoints", *output_dir.glob("stage-*/checkpoints")]:
            shutil.rmtree(folder, ignore_errors=True)
    claims = []
    for claim in recipe.claims:
        value, std = claim_value(claim, results)
        claims.append({"metric": claim.metric, "source": claim.source, "path": claim.path, "claim": value, "std": std,
                       **judge(measured_value(outputs, claim.metric), value, std)})
    return {
        "recipe": recipe.name, "file": display_path(recipe.path), "recipe_sha256": recipe.file_sha256,
        "settings_sha256": recipe.settings_sha256, "seed": written["recipe"].get("seed"), "seed_added": not recipe.fixes_seed,
        "command": started["command"], "resumed": started["resumed"], "env": {"OMP_NUM_THREADS": env["OMP_NUM_THREADS"],
                                           "CONTRASTIVE_BERT_DATA": env.get("CONTRASTIVE_BERT_DATA")},
        "output_dir": display_path(output_dir), "train_seconds": written.get("train_seconds"),
        "train_seconds_before_resume": written.get("train_seconds_before_resume"), "wall_seconds": wall,
        "peak_rss_mb": peak, "test_figure": trained_figure([c.metric for c in recipe.claims], outputs),
        "claims": claims, "outputs": outputs, "threads": args.threads, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "dry_run": bool(args.dry_run), "max_steps": caps[0], "max_eval_samples": caps[1],
    }


# ---------------------------------------------------------------- the summary


def run_seed(recipe: Recipe, seed: int) -> int:
    """The seed a run of ``recipe`` trains at: the recipe's own, else ``seed`` (added as ``--seed``)."""
    return int(recipe.settings["seed"]) if recipe.fixes_seed else seed


def run_key(recipe: Recipe, seed: int, dry_run: bool = False) -> str:
    """A run of these settings at the seed it trains at (``dry-run/`` first for a smoke test's)."""
    return f"{'dry-run/' if dry_run else ''}{recipe.name}/{recipe.settings_sha256[:16]}/seed-{run_seed(recipe, seed)}"


def estimated_minutes(recipe: Recipe, records: Sequence[Mapping[str, Any]] = ()) -> float:
    """The wall minutes of the recipe's latest real run (any settings), else :data:`ESTIMATED_MINUTES`."""
    walls = [r["wall_seconds"] for r in records if r.get("recipe") == recipe.name and not r.get("dry_run")
             and r.get("wall_seconds") and not r.get("resumed")]  # a resumed run's wall time is its last part's
    return walls[-1] / 60 if walls else float(ESTIMATED_MINUTES.get(recipe.name, DEFAULT_MINUTES))


def _run_summary(record: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("seed", "seed_added", "command", "resumed", "env", "recipe_sha256", "settings_sha256", "output_dir", "train_seconds",
            "train_seconds_before_resume", "wall_seconds", "peak_rss_mb", "test_figure", "date", "threads", "dry_run", "max_steps", "max_eval_samples")
    return {key: record.get(key) for key in keep}


def _defect(claims: Sequence[Mapping[str, Any]]) -> bool:
    return any(c["verdict"] in ("defect", "missing") for c in claims)


def recipe_entry(recipe: Recipe, records: Sequence[Mapping[str, Any]], results: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """One recipe's block of ``recipes.json`` from its runs (one mode: real or dry): its claims read from
    their files now, judged against the run of its current settings at ``seed`` (the latest), the
    verdict and what was corrected (see the module doc)."""
    mine = [r for r in records if r.get("recipe") == recipe.name]
    current = next((r for r in reversed(mine)
                    if r["settings_sha256"] == recipe.settings_sha256 and r.get("seed") == run_seed(recipe, seed)), None)
    claims = []
    for claim in recipe.claims:
        value, std = claim_value(claim, results)
        measured = measured_value(current["outputs"], claim.metric) if current else None
        entry = {"metric": claim.metric, "source": claim.source, "path": claim.path, "claim": value, "std": std, "typed": claim.typed}
        entry.update(judge(measured, value, std) if current else {"measured": None, "difference": None,
                                                                  "tolerance": max(DEFECT_POINTS, std), "verdict": "not run"})
        claims.append(entry)
    if current is None:
        verdict = "not run"
    elif not claims:
        verdict = "no claim"
    else:
        verdict = "defect" if _defect(claims) else "ok"
    earlier = [r for r in mine if r["settings_sha256"] != recipe.settings_sha256]
    figure = trained_figure([c.metric for c in recipe.claims], current["outputs"]) if current else None  # from its outputs: older records named the first claim
    corrected = None
    if verdict == "defect":
        corrected = "pending"
    elif current is not None and current.get("claims") and _defect(current["claims"]) and claims:
        corrected = "claim"  # it fell short of the claims it was run against; the claim changed since
    elif earlier and earlier[-1].get("claims") and _defect(earlier[-1]["claims"]):
        corrected = "recipe"  # the settings changed since a run that fell short
    return {
        "file": display_path(recipe.path), "recipe_sha256": recipe.file_sha256, "settings_sha256": recipe.settings_sha256,
        "estimated_minutes": estimated_minutes(recipe, records), "verdict": verdict, "corrected": corrected,
        "no_claim": recipe.no_claim, "claims": claims,
        "test_figure": figure,
        "run": {**_run_summary(current), "test_figure": figure} if current else None,
        "comments_changed_since_run": bool(current) and current["recipe_sha256"] != recipe.file_sha256,
        "claims_at_run": current.get("claims") if current and corrected == "claim" else None,
        "earlier_runs": [{**_run_summary(r), "claims": r.get("claims")} for r in earlier],
    }


def summarize(records: Sequence[Mapping[str, Any]], recipes: Sequence[Recipe], results: Mapping[str, Any], seed: int = 0) -> dict:
    """``recipes.json`` without its protocol block: per recipe its entry (:func:`recipe_entry`), then the
    names by verdict; ``records`` of one mode (real, or a dry run's)."""
    entries = {recipe.name: recipe_entry(recipe, records, results, seed) for recipe in recipes}
    by = lambda verdict: [name for name, e in entries.items() if e["verdict"] == verdict]  # noqa: E731
    return {"recipes": entries, "defects": by("defect"), "not_run": by("not run"), "no_claim": by("no claim"), "ok": by("ok")}


def grid(recipes: Sequence[Recipe], seed: int, dry_run: bool, records: Sequence[Mapping[str, Any]] = ()) -> Grid:
    """The plan: every recipe once at ``seed``, cheapest first (:func:`estimated_minutes`)."""
    by_name = {recipe.name: recipe for recipe in recipes}
    minutes = {recipe.name: estimated_minutes(recipe, records) for recipe in recipes}
    return Grid([Method(recipe.name) for recipe in recipes], [SETTING], [seed],
                key=lambda run: run_key(by_name[run.method], seed, dry_run), dev_score=lambda record: 0.0,
                order=lambda run: (minutes[run.method], run.method))


def protocol(args: argparse.Namespace) -> dict[str, Any]:
    return {"command": "contrastive-bert train --recipe FILE --output-dir DIR [--seed SEED where the recipe fixes none]",
            "seed": args.seeds[0], "threads": args.threads, "data": "CONTRASTIVE_BERT_DATA",
            "defect": f"a run more than max({DEFECT_POINTS:g} point, the claim's std) below its claim",
            "claims": "each recipe's '# claim:' lines; the claimed value and std read from the results file and path they cite",
            "label_head": "the saved model's label head on the test split (heads.label_embedding.predict): results.json "
                          "holds a logistic-regression probe of the embeddings only",
            "peak_memory": "os.wait4 ru_maxrss of the child (the child and the processes it waited for), MiB",
            "dry_run": bool(args.dry_run)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, output=RESULTS / "recipes.json", run_log=RESULTS / "recipes_runs.jsonl", seeds=[0], device="auto")
    parser.add_argument("--max-runs", type=int, default=None,
                        help="stop after this many recipes (a shell loop of --max-runs 1 picks up code changes between runs)")
    parser.add_argument("--list", action="store_true", help="print the plan (cheapest first, estimated minutes) and exit")
    parser.add_argument("--recipes-dir", default=str(RECIPES), help=f"the recipes checked (default: {display_path(RECIPES)})")
    parser.add_argument("--results-dir", default=str(RESULTS), help="where the claims' results files are read (default: eval/results)")
    parser.add_argument("--work-dir", default=str(WORK_DIR), help=f"the runs' folders (default: {display_path(WORK_DIR)}; dry runs "
                                                                 "and their log and summary under WORK_DIR/dry-run)")
    parser.add_argument("--keep-checkpoints", action="store_true", help="keep each run's checkpoints (default: final/ and results.json only)")
    args = parser.parse_args(argv)
    if args.seeds is not None and len(args.seeds) != 1:
        raise ValueError(f"--seeds: expected one seed (added where a recipe fixes none), got {args.seeds}")
    if not args.dry_run and (args.max_steps is not None or args.eval_rows is not None):
        raise ValueError("--max-steps/--eval-rows: only with --dry-run (a capped run is not the recipe as written)")
    if args.max_runs is not None and args.max_runs < 1:
        raise ValueError(f"--max-runs: expected a positive number, got {args.max_runs}")
    recipes = read_recipes(Path(args.recipes_dir))
    names = [recipe.name for recipe in recipes]
    if args.only is not None:
        unknown = [name for name in args.only if name not in names]
        if not args.only or unknown:
            raise ValueError(f"--only: unknown {', '.join(unknown) or '(none given)'}; expected names among {', '.join(names)}")
    if args.dry_run:  # a smoke test's log and summary stay out of eval/results
        dry = Path(args.work_dir) / "dry-run"
        if Path(args.run_log) == RESULTS / "recipes_runs.jsonl":
            args.run_log = str(dry / "recipes_runs.jsonl")
        if Path(args.output) == RESULTS / "recipes.json":
            args.output = str(dry / "recipes.json")
    seed = args.seeds[0]
    results = ResultsFiles(Path(args.results_dir))
    log = RunLog(args.run_log)
    chosen = [name for name in (args.only or names)]
    if args.list:
        records = list(log.of_mode(args.dry_run).values())
        plan = grid(recipes, seed, args.dry_run, records)
        todo = {run.method for run in plan.plan(log.of_mode(args.dry_run), chosen)}
        by_name = {recipe.name: recipe for recipe in recipes}
        for name in sorted(chosen, key=lambda n: (estimated_minutes(by_name[n], records), n)):
            recipe = by_name[name]
            claims = "; ".join(f"{c.metric} {c.typed}" for c in recipe.claims) or f"no claim ({recipe.no_claim})"
            print(f"{name:<24} ~{estimated_minutes(recipe, records):>4.0f} min  {'to run' if name in todo else 'done':<6}  {claims}")
        return 0
    budget = setup_from_args(args)
    output = Path(args.output)

    def write_summary() -> None:
        records = list(log.of_mode(args.dry_run).values())
        write_results(output, {"protocol": protocol(args), **summarize(records, recipes, results, seed)}, device=args.device)

    if args.summary_only:
        write_summary()
        return 0
    for recipe in recipes:
        for claim in recipe.claims:
            claim_value(claim, results)  # a claim citing a missing file or path fails before any training
    records = list(log.of_mode(args.dry_run).values())
    plan = grid(recipes, seed, args.dry_run, records)
    by_name = {recipe.name: recipe for recipe in recipes}
    for recipe in recipes:  # --max-minutes judges a recipe not yet timed by its estimate
        budget.record(recipe.name, estimated_minutes(recipe, records) * 60)

    def make(run: Run) -> dict:
        return run_one(by_name[run.method], args, results)

    def report(record: dict) -> str:
        figure = record["test_figure"]
        shown = lambda value: "none" if value is None else f"{value:.2f}"  # noqa: E731
        verdicts = ", ".join(f"claim {c['claim']:.2f}: {c['verdict']}" for c in record["claims"])
        return (f"{figure['metric']} {shown(figure['value'])} ({verdicts or 'no claim'}; {record['wall_seconds'] / 60:.1f} min, "
                f"peak {record['peak_rss_mb']:.0f} MiB)")

    return run_plan(plan, log, chosen, args, budget, make, key=lambda run: run_key(by_name[run.method], seed, args.dry_run),
                    write_summary=write_summary, report=report)


if __name__ == "__main__":
    raise SystemExit(main())

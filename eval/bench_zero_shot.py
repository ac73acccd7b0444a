"""Zero-shot on unseen labels: train on 57 Banking77 intents, classify the 20 held-out intents
among their names; free-weight vs encoded label heads, CE vs ACL-Embed, against the untrained model.

- Banking77: 20 intents held out (``random.Random(0)``, the same 20 as before); every trained model
  sees only the train rows of the other 57. Label names are the intents with ``_`` -> space,
  through the template ``"This text is about {}."``.
- Methods: ``untrained`` (the bundled model, no training); ``ce_free`` / ``acl_embed_free`` (free
  label vectors); ``ce_encoded`` / ``acl_embed_encoded`` (label rows = the encoder's embeddings of
  the templated names, trained through, ``label_embedding="encoded"``).
- Scores (x100, test rows): ``heldout20`` zero-shot among the 20 unseen names (``ZeroShotClassifier``,
  the same template); ``seen57`` the trained head on the seen intents' rows (among the 57);
  ``all77_heldout_rows`` / ``all77_seen_rows`` the head extended with the 20 names
  (``add_labels_from_names``) among all 77; ``emotion`` / ``sst2`` zero-shot by their label names
  (1,000-row test samples) as a cross-domain check.
- Budget: 1 epoch (232 steps) per run, 3 seeds; lambda, tau and learning rates fixed (``--help``),
  recorded in the results.
- ``--tune``: the same methods' epochs and lambda chosen on a dev split of *intents* (10 of the
  57 seen intents held out as well, ``random.Random(1)``; train on the other 47; dev score =
  zero-shot accuracy on the train rows of those 10 among their names), configurations
  ``TUNE_CONFIGS``, seed 0; then the chosen configuration with the seeds on the 57/20 split,
  logged as ``<method>_tuned`` (no test row is read to choose).

The protocol (configurations, the dev choice, seeds, the result shape) is the shared one of
:mod:`contrastive_bert.benchmarking.protocol`: this script is its methods (:func:`methods`) and its
scoring. Resumable (``contrastive_bert.benchmarking.RunLog``): one line per finished run in
``zero_shot_runs.jsonl``, skipped on restart (the run keys are those logged since the first run);
``bench_zero_shot.json`` (``settings -> unseen20 -> method -> entry``, the gains over the untrained
model in ``comparisons``) rebuilt from it after every run.

    OMP_NUM_THREADS=1 nohup .venv/bin/python eval/bench_zero_shot.py > /tmp/bench_zero_shot.log 2>&1 &
"""

from __future__ import annotations

import argparse
import logging
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from contrastive_bert.benchmarking import (
    RunLog,
    add_common_arguments,
    json_safe,
    mean_std,
    run_key,
    selected,
    setup_from_args,
    write_results,
)
from contrastive_bert.benchmarking.protocol import Grid, Method, Run

logger = logging.getLogger("bench_zero_shot")

RESULTS = Path(__file__).resolve().parent / "results"
TEMPLATE = "This text is about {}."
METHODS = {
    "ce_free": {"method": "ce", "label_embedding": "free"},
    "acl_embed_free": {"method": "acl_embed", "label_embedding": "free"},
    "ce_encoded": {"method": "ce", "label_embedding": "encoded"},
    "acl_embed_encoded": {"method": "acl_embed", "label_embedding": "encoded"},
}
SETTING = "unseen20"  # the one setting: 57 seen intents to train on, 20 unseen to classify by name
CHECK_SAMPLES = 1000
DEV_HELD_OUT = 10
TUNE_CONFIGS = [{"epochs": 1.0, "contrastive_weight": 0.5}, {"epochs": 3.0, "contrastive_weight": 0.5},
                {"epochs": 1.0, "contrastive_weight": 1.0}]  # contrastive_weight unused by CE


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_arguments(parser, output=RESULTS / "bench_zero_shot.json", run_log=RESULTS / "zero_shot_runs.jsonl",
                         seeds=[0, 1, 2], methods=list(METHODS))
    parser.add_argument("--held-out", type=int, default=20)
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--head-learning-rate", type=float, default=5e-3)
    parser.add_argument("--contrastive-weight", type=float, default=0.5)
    parser.add_argument("--temperature", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=32)
    parser.add_argument("--tune", action="store_true",
                        help="choose epochs and lambda per method on a dev split of intents, then run the chosen ones")
    return parser.parse_args(argv)


def readable(name: str) -> str:
    return name.replace("_", " ")


def _sample(split, n: int | None, seed: int = 0):
    return split if n is None or len(split) <= n else split.shuffle(seed=seed).select(range(n))


def load_data(args) -> dict:
    """The 57/20 Banking77 split (train of the 57; test rows of each side) and the two check sets."""
    from datasets import ClassLabel

    from contrastive_bert.data import load_dataset

    # every train row: this benchmark's dev split is one of *intents* (below), not the package's carved rows
    banking = load_dataset("banking77", data_dir=args.data_dir, dev_split=False)
    names = list(banking["train"].features["label"].names)
    held = sorted(random.Random(0).sample(range(len(names)), args.held_out))
    seen = [k for k in range(len(names)) if k not in held]
    seen_index = {k: i for i, k in enumerate(seen)}
    train = banking["train"].filter(lambda row: row["label"] in seen_index)
    train = train.map(lambda row: {"label": seen_index[row["label"]]})
    train = train.cast_column("label", ClassLabel(names=[readable(names[k]) for k in seen])).select_columns(["text", "label"])
    test = _sample(banking["test"], args.eval_rows)
    checks = {}
    for name in ("emotion", "sst2"):
        split = _sample(load_dataset(name, data_dir=args.data_dir)["test"], min(CHECK_SAMPLES, args.eval_rows or CHECK_SAMPLES))
        checks[name] = {"texts": list(split["text"]), "gold": np.asarray(split["label"]),
                        "names": [readable(n) for n in split.features["label"].names]}
    dev_intents = sorted(random.Random(1).sample(seen, DEV_HELD_OUT))
    dev_train_index = {k: i for i, k in enumerate(k for k in seen if k not in dev_intents)}
    dev_train = banking["train"].filter(lambda row: row["label"] in dev_train_index)
    dev_train = dev_train.map(lambda row: {"label": dev_train_index[row["label"]]})
    dev_train = dev_train.cast_column("label", ClassLabel(names=[readable(names[k]) for k in dev_train_index]))
    dev_rows = banking["train"].filter(lambda row: row["label"] in dev_intents)
    dev = {"train": dev_train.select_columns(["text", "label"]), "intents": dev_intents, "texts": list(dev_rows["text"]),
           "gold": np.asarray([dev_intents.index(y) for y in dev_rows["label"]])}
    return {"names": [readable(n) for n in names], "seen": seen, "held": held, "train": train,
            "test_texts": list(test["text"]), "test_gold": np.asarray(test["label"]), "checks": checks, "dev": dev}


def dev_score(model, data: dict) -> float:
    """Zero-shot accuracy (x100) on the train rows of the 10 dev intents among their names."""
    names, dev = data["names"], data["dev"]
    return float((zero_shot(model, dev["texts"], [names[k] for k in dev["intents"]]) == dev["gold"]).mean() * 100)


def zero_shot(model, texts: list[str], names: list[str]) -> np.ndarray:
    """Index of the most similar templated name per text."""
    from contrastive_bert.inference import ZeroShotClassifier

    return ZeroShotClassifier(model, names, template=TEMPLATE, batch_size=128).similarities(texts).argmax(axis=1)


def score(model, data: dict, trained: bool) -> dict[str, float]:
    """Every score of one model (see the module doc)."""
    from contrastive_bert.heads.label_embedding import add_labels_from_names, find_label_head

    names, seen, held = data["names"], data["seen"], data["held"]
    texts, gold = data["test_texts"], data["test_gold"]
    is_held = np.isin(gold, held)
    held_texts = [t for t, h in zip(texts, is_held) if h]
    held_gold = np.asarray([held.index(y) for y in gold[is_held]])
    scores = {"heldout20": float((zero_shot(model, held_texts, [names[k] for k in held]) == held_gold).mean() * 100)}
    seen_texts = [t for t, h in zip(texts, is_held) if not h]
    seen_gold = np.asarray([seen.index(y) for y in gold[~is_held]])
    if trained:
        head = find_label_head(model)
        with torch.no_grad():
            embeddings = model.encode(texts, batch_size=128, convert_to_tensor=True, show_progress_bar=False).float()
            scores["seen57"] = float((head.logits(embeddings[torch.as_tensor(~is_held)]).argmax(dim=1).cpu().numpy() == seen_gold).mean() * 100)
            add_labels_from_names(model, [names[k] for k in held], template=TEMPLATE)
            predicted = np.asarray(seen + held)[head.logits(embeddings).argmax(dim=1).cpu().numpy()]
    else:
        scores["seen57"] = float((zero_shot(model, seen_texts, [names[k] for k in seen]) == seen_gold).mean() * 100)
        predicted = zero_shot(model, texts, names)
    scores["all77_heldout_rows"] = float((predicted[is_held] == gold[is_held]).mean() * 100)
    scores["all77_seen_rows"] = float((predicted[~is_held] == gold[~is_held]).mean() * 100)
    for name, check in data["checks"].items():
        scores[name] = float((zero_shot(model, check["texts"], check["names"]) == check["gold"]).mean() * 100)
    return scores


def run_spec(spec: dict, data: dict, args) -> dict:
    from contrastive_bert.models import load_model
    from contrastive_bert.training.acl import train_label_classifier
    from contrastive_bert.training.recipe import TrainingRecipe
    from contrastive_bert.training.step_timer import StepTimer

    torch.manual_seed(spec["seed"])
    model = load_model("default", device=args.device)
    model.max_seq_length = args.max_seq_length
    record = {**spec, "train_rows": 0, "steps": 0, "train_seconds": 0.0}
    phase_dev = spec.get("phase") == "dev"
    train = data["dev"]["train"] if phase_dev else data["train"]
    epochs = spec.get("epochs", args.epochs)
    if spec["method"] != "untrained":
        options = METHODS[spec["method"].removesuffix("_tuned")]
        recipe = TrainingRecipe(
            datasets=["banking77"], epochs=epochs, max_steps=max_steps(args), batch_size=args.batch_size,
            learning_rate=args.learning_rate, head_learning_rate=args.head_learning_rate, seed=spec["seed"],
            max_seq_length=args.max_seq_length, logging_steps=50, save_steps=10**6, eval_steps=10**6, dev_task=None, eval_tasks=[],
        )
        loss_options = {"label_embedding": options["label_embedding"], "label_template": TEMPLATE}
        if options["method"] != "ce":
            loss_options.update(contrastive_weight=spec.get("contrastive_weight", args.contrastive_weight),
                                temperature=args.temperature)
        timer = StepTimer()
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as output_dir:
            trainer, _ = train_label_classifier(model, train, train.features["label"].names,
                                                options["method"], recipe, output_dir, callbacks=[timer], **loss_options)
        record.update(train_rows=len(train), steps=trainer.state.global_step,
                      train_seconds=time.perf_counter() - start,
                      step_seconds_median=float(np.median(timer.durations)) if timer.durations else None)
    if phase_dev:
        record["dev"] = dev_score(model, data)
    else:
        record["scores"] = score(model, data, trained=spec["method"] != "untrained")
    return record


def tune_configs(method: str) -> tuple[dict, ...]:
    """The configurations a method tries on the dev intents (CE has no lambda to tune)."""
    return tuple(c for c in TUNE_CONFIGS if method.startswith("acl") or c["contrastive_weight"] == TUNE_CONFIGS[0]["contrastive_weight"])


def methods() -> list[Method]:
    """``untrained``; each of ``METHODS`` at the fixed settings; ``<method>_tuned``: its epochs and
    lambda chosen on the dev intents, then every seed of the choice."""
    fixed = [Method(name, "acl", options=METHODS[name]) for name in METHODS]
    tuned = [Method(f"{name}_tuned", "acl", tune_configs(name), options=METHODS[name], separate_dev=True) for name in METHODS]
    return [Method("untrained", seeds=(0,)), *fixed, *tuned]


def spec_of(run: Run, grid: Grid) -> dict:
    """The run's spec as this benchmark has always logged it (its run key is made from it)."""
    if run.phase == "dev":
        config = grid.method(run.method).configs[run.config]
        return {"method": run.method.removesuffix("_tuned"), "seed": run.seed, "phase": "dev", **config}
    if run.method.endswith("_tuned"):
        return {"method": run.method, "seed": run.seed, **grid.method(run.method).configs[run.config], "dev": run.dev}
    return {"method": run.method, "seed": run.seed}


UNTRAINED_DEV = Run(SETTING, "untrained", 0, 0, "dev")  # the dev score to beat (--tune)


def grid(args) -> Grid:
    def key(run: Run) -> str:
        return run_key({"epochs": args.epochs, **spec_of(run, plan), "max_steps": max_steps(args), "eval_rows": args.eval_rows})

    plan = Grid(methods(), [SETTING], args.seeds, key=key, dev_score=lambda record: record["dev"],
                tie_break=lambda method, config: -config["epochs"])  # ties: the cheaper run
    return plan


def test_scores(record: dict) -> dict[str, float]:
    return {k: v for k, v in record["scores"].items() if k not in ("emotion", "sst2")}


def general_block(records: list[dict]) -> dict:
    """The cross-domain check: zero-shot emotion and SST-2 by their label names."""
    return {f"zero_shot_{name}": mean_std([r["scores"][name] for r in records]) for name in ("emotion", "sst2")}


def summarize(log, args) -> dict:
    """``bench_zero_shot.json`` (without the environment): the shared result shape
    (``settings -> unseen20 -> method -> entry``) and each method's gain over the untrained model."""
    plan = grid(args)
    entries = plan.results(log, test=test_scores, general=general_block,
                           dev=lambda record: {"unseen10": record["dev"]} if record.get("phase") == "dev" else None).get(SETTING, {})
    untrained_dev = log.get(plan.key(UNTRAINED_DEV))
    if untrained_dev is not None and "untrained" in entries:
        entries["untrained"]["dev"] = {"unseen10": untrained_dev["dev"]}
    base = entries.get("untrained")
    gains = {}
    if base and base["test"]:
        for method, entry in entries.items():
            if method != "untrained" and entry["test"]:
                gains[method] = {k: entry[block][k]["mean"] - base[block][k]["mean"] for block in ("test", "general") for k in base[block]}
    held = next((r.get("held_out_names") for r in log.values()), None)
    return {
        "settings": {SETTING: entries} if entries else {},
        "comparisons": {SETTING: {"gain_over_untrained": gains}},
        "protocol": {
            "held_out_intents": held,
            "template": TEMPLATE, "epochs": args.epochs, "max_steps_cap": max_steps(args), "eval_rows_cap": args.eval_rows,
            "learning_rate": args.learning_rate, "head_learning_rate": args.head_learning_rate,
            "contrastive_weight": args.contrastive_weight, "temperature": args.temperature,
            "batch_size": args.batch_size, "max_seq_length": args.max_seq_length,
            "check_samples": CHECK_SAMPLES,
            "note": "untuned rows: lambda, tau and learning rates fixed, 1 epoch on the 57 seen intents (7,418 rows); "
                    "<method>_tuned rows: epochs and lambda chosen on the 10 dev intents (TUNE_CONFIGS, train on 47), "
                    "tau and learning rates fixed",
            "tune_configs": TUNE_CONFIGS, "dev_held_out_intents": DEV_HELD_OUT,
        },
    }


def max_steps(args) -> int:
    """The step cap as the recipe and the run keys spell it (-1: none)."""
    return args.max_steps or -1


def main(argv=None) -> int:
    args = parse_args(argv)
    budget = setup_from_args(args)
    names = selected(args, list(METHODS))
    log = RunLog(args.run_log)

    def write_summary() -> None:
        write_results(args.output, summarize({r["key"]: r for r in log.records()}, args), device=args.device, indent=1)

    if args.summary_only:
        write_summary()
        return 0
    data = load_data(args)
    held_names = [data["names"][k] for k in data["held"]]
    plan = grid(args)
    order = ["untrained", *(f"{m}_tuned" if args.tune else m for m in names)]
    while True:
        runs = plan.plan(log, order)  # again after every run: a tuned method's seeds follow its dev choice
        if args.tune and not log.done(plan.key(UNTRAINED_DEV)):
            runs.insert(0, UNTRAINED_DEV)
        if not runs:
            break
        run = runs[0]
        spec, key = spec_of(run, plan), plan.key(run)
        if not budget.allows(spec.get("phase", "test")):
            break
        logger.info("run %s", key)
        with budget.timed(spec.get("phase", "test")):
            record = run_spec(spec, data, args)
        record.update(held_out_names=held_names, dry_run=args.dry_run)
        log.append(key, json_safe(record))
        logger.info("done: %s", record.get("scores", record.get("dev")))
        write_summary()
    write_summary()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``contrastive-bert eval``: score a model on registry tasks, print a table, write JSON."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a model on STS / classification / answer-selection tasks",
        description="Evaluate a model on registry tasks (test split): STS Spearman x100, "
        "logistic-regression and k-NN accuracy, answer-selection MRR/MAP.",
    )
    parser.add_argument("--model", default="default", help="'default' (bundled all-MiniLM-L6-v2), a local folder or a hub id")
    parser.add_argument("--tasks", default="stsb", help="comma-separated task names (default: stsb)")
    parser.add_argument("--data-dir", default=None, help="local data root (default: $CONTRASTIVE_BERT_DATA, else the hub)")
    parser.add_argument("--split", default="test", help="split to score (default: test)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--mteb", action="store_true", help="evaluate through mteb.evaluate (local data as mteb tasks; stock tasks with --online)")
    parser.add_argument("--online", action="store_true", help="with --mteb: use mteb's stock tasks from the hub")
    parser.add_argument("--mteb-output", default=None, help="with --mteb: folder for mteb's own result files")
    parser.add_argument("--output", default=None, help="write {task: {main_score, ...}} JSON here")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    parser.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    from contrastive_bert.data import load_dataset, resolve_data_dir
    from contrastive_bert.evaluation.tasks import check_tasks, evaluate_split
    from contrastive_bert.models import load_model, resolve_model_name

    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if args.mteb:
        return _run_mteb(args, names)
    tasks = check_tasks(names)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size: expected a positive integer, got {args.batch_size}")
    resolve_data_dir(args.data_dir)
    resolve_model_name(args.model)
    if args.output and Path(args.output).exists() and not args.overwrite:
        raise ValueError(f"--output: {args.output} exists; pass --overwrite to replace it")
    data = {task: load_dataset(task, data_dir=args.data_dir) for task in tasks}  # read once, checked before the model loads
    for task in tasks:
        if args.split not in data[task]:
            raise ValueError(f"--split: task {task!r} has no {args.split!r} split")
    model = load_model(args.model)
    results = {task: evaluate_split(model, task, data[task], args.split, batch_size=args.batch_size) for task in tasks}
    print(format_results(results))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(results, indent=2))
    return 0


def _run_mteb(args: argparse.Namespace, names: list[str]) -> int:
    from contrastive_bert.evaluation.mteb_tasks import get_mteb_tasks, run_mteb  # imports mteb: slow, so only here
    from contrastive_bert.models import load_model

    if args.output and Path(args.output).exists() and not args.overwrite:
        raise ValueError(f"--output: {args.output} exists; pass --overwrite to replace it")
    get_mteb_tasks(names, data_dir=args.data_dir, online=args.online)  # name checks before the model loads
    model = load_model(args.model)
    results = run_mteb(model, names, data_dir=args.data_dir, output_folder=args.mteb_output, online=args.online,
                       batch_size=args.batch_size)
    print(format_results({name: {k: v for k, v in scores.items() if isinstance(v, (int, float))} for name, scores in results.items()}))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(results, indent=2, default=str))
    return 0


def format_results(results: dict[str, dict]) -> str:
    width = max([18] + [len(task) + 2 for task in results])
    lines = [f"{'task':<{width}}{'main_score':>12}  other metrics"]
    for task, scores in results.items():
        others = ", ".join(f"{k}={v:.2f}" for k, v in scores.items() if k != "main_score" and not k.startswith("num_"))
        lines.append(f"{task:<{width}}{scores['main_score']:>12.2f}  {others}")
    return "\n".join(lines)

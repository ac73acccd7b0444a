"""``contrastive-bert eval``: score a model on registry tasks, print a table, write JSON.

``--model-backend onnx`` / ``onnx-int8`` scores the model as ONNX Runtime runs it on the CPU,
``torch-bf16`` as torch runs it under bf16 autocast (neither with ``--mteb``, whose wrapper loads
the model itself)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from contrastive_bert.cli.arguments import (
    add_batch_size_argument,
    add_data_dir_argument,
    add_device_argument,
    add_devices_argument,
    add_model_argument,
    add_model_backend_argument,
    add_output_argument,
    add_overwrite_argument,
    add_split_argument,
    add_tasks_argument,
    check_model_backend,
    check_output,
    model_devices,
    positive_int,
    replace_output,
)

logger = logging.getLogger(__name__)


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a model on STS / classification / answer-selection / retrieval tasks",
        description="Evaluate a model on registry tasks (test split): STS Spearman x100, "
        "logistic-regression and k-NN accuracy, answer-selection MRR/MAP, retrieval nDCG@10 "
        "(exact cosine search over the whole corpus, the MTEB protocol).",
    )
    add_model_argument(parser)
    add_tasks_argument(parser)
    add_data_dir_argument(parser)
    add_split_argument(parser, "test", "split to score")
    add_batch_size_argument(parser, default=64)
    parser.add_argument("--max-eval-samples", type=positive_int, default=None, metavar="N",
                        help="score N shuffled rows of each task's split (a retrieval task: N queries, searched over "
                        "the whole corpus; a classification task also fits its probe on N training rows), for a quick "
                        "estimate; the output says which tasks were cut (default: every row)")
    parser.add_argument("--mteb", action="store_true", help="evaluate through mteb.evaluate (local data as mteb tasks; stock tasks with --online)")
    parser.add_argument("--online", action="store_true", help="with --mteb: use mteb's stock tasks from the hub")
    parser.add_argument("--mteb-output-dir", default=None, metavar="DIR", help="with --mteb: folder for mteb's own result files")
    parser.add_argument("--embeddings-dir", default=None, metavar="DIR",
                        help="retrieval tasks: keep each corpus's embeddings in DIR (a later eval with the same model "
                        "reads them back instead of encoding the corpus; an interrupted encoding resumes; another "
                        "model's are replaced) (default: encoded in memory)")
    add_output_argument(parser, "write {task: {main_score, ...}} JSON to this file")
    add_overwrite_argument(parser)
    add_device_argument(parser)
    add_devices_argument(parser)
    add_model_backend_argument(parser)
    parser.set_defaults(func=run_eval)
    return parser


def _write_results(path: Path | None, results: dict) -> None:
    if path is not None:
        replace_output(path).write_text(json.dumps(results, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")


def _check_encoding_flags(args: argparse.Namespace, tasks: list[str]) -> None:
    """``--embeddings-dir`` and ``--devices`` serve retrieval tasks (their corpora) only."""
    from contrastive_bert.data import get_dataset

    given = [flag for flag, value in (("--embeddings-dir", args.embeddings_dir), ("--devices", args.devices)) if value]
    if given and not any(get_dataset(task).task_type == "retrieval" for task in tasks):
        raise ValueError(f"{given[0]}: for retrieval tasks (their corpus is encoded); none of --tasks {','.join(tasks)} is one")
    if args.embeddings_dir and Path(args.embeddings_dir).expanduser().is_file():
        raise ValueError(f"--embeddings-dir: {args.embeddings_dir} is a file; expected a folder")


def run_eval(args: argparse.Namespace) -> int:
    from contrastive_bert.data import load_dataset, resolve_data_dir
    from contrastive_bert.embedding_store import check_devices
    from contrastive_bert.evaluation.tasks import check_tasks, evaluate_tasks

    from contrastive_bert.models import check_device, check_model_name, load_model

    names = list(args.tasks)
    output = check_output(args.output, args.overwrite)
    if args.mteb and args.model_backend != "torch":
        raise ValueError(f"--model-backend: {args.model_backend} not with --mteb (mteb's wrapper loads the model "
                         "itself, as a SentenceTransformer in fp32); drop --mteb to score it with this package's scorer")
    check_model_backend(args)
    check_model_name(args.model)
    device, devices = model_devices(args)
    if args.mteb:
        unused = [flag for flag, value in (("--max-eval-samples", args.max_eval_samples is not None),
                                           ("--embeddings-dir", args.embeddings_dir), ("--devices", args.devices)) if value]
        if unused:
            raise ValueError(f"{unused[0]}: not with --mteb (mteb scores whole splits and encodes them itself)")
        check_device(device)
        return _run_mteb(args, names, output)
    tasks = check_tasks(names)
    _check_encoding_flags(args, tasks)
    check_devices(devices, "--devices")  # the list first: the model's device is one of them
    check_device(device)
    resolve_data_dir(args.data_dir)
    data = {task: load_dataset(task, data_dir=args.data_dir) for task in tasks}  # read once, checked before the model loads
    for task in tasks:
        if args.split not in data[task]:
            raise ValueError(f"--split: task {task!r} has no {args.split!r} split")
    notes = []
    if args.max_eval_samples is not None:
        data, notes = capped_data(data, args.split, args.max_eval_samples)
    model = load_model(args.model, device=device, backend=args.model_backend)
    results = evaluate_tasks(model, tasks, split=args.split, batch_size=args.batch_size, data=data,
                             show_progress_bar=logger.isEnabledFor(logging.INFO), embeddings_dir=args.embeddings_dir,
                             devices=devices)
    print(format_results(results))
    for note in notes:
        print(note)
    if args.embeddings_dir:
        print(f"corpus embeddings kept in {args.embeddings_dir} (a later eval with this model reads them back)")
    _write_results(output, results)
    return 0


def capped_data(data: dict, split: str, rows: int) -> tuple[dict, list[str]]:
    """``data`` with each task cut to ``rows`` shuffled rows per split (a retrieval task: ``rows``
    queries per split, the whole corpus kept; :func:`~contrastive_bert.evaluation.tasks.cap_rows`),
    and one line per task that lost rows, saying what it is scored on."""
    from contrastive_bert.data import get_dataset
    from contrastive_bert.data.beir import RetrievalData
    from contrastive_bert.evaluation.tasks import cap_rows

    capped, notes = {}, []
    for task, loaded in data.items():
        capped[task] = cap_rows(loaded, rows)
        flag = f"{task}: --max-eval-samples {rows}: scored on"
        if isinstance(capped[task], RetrievalData):
            full = loaded if isinstance(loaded, RetrievalData) else RetrievalData.from_splits(loaded)
            before, after = _judged(full, split), _judged(capped[task], split)
            if after < before:
                notes.append(f"{flag} {after} of its {before} {split} queries, searched over the whole corpus "
                             f"({len(full.corpus)} documents)")
            continue
        scored, full = len(capped[task][split]), len(loaded[split])
        fitted = "train" in loaded and split != "train" and get_dataset(task).task_type == "classification"
        if scored < full or (fitted and len(capped[task]["train"]) < len(loaded["train"])):
            note = f"{flag} {scored} of its {full} {split} rows"
            if fitted:
                note += f", its classifier fitted on {len(capped[task]['train'])} of its {len(loaded['train'])} train rows"
            notes.append(note)
    return capped, notes


def _judged(data, split: str) -> int:
    """Queries of ``split`` the retrieval scorer evaluates (judged, with a query text)."""
    return sum(1 for query in data.split(split) if query in data.queries)


def _run_mteb(args: argparse.Namespace, names: list[str], output: Path | None) -> int:
    from contrastive_bert.evaluation.mteb_tasks import get_mteb_tasks, run_mteb  # imports mteb: slow, so only here
    from contrastive_bert.models import load_model

    get_mteb_tasks(names, data_dir=args.data_dir, online=args.online)  # name checks before the model loads
    model = load_model(args.model, device=args.device)
    results = run_mteb(model, names, data_dir=args.data_dir, output_folder=args.mteb_output_dir, online=args.online,
                       batch_size=args.batch_size)
    print(format_results({name: {k: v for k, v in scores.items() if isinstance(v, (int, float))} for name, scores in results.items()}))
    _write_results(output, results)
    return 0


def format_results(results: dict[str, dict]) -> str:
    width = max([18] + [len(task) + 2 for task in results])
    lines = [f"{'task':<{width}}{'main_score':>12}  other metrics"]
    for task, scores in results.items():
        others = ", ".join(f"{k}={v:.2f}" for k, v in scores.items() if k != "main_score" and not k.startswith("num_"))
        lines.append(f"{task:<{width}}{scores['main_score']:>12.2f}  {others}")
    return "\n".join(lines)

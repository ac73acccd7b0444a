"""``contrastive-bert mine``: offline hard-negative mining of a pair data set into a new data set.

A thin wrapper around :func:`sentence_transformers.util.mine_hard_negatives` (FAISS search,
range_min/range_max, absolute/relative margins, max_score, sampling strategy): it only loads
the pairs (a registered data set or a local file), the model and the corpus, and writes the result.
``--model-backend onnx`` / ``onnx-int8`` encodes through ONNX Runtime on the CPU, ``torch-bf16``
under bf16 autocast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from contrastive_bert.cli.arguments import (
    DEFAULT_MODEL_HELP,
    add_batch_size_argument,
    add_data_dir_argument,
    add_dataset_argument,
    add_device_argument,
    add_devices_argument,
    add_index_arguments,
    add_max_samples_argument,
    add_model_argument,
    add_model_backend_argument,
    add_overwrite_argument,
    add_split_argument,
    check_model_backend,
    check_output,
    model_devices,
    replace_output,
)

OUTPUT_FILES = (".jsonl", ".json", ".csv", ".parquet")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "mine",
        help="mine hard negatives for (anchor, positive) pairs and write a new data set",
        description=(
            "Mine hard negatives with FAISS for a pair data set (a registered name such as stsb, mrpc, "
            "answer_selection, or a .csv/.tsv/.jsonl/.parquet file with anchor/positive columns) "
            "and write (anchor, positive, negative...) rows: a .jsonl/.csv/.parquet file (--output; "
            "train on it with train --datasets FILE) or a datasets folder (--output-dir). A retrieval data set "
            "(scifact, nfcorpus, a BEIR folder) mines its own corpus for its queries and never takes a "
            "judged-relevant document as a negative."
        ),
    )
    add_dataset_argument(parser, "registered data set name, a local pair file or a BEIR folder")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--output", metavar="FILE", help="write a .jsonl, .csv or .parquet file")
    where.add_argument("--output-dir", metavar="DIR", help="write a datasets folder (Dataset.save_to_disk)")
    add_overwrite_argument(parser)
    add_model_argument(parser, help="model used to embed: " + DEFAULT_MODEL_HELP)
    add_split_argument(parser, "train", "split of a registered data set")
    add_data_dir_argument(parser)
    parser.add_argument("--anchor-column", default=None, metavar="COLUMN",
                        help="for files: the column to read as the anchor (default: a column named anchor)")
    parser.add_argument("--positive-column", default=None, metavar="COLUMN",
                        help="for files: the column to read as the positive (default: a column named positive)")
    parser.add_argument("--min-pair-score", type=float, default=0.8, metavar="X",
                        help="STS-style data: keep pairs scoring >= this (default: 0.8)")
    parser.add_argument("--corpus", default=None, metavar="FILE", help="text file, one candidate per line (default: the positives)")
    add_max_samples_argument(parser, "mine for the first N pairs only")
    parser.add_argument("--num-negatives", type=int, default=3, metavar="N", help="negatives per pair, on every data set: N rows of one negative each (--output-format triplet) "
                             "or N negative columns (n-tuple) (default: 3)")
    parser.add_argument("--range-min", type=int, default=0, metavar="N", help="skip the N most similar candidates (default: 0)")
    parser.add_argument("--range-max", type=int, default=None, metavar="N", help="consider only the N most similar candidates")
    parser.add_argument("--absolute-margin", type=float, default=None, metavar="X",
                        help="a negative must score below the positive's score minus X")
    parser.add_argument("--relative-margin", type=float, default=0.05, metavar="X",
                        help="a negative must score below (1 - X) x the positive's score: NV-Retriever's TopK-PercPos (default: 0.05)")
    parser.add_argument("--max-score", type=float, default=None, metavar="X", help="drop candidates scoring above X")
    parser.add_argument("--sampling-strategy", choices=("top", "random"), default="top",
                        help="take the hardest candidates that pass the filters, or a random draw of them (default: top)")
    parser.add_argument("--output-format", choices=("triplet", "n-tuple", "labeled-pair", "labeled-list"), default="triplet",
                        help="row layout of the mined data set, as in sentence-transformers' mine_hard_negatives (default: triplet)")
    add_batch_size_argument(parser, default=64)
    parser.add_argument("--no-faiss", action="store_true", help="exact torch search instead of FAISS")
    add_index_arguments(parser, "retrieval data sets: the index searched; auto: exact up to 1,000,000 documents, FAISS IVF above "
                        "(an approximate index logs its recall@100 against exact search on 100 sample queries) (default: auto)")
    parser.add_argument("--embeddings-dir", default=None, metavar="DIR",
                        help="retrieval data sets: keep the corpus embeddings in DIR (a rerun with the same model reads them; "
                        "default: OUTPUT.embeddings, removed when mining ends, so an interrupted run resumes its encoding)")
    add_device_argument(parser)
    add_devices_argument(parser)
    add_model_backend_argument(parser)
    parser.set_defaults(func=run_mine)
    return parser


def _load_pairs(args: argparse.Namespace):
    """The (anchor, positive) Dataset to mine for: a registered data set or a data file (its format
    inferred from its columns, or pairs of ``--anchor-column``/``--positive-column``)."""
    from contrastive_bert.data import load_dataset, positive_pairs, resolve_dataset_argument

    columns = {c: ours for c, ours in ((args.anchor_column, "anchor"), (args.positive_column, "positive")) if c}
    spec = resolve_dataset_argument(args.dataset, format="pairs" if columns else None, columns=columns)
    split = load_dataset(spec, split=args.split, data_dir=args.data_dir)
    return positive_pairs(split, min_score=args.min_pair_score, keep_negatives=False)


def _check_args(args: argparse.Namespace) -> Path:
    if args.num_negatives < 1:
        raise ValueError(f"--num-negatives: expected >= 1, got {args.num_negatives}")
    if args.range_min < 0:
        raise ValueError(f"--range-min: expected >= 0, got {args.range_min}")
    if args.range_max is not None and args.range_max <= args.range_min:
        raise ValueError(f"--range-max: expected > --range-min ({args.range_min}), got {args.range_max}")
    if args.relative_margin is not None and not 0 <= args.relative_margin <= 1:
        raise ValueError(f"--relative-margin: expected a value in [0, 1], got {args.relative_margin}")
    if args.output is not None and Path(args.output).suffix.lower() not in OUTPUT_FILES:
        raise ValueError(f"--output: expected a {', '.join(OUTPUT_FILES)} file, got {args.output}; use --output-dir for a folder")
    check_model_backend(args)
    flag = "--output" if args.output is not None else "--output-dir"
    return check_output(args.output if args.output is not None else args.output_dir, args.overwrite, flag)


def _write(dataset, output: Path) -> None:
    replace_output(output)
    suffix = output.suffix.lower()
    if suffix in (".jsonl", ".json"):
        dataset.to_json(str(output), lines=True, force_ascii=False)
    elif suffix == ".csv":
        dataset.to_csv(str(output), index=False)
    elif suffix == ".parquet":
        dataset.to_parquet(str(output))
    else:
        dataset.save_to_disk(str(output))


def _is_retrieval(args: argparse.Namespace) -> bool:
    from contrastive_bert.data import resolve_dataset_argument

    if args.anchor_column or args.positive_column:
        return False
    return resolve_dataset_argument(args.dataset).task_type == "retrieval"


def _as_triplets(mined, num_negatives: int):
    """n-tuple rows (anchor, positive, negative_1..negative_n) as triplets, one row per negative (the
    layout sentence-transformers' ``mine_hard_negatives`` writes): a pair's rows are consecutive."""
    import datasets

    columns = [f"negative_{i + 1}" for i in range(num_negatives)]
    rows = {"anchor": [], "positive": [], "negative": []}
    for row in mined:
        for column in columns:
            rows["anchor"].append(row["anchor"])
            rows["positive"].append(row["positive"])
            rows["negative"].append(row[column])
    return datasets.Dataset.from_dict(rows)


def _mining_summary(report, args: argparse.Namespace, kept_pairs: int) -> str:
    """One line: how many (query, document) pairs were kept and how many dropped, and why."""
    line = f"{report.kept} of {report.pairs} (query, relevant document) pairs kept {args.num_negatives} negative(s) each"
    reasons = []
    if report.dropped_near_positive:
        threshold = f"{(1 - args.relative_margin) * 100:g}% of the positive's score" if args.relative_margin else "the positive's score"
        reasons.append(f"{report.dropped_near_positive} dropped: among their {args.range_max or 100} most similar unjudged "
                       f"documents fewer than {args.num_negatives} score at most {threshold} (--relative-margin "
                       f"{args.relative_margin:g} drops near-positives, likely unjudged relevant documents; lower it or "
                       f"raise --range-max to keep more)")
    if report.dropped_small_corpus:
        reasons.append(f"{report.dropped_small_corpus} dropped: the corpus holds fewer than {args.num_negatives} "
                       f"unjudged documents for their query within --range-max")
    if kept_pairs < report.kept:
        reasons.append(f"the first {kept_pairs} kept pairs written (--max-samples {args.max_samples})")
    return "; ".join([line, *reasons])


def _negatives_per_pair(pairs, mined, output_format: str, num_negatives: int) -> dict[tuple[str, str], int]:
    """``{(anchor, positive): negatives mined for it}`` for every distinct pair of ``pairs``, read
    from the rows ``mine_hard_negatives`` wrote in ``output_format`` (0: the pair was dropped)."""
    from collections import Counter

    counts = dict.fromkeys(zip(pairs["anchor"], pairs["positive"]), 0)
    if output_format == "triplet":  # one row per negative
        counts.update(Counter(zip(mined["anchor"], mined["positive"])))
    elif output_format == "n-tuple":  # a row only with all its negatives
        counts.update(dict.fromkeys(zip(mined["anchor"], mined["positive"]), num_negatives))
    elif output_format == "labeled-list":  # (anchor, [positive, negatives...], [1, 0, ...])
        counts.update({(a, docs[0]): list(labels).count(0) for a, docs, labels in zip(mined["anchor"], mined["positive"], mined["labels"])})
    else:  # labeled-pair: (anchor, text, label) rows, the negatives (label 0) shared by the anchor's pairs
        per_anchor = Counter(a for a, label in zip(mined["anchor"], mined["label"]) if label == 0)
        counts = {(a, positive): per_anchor[a] for a, positive in counts}
    return counts


def _pair_mining_summary(pairs, mined, args: argparse.Namespace) -> str:
    """One line: how many distinct (anchor, positive) pairs got their ``--num-negatives`` negatives,
    how many fewer or none (dropped) and why (no candidate within the search window passed the
    filters), and how many pairs repeat an earlier one (mined once, as ``mine_hard_negatives`` does)."""
    from collections import Counter

    wanted = args.num_negatives
    counts = _negatives_per_pair(pairs, mined, args.output_format, wanted)
    total, full = len(counts), sum(1 for n in counts.values() if n >= wanted)
    dropped, short = sum(1 for n in counts.values() if n == 0), sum(1 for n in counts.values() if 0 < n < wanted)
    repeats = len(pairs) - total
    parts = [f"{full} of {total} {'distinct ' if repeats else ''}(anchor, positive) pairs got {wanted} negative(s) each"]
    if short:
        parts.append(f"{short} got fewer (1 to {wanted - 1})")
    if repeats:
        parts.append(f"{repeats} of the {len(pairs)} pairs {'repeats an earlier one' if repeats == 1 else 'repeat earlier ones'} "
                     "(same anchor and positive), mined once")
    if not dropped:
        return "; ".join(parts)
    filters = []
    if args.relative_margin is not None:
        filters.append(f"score at most {(1 - args.relative_margin) * 100:g}% of the positive's score (--relative-margin "
                       f"{args.relative_margin:g})")
    if args.absolute_margin is not None:
        filters.append(f"score at most the positive's score minus {args.absolute_margin:g} (--absolute-margin)")
    if args.max_score is not None:
        filters.append(f"score at most {args.max_score:g} (--max-score)")
    most_positives = max(Counter(pairs["anchor"]).values())
    window = args.range_max or args.range_min + wanted * (10 if filters else 1) + most_positives  # as mine_hard_negatives derives it
    skipped = f" after the {args.range_min} most similar (--range-min)" if args.range_min else ""
    needed = "no candidate" if args.output_format != "n-tuple" else f"fewer than {wanted} candidates"
    if filters:
        why = (f"{needed} among their {window} most similar texts{skipped} (other than the anchor and its positives) passed "
               f"the filters: a negative must {' and '.join(filters)}; relax those filters or raise --range-max to keep more")
    else:
        why = (f"{needed} among their {window} most similar texts{skipped} besides the anchor and its positives: "
               "too few candidate texts (add some with --corpus)")
    parts.append(f"{dropped} {'got none' if args.output_format == 'labeled-pair' else 'dropped'}: {why}")
    return "; ".join(parts)


def _mine_retrieval(args: argparse.Namespace, output: Path, device: str | None = None,
                    devices: list[str] | None = None) -> int:
    """A retrieval data set (scifact, nfcorpus, a BEIR folder): its train queries against its whole
    corpus, every judged-relevant document of the query excluded, TopK-PercPos from
    ``--relative-margin`` (:func:`contrastive_bert.corpus_mining.mine_corpus_negatives`). Progress
    bars for encoding and search; at the end, how many pairs were kept and dropped and why.
    ``--num-negatives N`` means what it means on a pair data set: N rows per pair in the triplet
    format (one negative each), N negative columns in the n-tuple format."""
    import logging

    from contrastive_bert.corpus_mining import mine_corpus_negatives
    from contrastive_bert.data import load_dataset
    from contrastive_bert.data.beir import RetrievalData
    from contrastive_bert.models import load_model

    unsupported = {"--range-min": args.range_min != 0, "--absolute-margin": args.absolute_margin is not None,
                   "--max-score": args.max_score is not None, "--corpus": args.corpus is not None,
                   "--output-format": args.output_format not in ("triplet", "n-tuple")}
    given = [flag for flag, used in unsupported.items() if used]
    if given:
        raise ValueError(f"{given[0]}: not used for a retrieval data set (its own corpus is searched); "
                         "use --range-max, --relative-margin, --num-negatives, --sampling-strategy")
    if args.no_faiss and args.index_type in ("ivf", "hnsw"):
        raise ValueError(f"--index-type: {args.index_type} is a FAISS index; drop --no-faiss or use --index-type flat")
    data = RetrievalData.from_splits(load_dataset(args.dataset, data_dir=args.data_dir))
    model = load_model(args.model, device=device, backend=args.model_backend)
    # the corpus embeddings: kept where asked, else beside the output while mining (a rerun resumes the encoding)
    embeddings_dir = Path(args.embeddings_dir) if args.embeddings_dir else output.with_name(output.name + ".embeddings")
    mined, report = mine_corpus_negatives(
        model, data, args.split, num_negatives=args.num_negatives, range_max=args.range_max or 100,
        perc_pos=None if args.relative_margin is None else 1.0 - args.relative_margin,
        sampling=args.sampling_strategy, batch_size=args.batch_size, backend="torch" if args.no_faiss else "auto",
        show_progress_bar=logging.getLogger(__name__).isEnabledFor(logging.INFO), return_report=True,
        embeddings_dir=embeddings_dir, index_type=args.index_type, nprobe=args.nprobe, ef_search=args.ef_search,
        devices=devices,
    )
    if not args.embeddings_dir:
        import shutil

        shutil.rmtree(embeddings_dir, ignore_errors=True)
    if args.max_samples is not None:  # pairs, as on a pair data set
        mined = mined.select(range(min(args.max_samples, len(mined))))
    kept_pairs = len(mined)
    if args.output_format == "triplet":
        mined = _as_triplets(mined, args.num_negatives)
    _write(mined, output)
    print(f"mined {len(mined)} rows ({', '.join(mined.column_names)}) from the {args.split} judgements of {args.dataset} "
          f"against its {len(data.corpus)} documents, judged-relevant documents excluded -> {output}")
    print(_mining_summary(report, args, kept_pairs))
    return 0


def run_mine(args: argparse.Namespace) -> int:
    """Handler of ``contrastive-bert mine``; returns 0 and prints where the data set went."""
    from sentence_transformers.util import mine_hard_negatives

    from contrastive_bert.embedding_store import check_devices
    from contrastive_bert.topk_search import faiss_available
    from contrastive_bert.models import check_device, check_model_name, load_model

    output = _check_args(args)
    check_model_name(args.model)
    device, devices = model_devices(args)
    check_devices(devices, "--devices")  # the list first: the model's device is one of them
    check_device(device)
    if _is_retrieval(args):
        return _mine_retrieval(args, output, device, devices)
    given = [flag for flag, used in (("--index-type", args.index_type != "auto"), ("--embeddings-dir", args.embeddings_dir))
             if used]
    if given:
        raise ValueError(f"{given[0]}: for a retrieval data set (its corpus is searched); a pair data set is mined by "
                         "sentence-transformers' mine_hard_negatives (--no-faiss for exact torch search)")
    pairs = _load_pairs(args)
    if args.max_samples is not None:
        pairs = pairs.select(range(min(args.max_samples, len(pairs))))
    corpus = None
    if args.corpus is not None:
        corpus_path = Path(args.corpus).expanduser()
        if not corpus_path.is_file():
            raise ValueError(f"corpus: file not found: {corpus_path}")
        corpus = [line.strip() for line in corpus_path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not corpus:
            raise ValueError(f"corpus: {corpus_path} has no non-empty lines")
    model = load_model(args.model, device=device, backend=args.model_backend)
    mined = mine_hard_negatives(
        pairs,
        model,
        anchor_column_name="anchor",
        positive_column_name="positive",
        corpus=corpus,
        range_min=args.range_min,
        range_max=args.range_max,
        max_score=args.max_score,
        absolute_margin=args.absolute_margin,
        relative_margin=args.relative_margin,
        num_negatives=args.num_negatives,
        sampling_strategy=args.sampling_strategy,
        output_format=args.output_format,
        batch_size=args.batch_size,
        use_faiss=faiss_available() and not args.no_faiss,
        use_multi_process=devices if devices is not None and len(devices) > 1 else False,
        verbose=False,
    )
    _write(mined, output)
    print(f"mined {len(mined)} rows ({', '.join(mined.column_names)}) from {len(pairs)} pairs -> {output}")
    print(_pair_mining_summary(pairs, mined, args))
    return 0

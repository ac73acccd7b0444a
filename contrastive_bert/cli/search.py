"""``contrastive-bert search``: a corpus's top-k documents for text queries, with any trained model.

The corpus is a retrieval data set (``scifact``, a BEIR folder), a BEIR ``corpus.jsonl`` or a text
file of one document per line (ids: line numbers from 1). ``--index DIR`` keeps the encoded corpus:
the first search encodes into it chunk by chunk (an interrupted first search, run again, resumes at
the first missing chunk), later ones load it (the expensive part, encoding every document, runs
once) and refuse it when it was built by another model or from another corpus. ``--index-type``
``auto`` searches exactly up to 1,000,000 documents and through FAISS IVF above; an approximate
index prints its recall@100 against exact search on 100 sample queries, and warns below 0.95.
``--devices cuda:0,cuda:1`` encodes the corpus on several devices at once, one process each.
``--model-backend onnx`` / ``onnx-int8`` encodes through ONNX Runtime on the CPU, ``torch-bf16``
under bf16 autocast (``--backend`` is the search over the encoded rows); an index is searched with
the backend that built it.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from contrastive_bert.cli.arguments import (
    add_batch_size_argument,
    add_data_dir_argument,
    add_device_argument,
    add_devices_argument,
    add_index_arguments,
    add_model_argument,
    add_model_backend_argument,
    add_output_argument,
    add_overwrite_argument,
    check_model_backend,
    check_output,
    model_devices,
    positive_int,
    replace_output,
)

logger = logging.getLogger(__name__)

OUTPUT_FILES = (".jsonl", ".trec")
SNIPPET_CHARS = 100


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "search",
        help="search a corpus with a model: each query's top-k documents",
        description="Encode a corpus (a retrieval data set such as scifact, a BEIR folder, a corpus.jsonl or a "
        ".txt file with one document per line) and print each query's --top-k documents by cosine, as the "
        "retrieval scores were measured. --index DIR saves the encoded corpus on the first search and "
        "loads it on the next ones.",
    )
    add_model_argument(parser)
    parser.add_argument("--corpus", required=True, metavar="NAME_OR_PATH",
                        help="retrieval data set name, BEIR folder, corpus.jsonl, or .txt file (one document per line)")
    parser.add_argument("--query", action="append", default=[], metavar="TEXT", help="a query (repeat for several)")
    parser.add_argument("--input", default=None, metavar="FILE",
                        help="text file, one query per line ('-' for stdin), or a BEIR queries.jsonl (its ids name the queries)")
    parser.add_argument("--top-k", type=positive_int, default=10, metavar="N", help="documents per query (default: 10)")
    parser.add_argument("--index", default=None, metavar="DIR",
                        help="folder of the encoded corpus: written when absent, loaded when present (same model and corpus)")
    parser.add_argument("--backend", choices=("exact", "faiss"), default=None,
                        help="what searches the encoded corpus (not what encodes it: --model-backend): exact torch "
                        "search (the scorer's) or a FAISS index (default: exact, FAISS for an approximate index)")
    add_index_arguments(parser, "auto: exact search up to 1,000,000 documents, FAISS IVF above; flat: exact; ivf, hnsw: "
                        "approximate FAISS indexes (with --backend faiss), their recall@100 against exact search printed (default: auto)")
    add_output_argument(parser, "also write the hits: .jsonl (one line per query) or .trec (a TREC run file)")
    add_overwrite_argument(parser)
    add_batch_size_argument(parser, default=64)
    add_data_dir_argument(parser)
    add_device_argument(parser)
    add_devices_argument(parser)
    add_model_backend_argument(parser)
    parser.set_defaults(func=run_search)
    return parser


def _queries(args: argparse.Namespace) -> dict[str, str]:
    """``{query id: text}``: ``--query`` texts and ``--input`` lines numbered from 1 in order, or the
    ids of a BEIR ``queries.jsonl`` given as ``--input`` (so a TREC run matches its qrels)."""
    from contrastive_bert.cli.classify import read_texts

    texts = [q.strip() for q in args.query if q.strip()]
    given: dict[str, str] = {}
    if args.input is not None and args.input.lower().endswith(".jsonl"):
        from contrastive_bert.data.beir import read_queries

        if not Path(args.input).is_file():
            raise ValueError(f"--input: file {args.input} does not exist")
        try:
            columns = read_queries(Path(args.input))
        except KeyError as missing:
            raise ValueError(f"--input: {args.input} is not a BEIR queries.jsonl: a line has no {missing} field") from None
        given = dict(zip(columns["id"], columns["text"]))
    elif args.input is not None:
        texts += read_texts(args.input)
    queries = {str(number): text for number, text in enumerate(texts, start=1)}
    clash = sorted(set(queries) & set(given))
    if clash:
        raise ValueError(f"--query / --input: query id {clash[0]!r} is both a --query number and an id in {args.input}; "
                         "give the queries one way")
    queries.update(given)
    if not queries:
        raise ValueError("--query / --input: give at least one query (--query TEXT, or --input FILE with one per line)")
    return queries


def _check_args(args: argparse.Namespace) -> Path | None:
    output = check_output(args.output, args.overwrite)
    if output is not None and output.suffix.lower() not in OUTPUT_FILES:
        raise ValueError(f"--output: expected a {' or '.join(OUTPUT_FILES)} file, got {args.output}")
    if args.index_type in ("ivf", "hnsw") and args.backend != "faiss":
        raise ValueError(f"--index-type: {args.index_type} needs --backend faiss")
    if args.index is not None and Path(args.index).expanduser().is_file():
        raise ValueError(f"--index: {args.index} is a file; expected a folder")
    check_model_backend(args)
    return output


#: How an index records a model run by an ONNX backend (its ``model``, for people and for :func:`_built_with`).
BACKEND_NOTE = " (--model-backend {})"


def _recorded_model(args: argparse.Namespace) -> str:
    """The model's name as the index records it: ``--model``, plus the backend when not torch."""
    return args.model if args.model_backend == "torch" else args.model + BACKEND_NOTE.format(args.model_backend)


def _built_with(meta: dict[str, Any]) -> str:
    """The ``--model-backend`` that built a saved index (torch when its ``model`` names none)."""
    from contrastive_bert.models import BACKENDS

    recorded = str(meta.get("model") or "")
    return next((backend for backend in BACKENDS if recorded.endswith(BACKEND_NOTE.format(backend))), "torch")


def load_corpus(name_or_path: str, data_dir: str | None) -> dict[str, str]:
    """``{document id: text}`` of a retrieval data set, a BEIR folder, a ``corpus.jsonl`` file or a
    ``.txt`` file (one document per line; ids are line numbers from 1, blank lines skipped)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir() and (path / "corpus.jsonl").is_file():  # a BEIR folder, judgements or not
        path = path / "corpus.jsonl"
    if path.is_file():
        from contrastive_bert.data.beir import read_corpus_texts

        if path.suffix.lower() == ".txt":
            with open(path, encoding="utf-8") as handle:
                corpus = {str(number): line.strip() for number, line in enumerate(handle, start=1) if line.strip()}
        elif path.suffix.lower() == ".jsonl":
            try:
                corpus = read_corpus_texts(path)
            except KeyError as missing:
                raise ValueError(f"--corpus: {path} is not a BEIR corpus.jsonl: a line has no {missing} field") from None
        else:
            raise ValueError(f"--corpus: expected a retrieval data set name, a BEIR folder, a corpus.jsonl or a .txt file, got {path}")
        if not corpus:
            raise ValueError(f"--corpus: {path} holds no documents")
        return corpus
    from contrastive_bert.data import load_dataset, resolve_dataset_argument
    from contrastive_bert.data.beir import CORPUS, corpus_texts

    if path.suffix.lower() in (".txt", ".jsonl"):
        raise ValueError(f"--corpus: file {path} does not exist")
    try:
        spec = resolve_dataset_argument(name_or_path)
    except ValueError as error:
        raise ValueError(f"--corpus: {str(error).removeprefix('dataset: ')}") from None
    if spec.task_type != "retrieval":
        raise ValueError(f"--corpus: {name_or_path!r} is a {spec.task_type} data set; expected a retrieval one "
                         "(scifact, nfcorpus, a BEIR folder), a corpus.jsonl or a .txt file")
    documents = load_dataset(spec, split=CORPUS, data_dir=data_dir)
    return corpus_texts(documents)


def _index(args: argparse.Namespace, model, corpus: dict[str, str], devices: list[str] | None = None):
    """The corpus index: loaded from ``--index`` when it holds one for this model and corpus, built
    there (resumed when an earlier build of this model and corpus was interrupted) or in memory."""
    from contrastive_bert.embedding_store import read_manifest
    from contrastive_bert.inference.corpus_index import META_FILE, CorpusIndex

    folder = Path(args.index).expanduser() if args.index is not None else None
    search = dict(backend=args.backend, index_type=args.index_type, nprobe=args.nprobe, ef_search=args.ef_search)
    unfinished = False
    if folder is not None and folder.exists() and any(folder.iterdir()) and not args.overwrite:  # an empty folder: build into it
        unfinished = not (folder / META_FILE).is_file() and read_manifest(folder) is not None
        if not unfinished:
            try:
                meta = CorpusIndex.read_meta(folder)
            except ValueError as error:
                raise ValueError(f"--index: {str(error).removeprefix('path: ')}; choose an empty or new folder") from None
            try:  # the corpus's texts held once, and hashed once: load refuses another corpus
                index = CorpusIndex.load(folder, model, documents=corpus, **search)
            except ValueError as error:  # another corpus; another model, or the same one run by another backend
                if str(error).startswith("documents: "):
                    raise ValueError(f"--index: {folder} holds another corpus ({meta['documents']} documents) than --corpus "
                                     f"{args.corpus} ({len(corpus)}); pass --overwrite to rebuild it or choose another folder") from None
                built = _built_with(meta)
                if built == args.model_backend or not str(error).startswith("model: "):
                    raise
                name = str(meta.get("model") or "an unnamed model").removesuffix(BACKEND_NOTE.format(built))
                raise ValueError(f"--index: {folder} was built by --model {name} with --model-backend {built}; this search "
                                 f"runs --model-backend {args.model_backend}, whose embeddings differ, so the index's rows do "
                                 f"not match its queries: search it with --model-backend {built} (and the same --model), "
                                 f"or pass --overwrite to rebuild it with --model-backend {args.model_backend}") from None
            print(f"loaded the index of {len(index)} documents from {folder}")
            return index
    elif folder is not None and args.overwrite:
        replace_output(folder)
    verbose = logger.isEnabledFor(logging.INFO)
    try:
        index = CorpusIndex.build(model, corpus, batch_size=args.batch_size, show_progress_bar=verbose, folder=folder,
                                  model_name=_recorded_model(args), devices=devices, **search)
    except ValueError as error:
        if folder is not None and str(error).startswith("folder: "):  # an unfinished index of another model or corpus
            raise ValueError(f"--index: {str(error).removeprefix('folder: ')}") from None
        raise
    if folder is not None:
        resumed = f" (resumed: {len(index) - index.encoded_rows} were encoded before)" if unfinished else ""
        print(f"encoded {index.encoded_rows} documents{resumed}; index saved to {folder}")
    return index


def _write(output: Path, queries: dict[str, str], hits, texts: dict[str, str]) -> None:
    with open(replace_output(output), "w", encoding="utf-8") as handle:
        for (query_id, query), found in zip(queries.items(), hits):
            if output.suffix.lower() == ".trec":  # qid Q0 docid rank score run
                handle.writelines(f"{query_id} Q0 {hit.id} {hit.rank} {hit.score:.6f} contrastive_bert\n" for hit in found)
            else:
                record = {"query_id": query_id, "query": query,
                          "hits": [{"id": hit.id, "score": hit.score, "rank": hit.rank, "text": texts[hit.id]} for hit in found]}
                handle.write(json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n")


def run_search(args: argparse.Namespace) -> int:
    """Handler of ``contrastive-bert search``: prints each query's hits (rank, cosine, id, text)."""
    from contrastive_bert.embedding_store import check_devices
    from contrastive_bert.models import check_device, check_model_name, load_model

    output = _check_args(args)
    queries = _queries(args)
    check_model_name(args.model)
    device, devices = model_devices(args)
    check_devices(devices, "--devices")  # the list first: the model's device is one of them
    check_device(device)
    corpus = load_corpus(args.corpus, args.data_dir)
    model = load_model(args.model, device=device, backend=args.model_backend)
    index = _index(args, model, corpus, devices)
    if index.backend != "exact":  # the default, the scorer's own search, goes without saying
        print(f"search: {index.describe_search()}")
    hits = index.search(list(queries.values()), top_k=args.top_k, batch_size=args.batch_size)
    recall = index.measure_recall(list(queries.values()), batch_size=args.batch_size)
    if recall is not None:  # an approximate index: how far from exact, in one line
        print(f"search: {recall.line()}")
        if recall.low:
            logger.warning("search: %s", recall.warning())
    for query, found in zip(queries.values(), hits):
        print(f"\nquery: {query}")
        for hit in found:
            text = " ".join(corpus[hit.id].split())
            snippet = text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 3] + "..."
            print(f"{hit.rank:4d}  {hit.score:.4f}  {hit.id}  {snippet}")
    if output is not None:
        _write(output, queries, hits, corpus)
        print(f"\nhits written to {output}")
    return 0

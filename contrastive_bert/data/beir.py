"""Retrieval data sets in the BEIR layout: a corpus, queries and graded relevance judgements.

A BEIR folder holds ``corpus.jsonl`` (``{"_id", "title", "text"}``), ``queries.jsonl``
(``{"_id", "text"}``) and ``qrels/<split>.tsv`` (``query-id, corpus-id, score`` with a header).
:func:`load_dataset` gives such a data set as a ``DatasetDict`` with splits ``corpus`` (``id``,
``title``, ``text``), ``queries`` (``id``, ``text``) and one split of qrels per ``qrels`` file
(``query_id``, ``corpus_id``, ``score``; ``dev`` is named ``validation``). :class:`RetrievalData`
is the same content as Python dicts, the form evaluation and mining work on.

Documents are encoded as ``title + " " + text`` (stripped), as MTEB does.
"""

from __future__ import annotations

import csv
import json
import random
import shlex
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets

from contrastive_bert.data.readers import require_file
from contrastive_bert.data.spec import DatasetSpec

CORPUS, QUERIES = "corpus", "queries"
QRELS_COLUMNS = ("query_id", "corpus_id", "score")
SPLIT_NAMES = {"dev": "validation", "validation": "validation", "train": "train", "test": "test"}


def document_text(title: str | None, text: str | None) -> str:
    """The text a document is encoded as: ``title + " " + text``, stripped (MTEB's rule)."""
    return f"{title or ''} {text or ''}".strip()


def corpus_texts(columns: Mapping[str, Sequence]) -> dict[str, str]:
    """``{document id: text to encode}`` from corpus columns ``id``, ``title``, ``text`` (a corpus
    split, or :func:`read_corpus`'s columns)."""
    return {i: document_text(t, x) for i, t, x in zip(columns["id"], columns["title"], columns["text"])}


def iter_jsonl(path: Path) -> Iterator[dict]:
    """Each JSON object of a ``.jsonl`` file in turn (blank lines skipped): a reader keeps only the
    fields it needs, so a million-document corpus never holds a million parsed rows at once (their
    memory, freed between the strings kept, would stay with the process)."""
    with open(require_file(path), encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def _columns(path: Path, fields: Sequence[str]) -> dict[str, list]:
    columns: dict[str, list] = {"id": [], **{field: [] for field in fields}}
    for row in iter_jsonl(path):
        columns["id"].append(str(row["_id"]))
        for field in fields:
            columns[field].append(row.get(field) or "")
    return columns


def read_corpus(path: Path) -> dict[str, list]:
    """``corpus.jsonl`` as columns ``id``, ``title``, ``text``."""
    return _columns(path, ("title", "text"))


def read_corpus_texts(path: Path) -> dict[str, str]:
    """``corpus.jsonl`` as ``{document id: text to encode}`` (:func:`document_text`), read line by
    line: equal to ``corpus_texts(read_corpus(path))`` without holding the columns beside it."""
    return {str(row["_id"]): document_text(row.get("title"), row.get("text")) for row in iter_jsonl(path)}


def read_queries(path: Path) -> dict[str, list]:
    """``queries.jsonl`` as columns ``id``, ``text``."""
    return _columns(path, ("text",))


def read_qrels(path: Path) -> dict[str, list]:
    """A ``qrels/<split>.tsv`` file (header ``query-id, corpus-id, score``; CRLF tolerated) as
    columns ``query_id``, ``corpus_id``, ``score`` (int)."""
    with open(require_file(path), encoding="utf-8", newline="") as handle:
        rows = [row for row in csv.reader(handle, delimiter="\t") if row and any(field.strip() for field in row)]
    if rows and not rows[0][-1].strip().lstrip("-").isdigit():
        rows = rows[1:]  # the header
    columns: dict[str, list] = {name: [] for name in QRELS_COLUMNS}
    for number, row in enumerate(rows):
        if len(row) < 3:
            raise ValueError(f"{path}: row {number + 1} has {len(row)} fields, expected query-id, corpus-id, score")
        columns["query_id"].append(row[0].strip())
        columns["corpus_id"].append(row[1].strip())
        columns["score"].append(int(row[2].strip()))
    return columns


def read_file(path: Path) -> dict[str, list]:
    """One BEIR file by its name: the corpus, the queries, or a qrels file."""
    if path.name == "corpus.jsonl":
        return read_corpus(path)
    if path.name == "queries.jsonl":
        return read_queries(path)
    return read_qrels(path)


def beir_files(folder: Path) -> dict[str, str]:
    """Split -> file of a BEIR folder: ``corpus``, ``queries`` and one entry per ``qrels/*.tsv``;
    a ``ValueError`` naming every missing file otherwise."""
    folder = Path(folder)
    qrels = sorted((folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
    missing = [name for name in ("corpus.jsonl", "queries.jsonl") if not (folder / name).is_file()]
    if not qrels:
        missing.append("qrels/<split>.tsv (qrels/train.tsv to train on, qrels/test.tsv to score)")
    if missing:
        # Documents without queries, the commonest real case: search serves them as they are.
        search = (f"; its documents can be searched as they are: contrastive-bert search --corpus {shlex.quote(str(folder))} --query TEXT"
                  if (folder / "corpus.jsonl").is_file() else "")
        raise ValueError(f"dataset: {folder} is not a complete BEIR folder: missing {', '.join(missing)} "
                         f"(a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv){search}")
    files = {CORPUS: "corpus.jsonl", QUERIES: "queries.jsonl"}
    for path in qrels:
        files[SPLIT_NAMES.get(path.stem, path.stem)] = f"qrels/{path.name}"
    return files


def is_beir_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder in the BEIR layout."""
    folder = Path(path).expanduser()
    return folder.is_dir() and (folder / "corpus.jsonl").is_file() and (folder / "qrels").is_dir()


def looks_like_beir_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder holding any part of the BEIR layout (``corpus.jsonl``,
    ``queries.jsonl`` or ``qrels/``): meant as one, so what is missing is worth naming."""
    folder = Path(path).expanduser()
    return folder.is_dir() and any((folder / part).exists() for part in ("corpus.jsonl", "queries.jsonl", "qrels"))


def build_retrieval_split(split: str, columns: Mapping[str, list]) -> datasets.Dataset:
    """A validated corpus, queries or qrels ``Dataset``."""
    if split == CORPUS:
        names, kind = ("id", "title", "text"), "corpus"
    elif split == QUERIES:
        names, kind = ("id", "text"), "queries"
    else:
        names, kind = QRELS_COLUMNS, "qrels"
    missing = [name for name in names if name not in columns]
    if missing:
        raise ValueError(f"{split}: missing column(s) {missing} of a retrieval {kind} split; found {sorted(columns)}")
    if not columns[names[0]]:
        raise ValueError(f"{split}: the split is empty")
    if kind == "qrels":
        bad = [(i, v) for i, v in enumerate(columns["score"]) if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise ValueError(f"score: row {bad[0][0]} of {split} is {bad[0][1]!r}, expected an integer relevance grade")
    features = datasets.Features({name: datasets.Value("int64" if name == "score" else "string") for name in names})
    return datasets.Dataset.from_dict({name: list(columns[name]) for name in names}, features=features)


def qrels_dict(split: datasets.Dataset) -> dict[str, dict[str, int]]:
    """A qrels split as ``{query id: {document id: grade}}``."""
    qrels: dict[str, dict[str, int]] = defaultdict(dict)
    for query_id, corpus_id, score in zip(split["query_id"], split["corpus_id"], split["score"]):
        qrels[query_id][corpus_id] = int(score)
    return dict(qrels)


def qrels_dataset(qrels: Mapping[str, Mapping[str, int]]) -> datasets.Dataset:
    """``{query id: {document id: grade}}`` as a qrels ``Dataset`` (inverse of :func:`qrels_dict`)."""
    rows = [(q, d, int(s)) for q, docs in qrels.items() for d, s in docs.items()]
    return build_retrieval_split("qrels", {name: [row[i] for row in rows] for i, name in enumerate(QRELS_COLUMNS)})


def split_queries(query_ids: Iterable[str], share: float, seed: int) -> tuple[list[str], list[str]]:
    """``(kept, held_out)``: a fixed ``share`` of the distinct ``query_ids`` (sorted, then shuffled
    by ``seed``) held out; at least one query each side when there are two or more."""
    ids = sorted(set(query_ids))
    random.Random(seed).shuffle(ids)
    count = round(len(ids) * share)
    count = min(max(count, 1), len(ids) - 1) if len(ids) > 1 else 0
    return sorted(ids[count:]), sorted(ids[:count])


@dataclass(frozen=True)
class RetrievalData:
    """A retrieval data set as dicts.

    Attributes:
        corpus: document id -> text to encode (``title + " " + text``).
        queries: query id -> text.
        qrels: split -> ``{query id: {document id: grade}}`` (grade > 0: relevant).
    """

    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, dict[str, int]]]

    @classmethod
    def from_splits(cls, data: Mapping[str, datasets.Dataset]) -> RetrievalData:
        """From the ``DatasetDict`` :func:`~contrastive_bert.data.load_dataset` returns."""
        for needed in (CORPUS, QUERIES):
            if needed not in data:
                raise ValueError(f"data: a retrieval data set needs a {needed!r} split, got {list(data)}")
        corpus = data[CORPUS]
        return cls(
            corpus=corpus_texts(corpus),
            queries=dict(zip(data[QUERIES]["id"], data[QUERIES]["text"])),
            qrels={name: qrels_dict(split) for name, split in data.items() if name not in (CORPUS, QUERIES)},
        )

    def split(self, name: str) -> dict[str, dict[str, int]]:
        """The qrels of split ``name``, with a clear error for a missing split."""
        if name not in self.qrels:
            raise ValueError(f"split: the data set has qrels splits {sorted(self.qrels)}, not {name!r}")
        return self.qrels[name]

    def positive_pairs(self, split: str, max_per_query: int | None = 4, seed: int = 0) -> list[tuple[str, str, int]]:
        """``(query id, document id, grade)`` of the relevant judgements of ``split``: per query
        its most relevant documents first (highest grade; within a grade an order drawn with
        ``seed``), at most ``max_per_query`` of them (None: all). Queries in sorted id order."""
        if max_per_query is not None and (isinstance(max_per_query, bool) or not isinstance(max_per_query, int) or max_per_query < 1):
            raise ValueError(f"max_positives_per_query: expected a positive integer or None, got {max_per_query!r}")
        qrels = self.split(split)
        rng = random.Random(seed)
        pairs = []
        for query_id in sorted(qrels):
            if query_id not in self.queries:
                raise ValueError(f"data: query {query_id!r} of split {split!r} is not in the queries")
            judged = [(doc, grade) for doc, grade in sorted(qrels[query_id].items()) if grade > 0 and doc in self.corpus]
            rng.shuffle(judged)
            judged.sort(key=lambda item: -item[1])  # stable: the shuffled order stays within a grade
            pairs.extend((query_id, doc, grade) for doc, grade in judged[:max_per_query])
        return pairs

    def with_queries_capped(self, max_queries: int, seed: int = 0) -> RetrievalData:
        """The same corpus (never cut: a score over a cut corpus means nothing) with each qrels
        split keeping at most ``max_queries`` of its judged queries, a seeded draw (sorted ids
        shuffled with ``seed``). A score on the result equals the full-corpus score restricted to
        those queries."""
        if isinstance(max_queries, bool) or not isinstance(max_queries, int) or max_queries < 1:
            raise ValueError(f"max_queries: expected a positive integer, got {max_queries!r}")
        qrels = {}
        for name, split in self.qrels.items():
            judged = sorted(q for q, docs in split.items() if docs and q in self.queries)
            random.Random(seed).shuffle(judged)
            qrels[name] = {q: split[q] for q in sorted(judged[:max_queries])}
        return RetrievalData(corpus=self.corpus, queries=self.queries, qrels=qrels)

    def relevant(self, query_id: str) -> set[str]:
        """Every document judged relevant (grade > 0) to ``query_id`` in any split."""
        return {doc for split in self.qrels.values() for doc, grade in split.get(query_id, {}).items() if grade > 0}


def load_beir_from_hub(hub_id: str, revision: str | None = None) -> datasets.DatasetDict:
    """An mteb-style retrieval data set from the hub (configs ``corpus``, ``queries`` and
    ``default`` qrels, as ``mteb/scifact``) in our splits and columns."""
    corpus = datasets.load_dataset(hub_id, "corpus", revision=revision)
    queries = datasets.load_dataset(hub_id, "queries", revision=revision)
    qrels = datasets.load_dataset(hub_id, "default", revision=revision)
    corpus_split = corpus[next(iter(corpus))]
    query_split = queries[next(iter(queries))]
    result = {
        CORPUS: build_retrieval_split(CORPUS, {"id": [str(v) for v in corpus_split["_id"]],
                                               "title": [t or "" for t in corpus_split["title"]],
                                               "text": [t or "" for t in corpus_split["text"]]}),
        QUERIES: build_retrieval_split(QUERIES, {"id": [str(v) for v in query_split["_id"]], "text": list(query_split["text"])}),
    }
    for name, split in qrels.items():
        result[SPLIT_NAMES.get(name, name)] = build_retrieval_split(name, {
            "query_id": [str(v) for v in split["query-id"]], "corpus_id": [str(v) for v in split["corpus-id"]],
            "score": [int(v) for v in split["score"]]})
    return datasets.DatasetDict(result)


def beir_folder_dataset(path: str | Path) -> DatasetSpec:
    """A retrieval data set over any folder in the BEIR layout (accepted wherever a data set name
    is: ``--datasets path/to/beir_folder``); its qrels files are its splits."""
    folder = Path(path).expanduser()
    return DatasetSpec(
        name=str(path),
        task_type="retrieval",
        description=f"BEIR-layout retrieval data in {folder}",
        files=beir_files(folder),
        read_file=read_file,
        path=folder.resolve(),
    )

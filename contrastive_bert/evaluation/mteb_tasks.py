"""MTEB integration: local data wrapped as mteb tasks, stock mteb tasks by name, and ``mteb.evaluate``.

Every registered data set with an ``mteb`` card (:class:`contrastive_bert.data.MtebCard`) and a
pair-score, pair-binary, classification or retrieval task type becomes a local mteb task class,
built from its fields (``LocalSTSBenchmark``, ``LocalMRPCPairClassification``,
``LocalBanking77Classification``, ``LocalEmotionClassification``, ``LocalSST2Classification``,
``LocalSciFact``, ``LocalNFCorpus`` are attributes of this module). They
read their rows through :func:`contrastive_bert.data.load_dataset`, so they run offline on a local
data root and produce the same :class:`mteb.TaskResult` objects as the stock tasks. Usage::

    scores = run_mteb("default", ["stsb", "banking77"], data_dir="../shared/data")
    scores["LocalSTSBenchmark"]["main_score"]  # cosine Spearman x100

    tasks = get_mteb_tasks(["stsb"], data_dir="../shared/data")
    task_results = evaluate_mteb_tasks(model, tasks)  # list[mteb.TaskResult]
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import datasets
import mteb
from mteb.abstasks.classification import AbsTaskClassification
from mteb.abstasks.pair_classification import AbsTaskPairClassification
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata

from contrastive_bert.data import DATA_DIR_ENV, REGISTRY, DatasetSpec, get_dataset, load_dataset, resolve_data_dir
from contrastive_bert.data.beir import CORPUS, QUERIES, qrels_dict
from contrastive_bert.data.hub import hub_reachable, offline_message

logger = logging.getLogger(__name__)

_LOCAL_REVISION = "local"


class _LocalDataMixin:
    """Shared ``load_data`` for tasks backed by our data registry.

    ``max_samples`` subsamples the evaluation split (seeded; stratified by label for
    classification), e.g. for fast unit tests; ``None`` keeps every row.
    """

    dataset_name: str
    metadata: TaskMetadata

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        max_samples: int | None = None,
        seed: int = 42,
        **kwargs: Any,
    ) -> None:
        if max_samples is not None and (not isinstance(max_samples, int) or max_samples < 1):
            raise ValueError(f"max_samples: expected a positive int or None, got {max_samples!r}")
        self.data_dir = data_dir
        self.max_samples = max_samples
        super().__init__(seed=seed, **kwargs)

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        """Read the local splits through the registry and map them to mteb's columns."""
        if self.data_loaded:
            return
        raw = load_dataset(self.dataset_name, data_dir=self.data_dir, dev_split=False)  # the published splits, as mteb's own tasks
        splits = self._to_mteb_columns(raw)
        if self.max_samples is not None:
            splits = self._subsample(splits)
        self.dataset = {"default": splits}
        self.data_loaded = True

    def _to_mteb_columns(self, raw: datasets.DatasetDict) -> datasets.DatasetDict:
        return raw

    def _subsample(self, splits: datasets.DatasetDict) -> datasets.DatasetDict:
        for split in self.metadata.eval_splits:
            if self.max_samples < len(splits[split]):
                splits[split] = splits[split].shuffle(seed=self.seed).select(range(self.max_samples))
        return splits


class _LocalSTS(_LocalDataMixin, AbsTaskSTS):
    """A pair-score data set as mteb STS; scores back on their original scale (``score_scale``)."""

    min_score = 0

    def _to_mteb_columns(self, raw: datasets.DatasetDict) -> datasets.DatasetDict:
        return datasets.DatasetDict(
            {
                name: split.remove_columns("score").add_column("score", [s * self.max_score for s in split["score"]])
                for name, split in raw.items()
            }
        )


class _LocalPairClassification(_LocalDataMixin, AbsTaskPairClassification):
    """A pair-binary data set as mteb pair classification (1 = positive); main score max AP."""

    def _to_mteb_columns(self, raw: datasets.DatasetDict) -> datasets.DatasetDict:
        return raw.rename_column("label", self.label_column_name)


class _LocalClassification(_LocalDataMixin, AbsTaskClassification):
    """Classification task over a local ``text``/``label`` data set (logistic regression on frozen
    embeddings, ``n_experiments`` undersampled training sets of ``samples_per_label`` per label)."""

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        max_samples: int | None = None,
        seed: int = 42,
        n_experiments: int | None = None,
        **kwargs: Any,
    ) -> None:
        if n_experiments is not None:
            if not isinstance(n_experiments, int) or n_experiments < 1:
                raise ValueError(f"n_experiments: expected a positive int or None, got {n_experiments!r}")
            self.n_experiments = n_experiments
        super().__init__(data_dir=data_dir, max_samples=max_samples, seed=seed, **kwargs)

    def _subsample(self, splits: datasets.DatasetDict) -> datasets.DatasetDict:
        return self.stratified_subsampling(
            splits, seed=self.seed, splits=list(self.metadata.eval_splits), n_samples=self.max_samples
        )


class _LocalRetrieval(_LocalDataMixin, AbsTaskRetrieval):
    """A retrieval data set (corpus, queries, graded qrels) as an mteb retrieval task: exact search
    over the whole corpus, top 1000, nDCG@10 main score (mteb's protocol, as for the stock task).

    ``loader`` (optional): a function returning the data set as :func:`load_dataset` does (a
    ``DatasetDict`` with ``corpus``, ``queries`` and qrels splits), used instead of the registry,
    e.g. to evaluate a subset or a folder that is not registered. ``max_samples`` keeps that many
    judged queries of each evaluation split (seeded); the corpus is always kept whole.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike | None = None,
        max_samples: int | None = None,
        seed: int = 42,
        loader: Callable[[], datasets.DatasetDict] | None = None,
        **kwargs: Any,
    ) -> None:
        if loader is not None and not callable(loader):
            raise ValueError(f"loader: expected a function returning a DatasetDict or None, got {loader!r}")
        self.loader = loader
        super().__init__(data_dir=data_dir, max_samples=max_samples, seed=seed, **kwargs)

    def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
        """Corpus, queries and each evaluation split's qrels in mteb's ``RetrievalSplitData`` layout."""
        if self.data_loaded:
            return
        raw = self.loader() if self.loader is not None else load_dataset(self.dataset_name, data_dir=self.data_dir, dev_split=False)
        missing = [name for name in (CORPUS, QUERIES, *self.metadata.eval_splits) if name not in raw]
        if missing:
            raise ValueError(f"data: {self.metadata.name} needs splits {missing}, got {list(raw)}")
        corpus = raw[CORPUS].select_columns(["id", "title", "text"])
        splits = {}
        for split in self.metadata.eval_splits:
            relevant = qrels_dict(raw[split])
            if self.max_samples is not None and self.max_samples < len(relevant):
                kept = datasets.Dataset.from_dict({"id": sorted(relevant)}).shuffle(seed=self.seed)["id"][: self.max_samples]
                relevant = {query_id: relevant[query_id] for query_id in sorted(kept)}
            rows = [i for i, query_id in enumerate(raw[QUERIES]["id"]) if query_id in relevant]
            if len(rows) != len(relevant):
                raise ValueError(f"data: the {len(relevant)} queries judged in {split!r} match {len(rows)} rows of the queries (each must appear once)")
            queries = raw[QUERIES].select(rows).select_columns(["id", "text"])
            splits[split] = {"corpus": corpus, "queries": queries, "relevant_docs": relevant, "top_ranked": None}
        self.dataset = {"default": splits}
        self.data_loaded = True


# our task type -> (mteb base class, mteb task type, mteb category, mteb main score)
_MTEB_KINDS: dict[str, tuple[type[_LocalDataMixin], str, str, str]] = {
    "pair-score": (_LocalSTS, "STS", "t2t", "cosine_spearman"),
    "pair-binary": (_LocalPairClassification, "PairClassification", "t2t", "max_ap"),
    "classification": (_LocalClassification, "Classification", "t2c", "accuracy"),
    "retrieval": (_LocalRetrieval, "Retrieval", "t2t", "ndcg_at_10"),
}
_CLASSES: dict[str, tuple[DatasetSpec, type[_LocalDataMixin]]] = {}


def _mteb_specs() -> list[DatasetSpec]:
    """Registered data sets offered to mteb: those with an ``mteb`` card and an mteb task type."""
    return [spec for spec in REGISTRY.values() if spec.mteb is not None and spec.task_type in _MTEB_KINDS]


def _metadata(spec: DatasetSpec, mteb_type: str, category: str, main_score: str) -> TaskMetadata:
    card = spec.mteb
    dataset = {"path": spec.hub_id or spec.name, "revision": _LOCAL_REVISION}
    if spec.hub_config:
        dataset["name"] = spec.hub_config
    return TaskMetadata(
        name=card.task_name,
        dataset=dataset,
        description=f"{spec.description}, read from local files through contrastive_bert's data registry.",
        reference=spec.reference,
        type=mteb_type,
        category=category,
        modalities=["text"],
        eval_splits=["test"],
        eval_langs=list(card.eval_langs),
        main_score=main_score,
        date=card.date,
        domains=list(card.domains),
        task_subtypes=[],
        license="not specified",
        annotations_creators="human-annotated",
        dialect=[],
        sample_creation="found",
        bibtex_citation="",
        adapted_from=[card.stock_task] if card.stock_task else None,
    )


def local_task_class(name: str) -> type[_LocalDataMixin]:
    """The mteb task class over the registered data set ``name`` (built from its fields, once)."""
    spec = get_dataset(name)
    if spec.mteb is None or spec.task_type not in _MTEB_KINDS:
        raise ValueError(f"names: data set {name!r} has no mteb task (it needs an mteb card and a {', '.join(_MTEB_KINDS)} task type)")
    if name not in _CLASSES or _CLASSES[name][0] is not spec:
        base, mteb_type, category, main_score = _MTEB_KINDS[spec.task_type]
        attributes: dict[str, Any] = {
            "__doc__": f"{spec.description} (local files, as an mteb {mteb_type} task).",
            "__module__": __name__,
            "dataset_name": spec.name,
            "metadata": _metadata(spec, mteb_type, category, main_score),
        }
        if spec.task_type == "pair-score":
            attributes["max_score"] = spec.score_scale
        if spec.mteb.samples_per_label is not None:
            attributes["samples_per_label"] = spec.mteb.samples_per_label
        _CLASSES[name] = (spec, type(spec.mteb.task_name, (base,), attributes))
    return _CLASSES[name][1]


def __getattr__(attribute: str) -> type[_LocalDataMixin]:
    """``LocalSTSBenchmark`` etc.: the task classes, by the mteb names on the data sets' cards."""
    for spec in _mteb_specs():
        if spec.mteb.task_name == attribute:
            return local_task_class(spec.name)
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")


def stock_tasks() -> dict[str, str]:
    """Our data set name -> the stock mteb task over the same data (mteb ships them)."""
    return {spec.name: spec.mteb.stock_task for spec in _mteb_specs() if spec.mteb.stock_task}


def supported_tasks() -> list[str]:
    """Data set names :func:`get_mteb_tasks` accepts (mteb task names of them work too)."""
    return sorted(spec.name for spec in _mteb_specs())


def _canonical_name(name: Any) -> str:
    if isinstance(name, str):
        key = name.strip().lower()
        for spec in _mteb_specs():
            if key in (spec.name.lower(), spec.mteb.task_name.lower(), (spec.mteb.stock_task or "").lower()):
                return spec.name
    raise ValueError(
        f"names: unsupported MTEB task {name!r}; supported: {', '.join(supported_tasks())} "
        f"(or the mteb names {', '.join(sorted(stock_tasks().values()))})"
    )


def get_mteb_tasks(
    names: Sequence[str],
    data_dir: str | os.PathLike | None = None,
    online: bool = False,
    max_samples: int | None = None,
    n_experiments: int | None = None,
) -> list[mteb.AbsTask]:
    """mteb task objects for ``names`` (e.g. ``["stsb", "banking77"]``).

    With a local data root (``data_dir`` or ``$CONTRASTIVE_BERT_DATA``) and ``online=False``:
    the ``Local*`` wrappers over our files. With ``online=True`` or no local data: the stock
    mteb tasks (``STSBenchmark``, ``Banking77Classification``, ``EmotionClassification``,
    downloaded by mteb); ``sst2``/``mrpc`` have no stock task and use the local wrappers, which
    fall back to the hub through our registry. ``max_samples``/``n_experiments`` only apply to
    local wrappers (subsampled eval split, number of classifier runs).
    """
    if isinstance(names, str) or not isinstance(names, Sequence) or len(names) == 0:
        raise ValueError(f"names: expected a non-empty list of task names, got {names!r}")
    canonical = [_canonical_name(n) for n in names]
    if len(set(canonical)) != len(canonical):
        raise ValueError(f"names: duplicate tasks in {list(names)}")
    root = resolve_data_dir(data_dir)
    use_stock = online or root is None
    stock = stock_tasks()
    if use_stock and not hub_reachable():  # fail here, before any model loads, not inside mteb.evaluate
        if root is None:
            raise ValueError(offline_message(get_dataset(canonical[0])))
        offline = [stock[name] for name in canonical if name in stock]
        if offline:
            raise ValueError(f"online: the stock mteb tasks {offline} need the hub, which is unreachable; "
                             f"drop online (--online) to evaluate the local files under {root}")
    if use_stock and any(name in stock for name in canonical):
        reason = "online=True" if online else f"no local data (pass data_dir or set {DATA_DIR_ENV})"
        logger.info("Using stock mteb tasks (%s); mteb downloads their data from the hub", reason)
    tasks: list[mteb.AbsTask] = []
    for name in canonical:
        if use_stock and name in stock:
            tasks.append(mteb.get_task(stock[name]))
            continue
        cls = local_task_class(name)
        kwargs: dict[str, Any] = {"data_dir": root, "max_samples": max_samples}
        if issubclass(cls, _LocalClassification):
            kwargs["n_experiments"] = n_experiments
        tasks.append(cls(**kwargs))
    return tasks


def evaluate_mteb_tasks(
    model: Any,
    tasks: Sequence[mteb.AbsTask],
    output_folder: str | os.PathLike | None = None,
    batch_size: int = 32,
    show_progress_bar: bool = False,
) -> list[mteb.TaskResult]:
    """Run ``mteb.evaluate`` offline-safely and return mteb's ``TaskResult`` objects.

    No result cache is read or written (nothing lands in ``~/.cache/mteb`` or the repo) unless
    ``output_folder`` is given: then results are saved there in mteb's cache layout
    (``<output_folder>/results/<model>/<revision>/<task>.json``). CO2 tracking (codecarbon,
    which looks up the location online) is off; model metadata is taken from the loaded model,
    never fetched from the hub.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
    if isinstance(model, (str, os.PathLike)):
        from contrastive_bert.models import load_model

        model = load_model(str(model))
    cache = None
    if output_folder is not None:
        cache = mteb.ResultCache(cache_path=Path(output_folder).expanduser())
    model_result = mteb.evaluate(
        model,
        list(tasks),
        co2_tracker=False,
        raise_error=True,
        encode_kwargs={"batch_size": batch_size, "show_progress_bar": show_progress_bar},
        cache=cache,
        overwrite_strategy="always",
        show_progress_bar=show_progress_bar,
    )
    return list(model_result.task_results)


def summarize_task_result(task_result: mteb.TaskResult, split: str = "test") -> dict[str, Any]:
    """``{"main_score": x100, <metric>: x100, ...}`` for one mteb ``TaskResult`` (mean over subsets)."""
    if split not in task_result.scores:
        raise ValueError(f"split: {task_result.task_name} has splits {list(task_result.scores)}, not {split!r}")
    entries = task_result.scores[split]
    summary: dict[str, Any] = {"main_score": 100.0 * float(task_result.get_score(splits=[split]))}
    metric_names = [k for k, v in entries[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    for key in metric_names:
        if key == "main_score":
            continue
        values = [float(e[key]) for e in entries if isinstance(e.get(key), (int, float))]
        if values and not any(math.isnan(v) for v in values):
            summary[key] = 100.0 * sum(values) / len(values)
    summary["mteb_task"] = task_result.task_name
    summary["split"] = split
    summary["dataset_revision"] = task_result.dataset_revision
    summary["evaluation_time_s"] = task_result.evaluation_time
    return summary


def run_mteb(
    model: Any,
    names: Sequence[str],
    data_dir: str | os.PathLike | None = None,
    output_folder: str | os.PathLike | None = None,
    online: bool = False,
    batch_size: int = 32,
    max_samples: int | None = None,
    n_experiments: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Evaluate ``model`` (a ``SentenceTransformer``, ``"default"`` or a path) on ``names`` through
    ``mteb.evaluate``; returns ``{mteb_task_name: {"main_score": x100, ...}}``. For mteb's
    ``TaskResult`` objects call :func:`get_mteb_tasks` + :func:`evaluate_mteb_tasks`."""
    tasks = get_mteb_tasks(names, data_dir=data_dir, online=online, max_samples=max_samples, n_experiments=n_experiments)
    results = evaluate_mteb_tasks(model, tasks, output_folder=output_folder, batch_size=batch_size)
    return {r.task_name: summarize_task_result(r) for r in results}

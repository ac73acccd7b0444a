"""Training rows with hard negatives mined from a retrieval set's own corpus: the recipe field
``corpus_negatives``.

A retrieval set trains on (query, relevant document) pairs. With ``corpus_negatives`` each pair
gets ``num_negatives`` hard negatives from the corpus, mined by the model about to be trained
(:func:`~contrastive_bert.corpus_mining.mine_corpus_negatives`: never a document judged relevant to
the query in any split; candidates scoring above ``perc_pos`` x the positive dropped), and, with
``refresh_every_epochs``, mined again by the model being trained every that many epochs
(:class:`~contrastive_bert.training.corpus_refresh.CorpusNegativeRefresh`, ANCE)::

    corpus_negatives: {num_negatives: 1, range_max: 100, perc_pos: 0.95, refresh_every_epochs: 1}
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # the recipe checks this config at --help speed: no datasets import at module load
    import datasets

logger = logging.getLogger(__name__)

__all__ = ["CorpusNegatives", "mine_training_rows"]


@dataclass(frozen=True)
class CorpusNegatives:
    """The ``corpus_negatives`` recipe field, checked on creation.

    Args:
        num_negatives: hard negatives per (query, relevant document) pair (columns ``negative_1..``).
        range_max: candidates searched per query (the most similar unjudged documents).
        perc_pos: drop candidates scoring above this x the positive's score (TopK-PercPos); None: off.
        sampling: ``top`` (the hardest survivors) or ``random`` among them.
        refresh_every_epochs: mine again with the model being trained before every that many
            epochs (ANCE); None: mine once, before training.
        fallback: ``"pairs"``: when fewer than half of the pairs keep their negatives (a corpus too
            small or a model too weak to mine with), train on the plain pairs and log why; None:
            that is an error. The default a retrieval set derives has ``"pairs"``.
    """

    num_negatives: int = 1
    range_max: int = 100
    perc_pos: float | None = 0.95
    sampling: Literal["top", "random"] = "top"
    refresh_every_epochs: int | None = None
    fallback: Literal["pairs"] | None = None

    def __post_init__(self) -> None:
        def positive_int(name: str, value: object, allow_none: bool = False) -> None:
            if value is None and allow_none:
                return
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"corpus_negatives.{name}: expected a positive integer{' or null' if allow_none else ''}, got {value!r}")

        positive_int("num_negatives", self.num_negatives)
        positive_int("range_max", self.range_max)
        positive_int("refresh_every_epochs", self.refresh_every_epochs, allow_none=True)
        if self.range_max < self.num_negatives:
            raise ValueError(f"corpus_negatives.range_max: expected at least num_negatives ({self.num_negatives}), got {self.range_max}")
        if self.perc_pos is not None and (isinstance(self.perc_pos, bool) or not isinstance(self.perc_pos, (int, float))
                                          or not 0 < self.perc_pos <= 1):
            raise ValueError(f"corpus_negatives.perc_pos: expected a number in (0, 1] or null, got {self.perc_pos!r}")
        if self.fallback not in (None, "pairs"):
            raise ValueError(f"corpus_negatives.fallback: expected 'pairs' or null, got {self.fallback!r}")
        if self.sampling not in ("top", "random"):
            raise ValueError(f"corpus_negatives.sampling: expected 'top' or 'random', got {self.sampling!r}")

    @classmethod
    def from_field(cls, value: Mapping[str, Any] | None) -> CorpusNegatives | None:
        """The recipe field's value (a mapping, or None for off) as a config; unknown keys are an error."""
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ValueError(f"corpus_negatives: expected a mapping such as {{num_negatives: 1}} or null, got {value!r}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"corpus_negatives.{unknown[0]}: unknown key; expected some of {sorted(known)}")
        return cls(**value)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def mine_training_rows(
    model,
    names: list[str],
    config: CorpusNegatives,
    load: Callable[[str], Any],
    max_positives_per_query: int | None = 4,
    seed: int = 42,
    max_samples: int | None = None,
    store: str | Path | None = None,
    show_progress_bar: bool = False,
    embeddings_dir: str | Path | None = None,
    mine: bool = True,
) -> tuple[datasets.Dataset, list, dict[str, Any]]:
    """``(rows, callbacks, report)``: ``(anchor, positive, negative_1..)`` rows of the retrieval
    sets ``names`` (each loaded by ``load(name)``, a :class:`~contrastive_bert.data.beir.RetrievalData`),
    mined by ``model`` (shuffled with ``seed``, cut to ``max_samples``); the trainer callbacks that
    refresh them (``refresh_every_epochs``); what the mining kept and dropped per data set, and its seconds.

    ``store``: a folder (a run's ``mined/``) that keeps each data set's rows once mined
    (``save_to_disk``) and gives them back instead of mining again (``--resume`` after an interruption).
    ``show_progress_bar``: bars while the corpus and the queries are encoded and searched.
    ``embeddings_dir``: a folder keeping each corpus's embeddings by ``model``
    (:func:`~contrastive_bert.embedding_store.encode_corpus`: an interrupted encoding resumes, and
    a scorer given the same folder reads them back instead of encoding the corpus again).
    ``mine`` False: only read ``store`` (a process of a launched run other than the main one, which
    mined them): every process trains on the same rows, and rows missing there are an error."""
    from contrastive_bert.training.corpus_refresh import CorpusNegativeRefresh

    if not mine and store is None:
        raise ValueError("store: mine=False reads the rows from a store; got none")

    check_corpus_negative_datasets(names)
    if config.refresh_every_epochs is not None and len(names) > 1:
        raise ValueError("corpus_negatives.refresh_every_epochs: refreshes one retrieval set at a time; train on one")
    options = dict(num_negatives=config.num_negatives, range_max=config.range_max, perc_pos=config.perc_pos,
                   sampling=config.sampling, max_positives_per_query=max_positives_per_query, seed=seed)
    parts, callbacks, report = [], [], {}
    for index, name in enumerate(names):
        data = load(name)
        folder = Path(store) / str(index) if store is not None else None
        settings = {"dataset": name, "fallback": config.fallback, **options}
        saved = load_mined_rows(folder, settings) if folder is not None else None
        if saved is not None:
            rows, report[name] = saved
            logger.info("corpus negatives of %s: %d rows mined before, read from %s", name, len(rows), folder)
        elif not mine:
            raise RuntimeError(f"corpus negatives of {name}: {folder} holds no rows mined with these settings, "
                               "though the main process should have mined them there")
        else:
            rows, report[name] = _mine_one(model, name, data, config, options, show_progress_bar, embeddings_dir)
            if folder is not None:
                save_mined_rows(folder, rows, report[name], settings)
        rows = _sample(rows, seed, max_samples)
        if config.refresh_every_epochs is not None and not report[name].get("fell_back_to_pairs"):
            refresh = CorpusNegativeRefresh(model, data, rows, every_epochs=config.refresh_every_epochs,
                                            **{k: v for k, v in options.items() if k != "num_negatives"})
            rows = refresh.rows
            callbacks.append(refresh)
        parts.append(rows)
    if len(parts) == 1:
        return parts[0], callbacks, report
    import datasets

    if len({tuple(part.column_names) for part in parts}) > 1:  # one set fell back to pairs: all train on pairs
        parts = [part.select_columns(["anchor", "positive"]) for part in parts]
    return _sample(datasets.concatenate_datasets(parts), seed, max_samples), callbacks, report


def _mine_one(model, name: str, data, config: CorpusNegatives, options: dict[str, Any],
              show_progress_bar: bool, embeddings_dir: str | Path | None = None) -> tuple[datasets.Dataset, dict[str, Any]]:
    """``(rows, report)`` of one retrieval set: its mined rows, or its plain pairs when too few
    pairs kept a negative and ``config.fallback`` is ``"pairs"`` (unshuffled, uncut)."""
    from contrastive_bert.corpus_mining import mine_corpus_negatives

    start = time.perf_counter()
    logger.info("corpus negatives of %s: mining with the model about to be trained", name)
    try:
        rows, mined = mine_corpus_negatives(model, data, "train", return_report=True, embeddings_dir=embeddings_dir,
                                            show_progress_bar=show_progress_bar, **options)
        kept, pairs = mined.kept, mined.pairs
    except ValueError as error:  # no pair kept a negative
        if config.fallback != "pairs":
            raise
        rows, mined, kept, pairs = None, None, 0, None
        logger.warning("corpus negatives of %s: %s", name, error)
    report = {**(asdict(mined) if mined else {"kept": 0}), "seconds": time.perf_counter() - start}
    if config.fallback == "pairs" and (rows is None or kept < pairs / 2):
        logger.warning("corpus negatives of %s: only %d pairs kept a negative; training on the plain pairs instead "
                       "(corpus_negatives.fallback)", name, kept)
        from contrastive_bert.data.training_pairs import retrieval_pairs

        report["fell_back_to_pairs"] = True
        return retrieval_pairs(data, "train", options["max_positives_per_query"], seed=options["seed"]), report
    logger.info("corpus negatives of %s: %d of %d pairs kept (%.0f s)", name, kept, pairs, report["seconds"])
    return rows, report


_ROWS, _REPORT = "rows", "report.json"


def save_mined_rows(folder: str | Path, rows: datasets.Dataset, report: dict[str, Any], settings: dict[str, Any]) -> None:
    """Keep one data set's mined rows in ``folder`` (``rows/`` by ``save_to_disk``, then
    ``report.json`` with the settings they were mined with: written last, it marks them complete)."""
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    from datasets.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    shown = not are_progress_bars_disabled()
    disable_progress_bars()  # a bar for a save of seconds says nothing
    try:
        rows.save_to_disk(str(folder / _ROWS))
    finally:
        if shown:
            enable_progress_bars()
    (folder / _REPORT).write_text(json.dumps({"settings": settings, "report": report}, indent=2) + "\n", encoding="utf-8")


def load_mined_rows(folder: str | Path, settings: dict[str, Any]) -> tuple[datasets.Dataset, dict[str, Any]] | None:
    """``(rows, report)`` kept by :func:`save_mined_rows` with these ``settings``; None when
    ``folder`` holds none (never mined, mining interrupted) or rows mined with other settings."""
    folder = Path(folder)
    try:
        saved = json.loads((folder / _REPORT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("settings") != json.loads(json.dumps(settings)):
        logger.info("corpus negatives: %s holds rows mined with other settings; mining again", folder)
        return None
    import datasets

    return datasets.load_from_disk(str(folder / _ROWS)), {**saved["report"], "read_from": str(folder)}


def _sample(rows: datasets.Dataset, seed: int, max_samples: int | None) -> datasets.Dataset:
    """``rows`` shuffled with ``seed``, cut to ``max_samples`` (None: all)."""
    rows = rows.shuffle(seed=seed)
    return rows if max_samples is None else rows.select(range(min(max_samples, len(rows))))


def check_corpus_negative_datasets(names: list[str], data_format: str = "pairs") -> None:
    """Fail early unless every data set is a retrieval set and the loss trains on pairs (it takes
    the mined columns as hard negatives, as MNRL and the queue losses do)."""
    from contrastive_bert.data import get_dataset

    if data_format != "pairs":
        raise ValueError(f"corpus_negatives: for losses that train on (anchor, positive[, negatives]) rows; this one trains on {data_format}")
    others = [name for name in names if get_dataset(name).task_type != "retrieval"]
    if others:
        raise ValueError(f"corpus_negatives: mines a retrieval set's own corpus; {others} are not retrieval data sets")

"""CorpusNegativeRefresh: ANCE inside the sentence-transformers trainer.

Negatives mined once by the untrained model (:func:`~contrastive_bert.corpus_mining.mine_corpus_negatives`)
grow easy as the model learns: the documents that fooled the old model may no longer fool the new
one. ANCE (Xiong et al., 2021) re-encodes the corpus with the model being trained and mines again.
This callback does that at the start of every ``every_epochs``-th epoch after the first: it encodes
the whole corpus and the training queries with the current model, mines with the same rule (never a
judged-relevant document, TopK-PercPos, top-k within ``range_max``), and swaps each training row's
negatives in place. The rows stay the same (anchor, positive) pairs in the same order; only their
``negative_*`` columns change, through a ``datasets`` transform, so the trainer's data loader, batch
sampler and collator are untouched. A pair for which the new model leaves too few candidates keeps
its previous negatives.

    rows = mine_corpus_negatives(model, data, "train", num_negatives=1)
    refresh = CorpusNegativeRefresh(model, data, rows)
    fit(model, refresh.rows, loss, recipe, output_dir, callbacks=[refresh])
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any

import datasets
from transformers import TrainerCallback

from contrastive_bert.data.beir import RetrievalData

logger = logging.getLogger(__name__)

__all__ = ["CorpusNegativeRefresh"]


class CorpusNegativeRefresh(TrainerCallback):
    """Re-mine the training rows' corpus negatives with the model being trained (see the module
    docstring).

    Args:
        model: the SentenceTransformer being trained (the one the trainer updates).
        data: the retrieval data set the rows were mined from.
        rows: ``(anchor, positive, negative_1..negative_n)`` rows of
            :func:`~contrastive_bert.corpus_mining.mine_corpus_negatives`; train on :attr:`rows`,
            the same rows with the refreshable negatives.
        every_epochs: refresh at the start of epochs ``every_epochs + 1``, ``2 * every_epochs + 1``, ...
        **mining_options: the keyword arguments of
            :func:`~contrastive_bert.corpus_mining.mine_corpus_negatives` that made ``rows``
            (``range_max``, ``perc_pos``, ``sampling``, ``max_positives_per_query``, ``seed``, ...);
            the number of negatives is read off ``rows``.
    """

    def __init__(self, model, data: RetrievalData, rows: datasets.Dataset, *, every_epochs: int = 1, **mining_options: Any) -> None:
        from contrastive_bert.corpus_mining import mine_corpus_negatives

        if isinstance(every_epochs, bool) or not isinstance(every_epochs, int) or every_epochs < 1:
            raise ValueError(f"every_epochs: expected a positive integer, got {every_epochs!r}")
        self.negative_columns = [name for name in rows.column_names if name.startswith("negative")]
        if rows.column_names[:2] != ["anchor", "positive"] or not self.negative_columns:
            raise ValueError(f"rows: expected columns anchor, positive, negative_1.., got {rows.column_names}")
        self.options = {**mining_options, "num_negatives": len(self.negative_columns)}
        try:  # a misnamed option fails now, not at the first refresh an epoch into training
            inspect.signature(mine_corpus_negatives).bind(model, data, **self.options)
        except TypeError as error:
            raise ValueError(f"mining_options: {error}") from None
        self.model = model
        self.data = data
        self.every_epochs = every_epochs
        self.negatives: dict[tuple[str, str], list[str]] = {
            (row["anchor"], row["positive"]): [row[c] for c in self.negative_columns] for row in rows
        }
        self.rows = rows.with_transform(self._current_negatives)
        self.history: list[dict[str, Any]] = []

    def _current_negatives(self, batch: dict[str, list]) -> dict[str, list]:
        """The ``datasets`` transform: each row's negatives as of the last refresh."""
        current = [self.negatives[(a, p)] for a, p in zip(batch["anchor"], batch["positive"])]
        out = {"anchor": batch["anchor"], "positive": batch["positive"]}
        for i, column in enumerate(self.negative_columns):
            out[column] = [negatives[i] for negatives in current]
        return out

    def refresh(self) -> dict[str, Any]:
        """Re-encode the corpus with the current model and re-mine; returns what changed."""
        from contrastive_bert.corpus_mining import mine_corpus_negatives

        start = time.perf_counter()
        training = self.model.training
        try:
            mined = mine_corpus_negatives(self.model, self.data, **self.options)
        finally:
            self.model.train(training)
        changed = kept = 0
        for row in mined:
            key = (row["anchor"], row["positive"])
            if key not in self.negatives:
                continue  # a pair the first mining dropped is not a training row
            new = [row[c] for c in self.negative_columns]
            changed += new != self.negatives[key]
            kept += 1
            self.negatives[key] = new
        record = {"rows": len(self.negatives), "remined": kept, "changed": changed, "seconds": time.perf_counter() - start}
        logger.info("corpus negatives refreshed: %d of %d rows changed (%.0f s)", changed, len(self.negatives), record["seconds"])
        return record

    def on_epoch_begin(self, args, state, control, **kwargs):
        epoch = int(round(state.epoch or 0))  # epochs done so far
        if epoch > 0 and epoch % self.every_epochs == 0:
            self.history.append({"epoch": epoch + 1, "step": state.global_step, **self.refresh()})
        return control

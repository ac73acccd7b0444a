"""QueueNegativeProbe: what a queue loss actually uses as negatives, step by step.

A queue of past positives can hurt when its rows are not true negatives. The probe wraps the
loss's miner (:meth:`~contrastive_bert.losses.hard_negative_miner.HardNegativeMiner.select`, no
change to what it returns) and records, at every training step, for the mined hard negatives and
the plain queue negatives:

- ``relevant``: the share that are judged relevant to the anchor (false negatives that the text-id
  and same-anchor filters cannot see), when a ``relevant`` map (anchor id -> ids of its relevant
  texts, e.g. from a retrieval set's qrels) is given;
- ``age``: how many steps ago the row was enqueued (stale embeddings);
- ``gap``: positive score minus hard-negative score (cosine; how hard);
- ``distinct``: distinct texts among an anchor's hard negatives / their number (a queue longer than
  an epoch holds several stale copies of one document);
- ``weight``: the factor ``w`` that ``hard_negative_share`` puts on each hard negative's term
  (:func:`~contrastive_bert.losses.infonce_math.hard_negative_log_weight`);

and, per training call, the norm of the loss's gradient on the call's anchor embeddings and on its
document embeddings (``gradient_norms``: ContAccum's diagnosis, a bank of documents alone puts
the extra gradient on the anchor side).

    probe = QueueNegativeProbe(loss, relevant={query_id: {doc_id, ...}})
    fit(model, rows, loss, recipe, output_dir)
    probe.summary()  # means over the steps with a full queue, and per third of training
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Set
from typing import Any

import torch
from torch import Tensor

__all__ = ["QueueNegativeProbe", "text_ids"]


def text_ids(model, texts: list[str]) -> Tensor:
    """``(n,)`` ids of ``texts`` as the queue losses compute them (a hash of the token ids under the
    model's tokenizer and ``max_seq_length``), to map queue rows back to documents."""
    from contrastive_bert.queue import hash_token_ids

    ids = []
    for start in range(0, len(texts), 256):
        features = model.tokenize(texts[start:start + 256])
        ids.append(hash_token_ids(features["input_ids"], features.get("attention_mask")))
    return torch.cat(ids) if ids else torch.zeros(0, dtype=torch.int64)


class QueueNegativeProbe:
    """Records the negatives a :class:`~contrastive_bert.losses.queue_infonce.QueueInfoNCELoss`
    chooses (see the module docstring). ``relevant``: anchor text id -> ids of texts judged
    relevant to it (None: no false-negative count)."""

    def __init__(self, loss, relevant: Mapping[int, Set[int]] | None = None) -> None:
        if not hasattr(loss, "miner") or not hasattr(loss, "queue"):
            raise ValueError(f"loss: expected a queue loss with a miner, got {type(loss).__name__}")
        self.loss = loss
        self.relevant = None if relevant is None else {int(k): torch.tensor(sorted(v), dtype=torch.int64) for k, v in relevant.items()}
        self.steps: list[dict[str, Any]] = []
        self.gradient_norms: list[list[float]] = []  # per training call: [||dL/d anchors||, ||dL/d documents||]
        self._select = loss.miner.select
        loss.miner.select = self._probed_select
        loss.gradient_norms = self.gradient_norms

    def close(self) -> None:
        """Give the miner back its own ``select``; stop recording gradient norms."""
        self.loss.miner.select = self._select
        self.loss.gradient_norms = None

    def gradient_norm_summary(self) -> dict[str, Any] | None:
        """ContAccum's diagnosis over the training calls: the mean gradient norm on the anchor side
        and on the document side (the call's own rows), the mean of document / anchor per call, and
        that ratio per third of training. None before a call with gradients."""
        pairs = [(a, d) for a, d in self.gradient_norms if a > 0]
        if not pairs:
            return None
        ratios = [d / a for a, d in pairs]
        third = max(1, math.ceil(len(ratios) / 3))
        return {"calls": len(pairs), "anchor_norm": sum(a for a, _ in pairs) / len(pairs),
                "document_norm": sum(d for _, d in pairs) / len(pairs), "document_over_anchor": sum(ratios) / len(ratios),
                "document_over_anchor_thirds": [sum(chunk) / len(chunk) for chunk in
                                                (ratios[i:i + third] for i in range(0, len(ratios), third))]}

    def _relevant_share(self, anchor_ids: Tensor | None, key_ids: Tensor, chosen: Tensor) -> float | None:
        """Share of the ``chosen`` ``(b, n)`` queue rows that are judged relevant to their anchor."""
        if self.relevant is None or anchor_ids is None:
            return None
        total = int(chosen.sum())
        if total == 0:
            return None
        hits = 0
        for row, anchor in enumerate(anchor_ids.tolist()):
            relevant = self.relevant.get(int(anchor))
            if relevant is not None:
                hits += int((torch.isin(key_ids, relevant) & chosen[row]).sum())
        return hits / total

    def _probed_select(self, anchors: Tensor, positive_scores: Tensor, keys: Tensor, step: int, **kwargs):
        mined = self._select(anchors, positive_scores, keys, step, **kwargs)
        if keys.shape[0] == 0:
            return mined
        with torch.no_grad():
            key_ids = kwargs.get("key_ids")
            anchor_ids = kwargs.get("anchor_ids")
            n, b = keys.shape[0], anchors.shape[0]
            queue = self.loss.queue
            store = queue if queue is not None else self.loss.bank  # a dual bank: rows of C documents
            record: dict[str, Any] = {"step": int(step), "fill": n, "full": len(store) == store.size,
                                      "positive": float(positive_scores.mean())}
            age = None
            if queue is not None:
                # storage row j was written (ptr - 1 - j) mod size rows ago; one step enqueues b rows
                rows_ago = (int(queue.queue_ptr) - 1 - torch.arange(n)) % queue.size
                age = rows_ago // max(b, 1) + 1
            queue_mask = mined.queue_mask
            if queue_mask is not None:
                kept = queue_mask.sum(dim=1).float()
                record["queue_kept"] = float(kept.mean())
                record["queue_relevant"] = None if key_ids is None else self._relevant_share(anchor_ids, key_ids, queue_mask)
            if mined.hard_index is not None:
                valid = mined.hard_index >= 0
                if bool(valid.any()):
                    index = mined.hard_index.clamp(min=0)
                    scores = (anchors.detach() @ keys.detach().T.to(anchors.dtype)).gather(1, index)
                    record["hard_per_anchor"] = float(valid.sum(dim=1).float().mean())
                    record["hard_score"] = float(scores[valid].mean())
                    record["gap"] = float((positive_scores.unsqueeze(1).expand_as(scores)[valid] - scores[valid]).mean())
                    record["age"] = None if age is None else float(age[index][valid].float().mean())
                    if key_ids is not None:
                        chosen = torch.zeros(b, n, dtype=torch.bool)
                        chosen[torch.arange(b).unsqueeze(1).expand_as(index)[valid], index[valid]] = True
                        record["hard_relevant"] = self._relevant_share(anchor_ids, key_ids, chosen)
                        distinct = [len(set(key_ids[index[r][valid[r]]].tolist())) / max(int(valid[r].sum()), 1)
                                    for r in range(b) if bool(valid[r].any())]
                        record["distinct"] = sum(distinct) / len(distinct)
                    share = self.loss.config.infonce.hard_negative_share
                    if share is not None:
                        n_hard = valid.sum(dim=1).float().clamp(min=1)
                        n_other = (b - 1) + (queue_mask.sum(dim=1).float() if queue_mask is not None else 0)
                        record["weight"] = float((share / (1 - share) * n_other / n_hard).mean())
            self.steps.append(record)
        return mined

    def summary(self) -> dict[str, Any]:
        """Means of each recorded quantity over the steps with a full queue (``full``), over all
        steps (``all``) and per third of training (``thirds``), plus the step counts."""
        keys = ("fill", "positive", "queue_kept", "queue_relevant", "hard_per_anchor", "hard_score", "gap", "age",
                "hard_relevant", "distinct", "weight")

        def means(records: list[dict[str, Any]]) -> dict[str, float | None]:
            out = {}
            for key in keys:
                values = [r[key] for r in records if r.get(key) is not None and math.isfinite(r[key])]
                out[key] = sum(values) / len(values) if values else None
            return out

        third = max(1, math.ceil(len(self.steps) / 3))
        return {
            "gradient_norms": self.gradient_norm_summary(),
            "steps": len(self.steps),
            "steps_with_full_queue": sum(1 for r in self.steps if r["full"]),
            "all": means(self.steps),
            "full": means([r for r in self.steps if r["full"]]),
            "thirds": [means(self.steps[i:i + third]) for i in range(0, len(self.steps), third)],
        }

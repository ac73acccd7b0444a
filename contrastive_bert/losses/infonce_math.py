"""The queue InfoNCE loss as one function of embeddings and masks: no model, no queue object.

For anchor ``a_i`` (all inputs L2-normalised, ``s(x, y) = x . y / temperature``)::

    loss_i = -s(a_i, p_i) + log( sum_{d in docs_i} e^{s(a_i, d)}
                                 + sum_{q in queue_i} e^{s(a_i, q)}
                                 + w_i * sum_{h in hard_i} e^{s(a_i, h)} )

``docs_i``: the in-batch candidates allowed by ``doc_mask`` (the positive always is), ``queue_i``:
the queue rows allowed by ``queue_mask``, ``hard_i``: the anchor's own hard keys allowed by
``hard_mask``; ``w_i`` weights the hard keys to the fraction ``hard_negative_share`` of all of the
anchor's negatives (``None``: ``w_i = 1``). Which rows are negatives is decided before this
function (:mod:`contrastive_bert.losses.hard_negative_miner`); this one only scores them.

The loss splits into parts that add up to it: ``in_batch`` (the MNRL loss over ``docs_i``),
``queue`` and ``hard`` (what the queue and the hard keys add: differences of log-partition
functions, so both are >= 0).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = ["PART_NAMES", "hard_negative_log_weight", "queue_infonce_loss"]

PART_NAMES = ("in_batch", "queue", "hard")


def hard_negative_log_weight(n_hard: Tensor, n_other: Tensor, share: float) -> Tensor:
    """``log w`` ``(b,)`` such that ``n_hard`` hard negatives weighted ``w`` make up the fraction
    ``share`` of ``n_hard * w + n_other`` negatives; 0 where an anchor has no hard negative."""
    weight = share / (1.0 - share) * n_other / n_hard.clamp(min=1.0)
    return torch.where(n_hard > 0, weight.log(), torch.zeros_like(weight))


def queue_infonce_loss(
    anchors: Tensor,
    docs: Tensor,
    queue_keys: Tensor | None = None,
    hard_keys: Tensor | None = None,
    *,
    temperature: float,
    positive_index: Tensor | None = None,
    doc_mask: Tensor | None = None,
    queue_mask: Tensor | None = None,
    hard_mask: Tensor | None = None,
    hard_negative_share: float | None = None,
    reverse_anchors: Tensor | None = None,
    reduction: Literal["mean", "sum"] = "mean",
) -> tuple[Tensor, dict[str, Tensor]]:
    """The loss and its parts over ``b`` anchors.

    Args:
        anchors: ``(b, d)``; docs: ``(N, d)`` in-batch candidates (positives and negatives).
        queue_keys: ``(K, d)`` or None; hard_keys: ``(b, h, d)`` or None.
        temperature: > 0 (``scale = 1 / temperature``).
        positive_index: ``(b,)`` column of each anchor's positive in ``docs`` (default ``arange(b)``).
        doc_mask ``(b, N)`` / queue_mask ``(b, K)`` / hard_mask ``(b, h)``: ``True`` = use as a
            negative (None: all). The positive column is used whatever ``doc_mask`` says.
        hard_negative_share: in (0, 1) or None, see the module docstring.
        reverse_anchors: ``(B, d)`` all anchors of the batch: adds the positive -> anchors direction
            (MNRL's ``doc_to_query``), averaged with the forward one; the other parts are halved.
        reduction: ``"mean"`` or ``"sum"`` over the ``b`` anchors.

    Returns:
        ``(loss, {"in_batch", "queue", "hard"})``, scalars; ``loss`` is the sum of the parts.
    """
    scale = 1.0 / temperature
    b = anchors.shape[0]
    rows = torch.arange(b, device=anchors.device)
    positive_index = rows if positive_index is None else positive_index.to(anchors.device)
    batch_logits = anchors @ docs.T * scale  # (b, N)
    positive_logits = batch_logits[rows, positive_index]
    if doc_mask is not None:
        keep = doc_mask.clone()
        keep[rows, positive_index] = True
        batch_logits = batch_logits.masked_fill(~keep, -torch.inf)
    lse_batch = torch.logsumexp(batch_logits, dim=1)

    queue_logits = batch_logits.new_empty((b, 0))
    if queue_keys is not None and queue_keys.shape[0] > 0:
        queue_logits = anchors @ queue_keys.T * scale  # (b, K)
        if queue_mask is not None:
            queue_logits = queue_logits.masked_fill(~queue_mask, -torch.inf)
    hard_logits = batch_logits.new_empty((b, 0))
    log_w = batch_logits.new_zeros((b,))
    if hard_keys is not None and hard_keys.shape[1] > 0:
        hard_logits = torch.einsum("bd,bhd->bh", anchors, hard_keys) * scale
        if hard_mask is not None:
            hard_logits = hard_logits.masked_fill(~hard_mask, -torch.inf)
        if hard_negative_share is not None:
            with torch.no_grad():
                n_hard = torch.isfinite(hard_logits).sum(dim=1).to(batch_logits.dtype)
                n_other = (torch.isfinite(batch_logits).sum(dim=1) - 1 + torch.isfinite(queue_logits).sum(dim=1))
                log_w = hard_negative_log_weight(n_hard, n_other.to(batch_logits.dtype), hard_negative_share)

    lse_queue = torch.logsumexp(torch.cat([batch_logits, queue_logits], dim=1), dim=1)
    lse_all = torch.logsumexp(torch.cat([batch_logits, queue_logits, hard_logits + log_w.unsqueeze(1)], dim=1), dim=1)
    in_batch = lse_batch - positive_logits
    queue_part = lse_queue - lse_batch
    hard_part = lse_all - lse_queue
    if reverse_anchors is not None:
        backward_logits = docs[positive_index] @ reverse_anchors.T * scale  # (b, B)
        backward = torch.logsumexp(backward_logits, dim=1) - positive_logits
        in_batch = (in_batch + backward) / 2
        queue_part = queue_part / 2
        hard_part = hard_part / 2
    reduce = torch.mean if reduction == "mean" else torch.sum
    parts = {"in_batch": reduce(in_batch), "queue": reduce(queue_part), "hard": reduce(hard_part)}
    return parts["in_batch"] + parts["queue"] + parts["hard"], parts

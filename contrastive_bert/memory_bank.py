"""DualMemoryBank: past training rows, anchors *and* their documents (ContAccum's dual bank).

A bank of documents alone (:class:`~contrastive_bert.queue.EmbeddingQueue`, MoCo's queue) adds
negatives for the anchors of a batch, but only the anchors get the extra gradient: ContAccum
(Kim, Lee, Kang, NeurIPS 2024) shows this unbalances the gradient norms of the query and passage
sides. Banking the anchors too lets each banked anchor score the batch's documents, so the
documents get their share. Each bank row is one training row: the anchor ``(D,)`` and its ``C``
documents ``(C, D)`` (the positive first, then any mined negatives), with the text ids of each
and the row's group (for the same-query filter).

Two uses (``bank_scope`` of :class:`~contrastive_bert.losses.queue_infonce.QueueInfoNCELoss`):

- ``"step"``: the rows of the optimizer step's earlier micro-batches, cleared at every optimizer
  step, so nothing in it is stale (the weights have not moved). The bank grows to hold a whole step.
- ``"fifo"``: a ring of the last ``size`` rows kept across steps (older rows are a few steps stale).

Every buffer is saved in ``state_dict`` (a resumed run restores a FIFO bank); under DDP each
append is all-gathered first (rank order), so every rank holds the same bank.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from contrastive_bert.queue import NO_ID, NO_LABEL, _gather_rows

__all__ = ["BankContents", "DualMemoryBank"]


class BankContents:
    """The filled rows of a bank, oldest first: ``anchors`` ``(m, D)``, ``documents`` ``(m, C, D)``,
    ``anchor_ids`` ``(m,)``, ``document_ids`` ``(m, C)``, ``groups`` ``(m,)`` (all detached)."""

    def __init__(self, anchors: Tensor, documents: Tensor, anchor_ids: Tensor, document_ids: Tensor, groups: Tensor) -> None:
        self.anchors, self.documents = anchors, documents
        self.anchor_ids, self.document_ids, self.groups = anchor_ids, document_ids, groups

    def __len__(self) -> int:
        return self.anchors.shape[0]

    def flat_documents(self) -> tuple[Tensor, Tensor, Tensor]:
        """The documents as one list of keys, row-major (row ``j``'s positive at ``j * C``):
        embeddings ``(m * C, D)``, ids ``(m * C,)`` and groups ``(m * C,)``: a positive carries its
        row's group (another positive of the same query is a false negative), a mined negative
        none (``NO_LABEL``)."""
        m, c, d = self.documents.shape
        groups = torch.full((m, c), NO_LABEL, dtype=torch.int64, device=self.groups.device)
        groups[:, 0] = self.groups
        return self.documents.reshape(m * c, d), self.document_ids.reshape(-1), groups.reshape(-1)


class DualMemoryBank(nn.Module):
    """A ring of training rows (anchor + ``columns`` documents), L2-normalised, with text ids and groups.

    Args:
        size: rows kept (``growable``: the initial capacity, doubled whenever an append needs it).
        dim: embedding size.
        growable: never overwrite; grow instead (the ``"step"`` scope, cleared every optimizer step).
        gather_distributed: all-gather appended rows across ranks when ``torch.distributed`` is on.
    """

    def __init__(self, size: int, dim: int, growable: bool = False, gather_distributed: bool = True) -> None:
        super().__init__()
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"size: expected a positive int, got {size!r}")
        if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
            raise ValueError(f"dim: expected a positive int, got {dim!r}")
        self.size, self.dim, self.growable, self.gather_distributed = size, dim, growable, gather_distributed
        self.columns: int | None = None  # documents per row, fixed by the first append
        self._allocate(size, 1)

    def _allocate(self, size: int, columns: int) -> None:
        device = self.bank_anchors.device if hasattr(self, "bank_anchors") else None
        self.size = size
        self.register_buffer("bank_anchors", torch.zeros(size, self.dim, device=device))
        self.register_buffer("bank_documents", torch.zeros(size, columns, self.dim, device=device))
        self.register_buffer("bank_anchor_ids", torch.full((size,), NO_ID, dtype=torch.int64, device=device))
        self.register_buffer("bank_document_ids", torch.full((size, columns), NO_ID, dtype=torch.int64, device=device))
        self.register_buffer("bank_groups", torch.full((size,), NO_LABEL, dtype=torch.int64, device=device))
        self.register_buffer("bank_ptr", torch.zeros((), dtype=torch.int64, device=device))
        self.register_buffer("bank_fill", torch.zeros((), dtype=torch.int64, device=device))

    def __len__(self) -> int:
        return int(self.bank_fill.item())

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.dim}, columns={self.columns}, filled={len(self)}, growable={self.growable}"

    def contents(self) -> BankContents:
        """The filled rows, oldest first (copies: the bank may be written before a backward pass)."""
        fill = len(self)
        device = self.bank_anchors.device
        order = torch.arange(fill, device=device)
        if fill == self.size:
            order = (order + int(self.bank_ptr.item())) % self.size
        return BankContents(self.bank_anchors[order].clone(), self.bank_documents[order].clone(),
                            self.bank_anchor_ids[order].clone(), self.bank_document_ids[order].clone(), self.bank_groups[order].clone())

    @torch.no_grad()
    def reset(self) -> None:
        """Empty the bank (``"step"`` scope: at every optimizer step)."""
        self.bank_ptr.zero_()
        self.bank_fill.zero_()

    @torch.no_grad()
    def append(self, anchors: Tensor, documents: Tensor, anchor_ids: Tensor | None = None,
               document_ids: Tensor | None = None, groups: Tensor | None = None) -> None:
        """Add ``B`` rows: anchors ``(B, D)``, documents ``(B, C, D)`` (detached and L2-normalised
        here), anchor_ids ``(B,)``, document_ids ``(B, C)``, groups ``(B,)`` int64 (None: unknown)."""
        if anchors.ndim != 2 or anchors.shape[1] != self.dim:
            raise ValueError(f"anchors: expected shape (batch, {self.dim}), got {tuple(anchors.shape)}")
        b = anchors.shape[0]
        if documents.ndim != 3 or documents.shape[0] != b or documents.shape[2] != self.dim:
            raise ValueError(f"documents: expected shape ({b}, columns, {self.dim}), got {tuple(documents.shape)}")
        columns = documents.shape[1]
        if self.columns is None:
            self.columns = columns
            self._allocate(self.size, columns)
        elif columns != self.columns:
            raise ValueError(f"documents: every batch must have the same number of document columns; the bank holds "
                             f"{self.columns} per row, this batch has {columns}")
        device = anchors.device

        def ids(values: Tensor | None, shape: tuple[int, ...], empty: int) -> Tensor:
            return torch.full(shape, empty, dtype=torch.int64, device=device) if values is None else values.to(device, torch.int64)

        anchor_ids = ids(anchor_ids, (b,), NO_ID)
        document_ids = ids(document_ids, (b, columns), NO_ID)
        groups = ids(groups, (b,), NO_LABEL)
        anchors = F.normalize(anchors.detach().float(), dim=-1)
        documents = F.normalize(documents.detach().float(), dim=-1)
        if self.gather_distributed and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            anchors, documents = _gather_rows(anchors.contiguous()), _gather_rows(documents.contiguous())
            anchor_ids, document_ids, groups = _gather_rows(anchor_ids), _gather_rows(document_ids), _gather_rows(groups)
            b = anchors.shape[0]
        if self.bank_anchors.device != device:
            self.to(device)
        fill, ptr = len(self), int(self.bank_ptr.item())
        if self.growable and fill + b > self.size:
            kept = self.contents()
            capacity = self.size
            while capacity < fill + b:
                capacity *= 2
            self._allocate(capacity, columns)
            self.bank_anchors[:fill], self.bank_documents[:fill] = kept.anchors, kept.documents
            self.bank_anchor_ids[:fill], self.bank_document_ids[:fill], self.bank_groups[:fill] = (
                kept.anchor_ids, kept.document_ids, kept.groups)
            ptr = fill
        if b > self.size:
            raise ValueError(f"size: the bank holds {self.size} rows but a batch of {b} was appended "
                             "(after gathering across ranks); use a bank at least as large as the global batch")
        rows = (torch.arange(b, device=device) + ptr) % self.size
        self.bank_anchors[rows] = anchors.to(self.bank_anchors.dtype)
        self.bank_documents[rows] = documents.to(self.bank_documents.dtype)
        self.bank_anchor_ids[rows], self.bank_document_ids[rows], self.bank_groups[rows] = anchor_ids, document_ids, groups
        self.bank_ptr.fill_((ptr + b) % self.size)
        self.bank_fill.fill_(min(self.size, fill + b))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        """Adopt the saved bank's size and column count (a restored FIFO bank)."""
        key = prefix + "bank_documents"
        if key in state_dict:
            saved = state_dict[key]
            if saved.ndim != 3 or saved.shape[2] != self.dim:
                raise ValueError(f"state_dict: the saved bank has shape {tuple(saved.shape)}; this bank uses dim={self.dim}")
            if tuple(saved.shape[:2]) != tuple(self.bank_documents.shape[:2]):
                self._allocate(int(saved.shape[0]), int(saved.shape[1]))
            self.columns = int(saved.shape[1])
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)

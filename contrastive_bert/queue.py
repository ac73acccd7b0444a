"""EmbeddingQueue: a FIFO ring of the last K embeddings (MoCo style), saved in ``state_dict``.

Unlike the seed design's ``DynamicQueue`` the ring starts *empty* (a fill count marks the rows that
hold real embeddings, so random initial rows never act as negatives), writes wrap around for any
batch size, and every row remembers the id (a hash of its text) and the label of what it came from,
so false negatives can be filtered out later (:mod:`contrastive_bert.topk_search`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "NO_ID",
    "NO_LABEL",
    "EmbeddingQueue",
    "default_queue_size",
    "hash_texts",
    "hash_token_ids",
]

#: Marks a row whose id / label is unknown. Such rows never match any anchor in the id/label filters.
NO_ID: int = -(2**63)
NO_LABEL: int = -(2**63)

MAX_DEFAULT_QUEUE_SIZE = 65536


def default_queue_size(dataset_size: int, batch_size: int, max_size: int = MAX_DEFAULT_QUEUE_SIZE) -> int:
    """The seed's rule ``min(65536, 4 * dataset_size / batch_size)``, never below ``batch_size``.

    The lower bound keeps the rule valid for small data sets (a queue must hold at least one batch).
    """
    if not isinstance(dataset_size, int) or dataset_size <= 0:
        raise ValueError(f"dataset_size: expected a positive int, got {dataset_size!r}")
    if not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
    if not isinstance(max_size, int) or max_size < batch_size:
        raise ValueError(f"max_size: expected an int >= batch_size ({batch_size}), got {max_size!r}")
    return max(batch_size, min(max_size, (4 * dataset_size) // batch_size))


def _fix_sentinel(values: Tensor) -> Tensor:
    """Hashes must never equal the NO_ID sentinel."""
    return torch.where(values == NO_ID, torch.ones_like(values), values)


def hash_texts(texts: Sequence[str]) -> Tensor:
    """Stable 64-bit ids of texts (blake2b, independent of PYTHONHASHSEED). Returns ``(n,)`` int64."""
    if isinstance(texts, str):
        raise ValueError("texts: expected a sequence of strings, got a single string")
    values = [
        int.from_bytes(hashlib.blake2b(str(text).encode("utf-8"), digest_size=8).digest(), "little", signed=True)
        for text in texts
    ]
    return _fix_sentinel(torch.tensor(values, dtype=torch.int64))


_HASH_BASE = 1_000_003
_HASH_MIX = 0x9E3779B97F4A7C15 - 2**64  # golden-ratio constant as a signed int64


def hash_token_ids(input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """64-bit id of each tokenised text: a polynomial hash (wrapping int64 arithmetic) of the
    non-padding token ids. Same text under the same tokenizer -> same id.

    input_ids, attention_mask: ``(batch, seq_len)``. Returns ``(batch,)`` int64.
    """
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids: expected shape (batch, seq_len), got {tuple(input_ids.shape)}")
    ids = input_ids.to(torch.int64)
    mask = torch.ones_like(ids) if attention_mask is None else attention_mask.to(torch.int64)
    seq_len = ids.shape[1]
    powers = torch.full((seq_len,), _HASH_BASE, dtype=torch.int64, device=ids.device)
    powers[0] = 1
    powers = torch.cumprod(powers, dim=0)  # wraps modulo 2**64, deterministically
    hashed = ((ids + 1) * mask * powers).sum(dim=1)
    hashed = hashed * _HASH_MIX + mask.sum(dim=1)
    return _fix_sentinel(hashed)


def _as_int64(values: Tensor | Sequence[Any] | None, n: int, name: str, device: torch.device) -> Tensor | None:
    """ids / labels as ``(n,)`` int64; strings are hashed."""
    if values is None:
        return None
    if isinstance(values, Tensor):
        tensor = values.detach().reshape(-1)
        if tensor.is_floating_point():
            if not torch.equal(tensor, tensor.round()):
                raise ValueError(f"{name}: expected integer values, got floating-point values {tensor[:4].tolist()}")
        tensor = tensor.to(device=device, dtype=torch.int64)
    else:
        values = list(values)
        if values and all(isinstance(v, str) for v in values):
            tensor = hash_texts(values).to(device)
        elif all(isinstance(v, (int, bool)) for v in values):
            tensor = torch.tensor(values, dtype=torch.int64, device=device)
        else:
            raise ValueError(f"{name}: expected a tensor, ints or strings, got {type(values[0]).__name__}")
    if tensor.shape[0] != n:
        raise ValueError(f"{name}: expected {n} values (one per embedding), got {tensor.shape[0]}")
    return tensor


def _gather_rows(tensor: Tensor) -> Tensor:
    """All-gather ``(n_r, ...)`` rows from every rank (sizes may differ), ordered by rank."""
    world_size = dist.get_world_size()
    size = torch.tensor([tensor.shape[0]], device=tensor.device, dtype=torch.int64)
    sizes = [torch.zeros_like(size) for _ in range(world_size)]
    dist.all_gather(sizes, size)
    sizes_list = [int(s.item()) for s in sizes]
    max_size = max(sizes_list)
    padded = tensor.new_zeros((max_size, *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    gathered = [torch.zeros_like(padded) for _ in range(world_size)]
    dist.all_gather(gathered, padded.contiguous())
    return torch.cat([g[:s] for g, s in zip(gathered, sizes_list)], dim=0)


class EmbeddingQueue(nn.Module):
    """FIFO ring of the last ``size`` L2-normalised embeddings with their ids and labels.

    Buffers (all saved in ``state_dict``): ``queue_embeddings`` ``(size, dim)``, ``queue_ids``
    ``(size,)`` int64, ``queue_labels`` ``(size,)`` int64, ``queue_ptr`` (next row to write) and
    ``queue_fill`` (number of filled rows). Rows ``[0, fill)`` are the filled ones in storage order.

    Args:
        size: K, the number of rows (>= the largest batch ever enqueued, after DDP gathering).
        dim: embedding size.
        gather_distributed: all-gather embeddings across ranks before enqueue when
            ``torch.distributed`` is initialised, so every rank holds the same queue.
        normalize: L2-normalise entries on enqueue (cosine similarity = inner product).
    """

    def __init__(self, size: int, dim: int, gather_distributed: bool = True, normalize: bool = True) -> None:
        super().__init__()
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"size: expected a positive int, got {size!r}")
        if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
            raise ValueError(f"dim: expected a positive int, got {dim!r}")
        self.size = size
        self.dim = dim
        self.gather_distributed = gather_distributed
        self.normalize = normalize
        self.register_buffer("queue_embeddings", torch.zeros(size, dim))
        self.register_buffer("queue_ids", torch.full((size,), NO_ID, dtype=torch.int64))
        self.register_buffer("queue_labels", torch.full((size,), NO_LABEL, dtype=torch.int64))
        self.register_buffer("queue_ptr", torch.zeros((), dtype=torch.int64))
        self.register_buffer("queue_fill", torch.zeros((), dtype=torch.int64))

    def __len__(self) -> int:
        return int(self.queue_fill.item())

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.dim}, filled={len(self)}"

    @property
    def is_full(self) -> bool:
        return len(self) == self.size

    def _chronological(self) -> Tensor:
        """Storage indices of the filled rows, oldest first: ``(fill,)``."""
        fill = len(self)
        if fill < self.size:
            return torch.arange(fill, device=self.queue_embeddings.device)
        ptr = int(self.queue_ptr.item())
        return (torch.arange(self.size, device=self.queue_embeddings.device) + ptr) % self.size

    @property
    def embeddings(self) -> Tensor:
        """The filled rows, oldest first: ``(len(queue), dim)``."""
        return self.queue_embeddings[self._chronological()]

    @property
    def ids(self) -> Tensor:
        """Ids of the filled rows, oldest first: ``(len(queue),)`` int64 (``NO_ID`` when unknown)."""
        return self.queue_ids[self._chronological()]

    @property
    def labels(self) -> Tensor:
        """Labels of the filled rows, oldest first: ``(len(queue),)`` int64 (``NO_LABEL`` when unknown)."""
        return self.queue_labels[self._chronological()]

    def filled(self) -> tuple[Tensor, Tensor, Tensor]:
        """Views (no copy) of the filled rows in *storage* order, the cheap input for the loss:
        embeddings ``(n, dim)``, ids ``(n,)``, labels ``(n,)``."""
        n = len(self)
        return self.queue_embeddings[:n], self.queue_ids[:n], self.queue_labels[:n]

    @torch.no_grad()
    def newest_copies(self) -> Tensor:
        """``(len(queue),)`` bool in storage order (as :meth:`filled`): True for the newest row of
        each id. A document enqueued again (a later epoch, or another row with the same document)
        then counts once, as its freshest embedding; rows without an id (``NO_ID``) all count."""
        n = len(self)
        ids = self.queue_ids[:n]
        recency = torch.arange(n, device=ids.device)  # larger = enqueued later
        if n == self.size:
            recency = (recency - int(self.queue_ptr.item())) % self.size
        _, group = torch.unique(ids, return_inverse=True)
        newest = torch.full((n,), -1, dtype=torch.int64, device=ids.device).scatter_reduce(0, group, recency, "amax")
        return (recency == newest[group]) | (ids == NO_ID)

    @torch.no_grad()
    def reset(self) -> None:
        """Empty the queue (the rows are kept but no longer count as filled)."""
        self.queue_embeddings.zero_()
        self.queue_ids.fill_(NO_ID)
        self.queue_labels.fill_(NO_LABEL)
        self.queue_ptr.zero_()
        self.queue_fill.zero_()

    @torch.no_grad()
    def enqueue(
        self,
        embeddings: Tensor,
        ids: Tensor | Sequence[Any] | None = None,
        labels: Tensor | Sequence[Any] | None = None,
    ) -> None:
        """Append a batch, overwriting the oldest rows (wrap-around for any batch size).

        embeddings: ``(batch, dim)``, detached and L2-normalised here. ids: ``(batch,)`` ints or a
        list of texts (hashed with :func:`hash_texts`). labels: ``(batch,)`` integer class labels.
        Under DDP all three are all-gathered first (rank order), so every rank writes the same rows.
        """
        if not isinstance(embeddings, Tensor) or embeddings.ndim != 2:
            shape = tuple(embeddings.shape) if isinstance(embeddings, Tensor) else type(embeddings).__name__
            raise ValueError(f"embeddings: expected a (batch, dim) tensor, got {shape}")
        if embeddings.shape[1] != self.dim:
            raise ValueError(f"embeddings: expected dim {self.dim} (the queue's), got {embeddings.shape[1]}")
        embeddings = embeddings.detach()
        if not torch.isfinite(embeddings).all():
            raise ValueError("embeddings: contain NaN or inf; refusing to put them in the queue")
        n = embeddings.shape[0]
        device = embeddings.device
        id_tensor = _as_int64(ids, n, "ids", device)
        label_tensor = _as_int64(labels, n, "labels", device)
        id_tensor = id_tensor if id_tensor is not None else torch.full((n,), NO_ID, dtype=torch.int64, device=device)
        if label_tensor is None:
            label_tensor = torch.full((n,), NO_LABEL, dtype=torch.int64, device=device)

        if self.gather_distributed and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            embeddings = _gather_rows(embeddings.contiguous())
            id_tensor = _gather_rows(id_tensor)
            label_tensor = _gather_rows(label_tensor)
            n = embeddings.shape[0]

        if n > self.size:
            raise ValueError(
                f"size: the queue holds {self.size} rows but a batch of {n} embeddings was enqueued "
                "(after gathering across ranks); use a queue at least as large as the global batch"
            )
        if n == 0:
            return
        self._follow(embeddings)
        if self.normalize:
            embeddings = F.normalize(embeddings.float(), p=2, dim=1)
        embeddings = embeddings.to(self.queue_embeddings.dtype)

        ptr = int(self.queue_ptr.item())
        rows = (torch.arange(n, device=self.queue_embeddings.device) + ptr) % self.size
        self.queue_embeddings[rows] = embeddings
        self.queue_ids[rows] = id_tensor.to(self.queue_ids.device)
        self.queue_labels[rows] = label_tensor.to(self.queue_labels.device)
        self.queue_ptr.fill_((ptr + n) % self.size)
        self.queue_fill.fill_(min(self.size, len(self) + n))

    def _follow(self, embeddings: Tensor) -> None:
        """Move the buffers to the embeddings' device; adopt their dtype while the queue is empty."""
        if self.queue_embeddings.device != embeddings.device:
            self.to(embeddings.device)
        if len(self) == 0 and embeddings.is_floating_point() and self.queue_embeddings.dtype != embeddings.dtype:
            self.queue_embeddings = self.queue_embeddings.to(embeddings.dtype)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        """Validate the shape of a restored queue and adopt its size and dtype."""
        key = prefix + "queue_embeddings"
        if key in state_dict:
            saved = state_dict[key]
            if saved.ndim != 2 or saved.shape[1] != self.dim:
                raise ValueError(
                    f"state_dict: the restored queue has embedding size {tuple(saved.shape)[1:]} but this queue "
                    f"(and the model) uses dim={self.dim}"
                )
            if saved.shape[0] != self.size:
                self.size = int(saved.shape[0])
                self.queue_embeddings = torch.zeros_like(saved, device=self.queue_embeddings.device)
                self.queue_ids = torch.full((self.size,), NO_ID, dtype=torch.int64, device=self.queue_ids.device)
                self.queue_labels = torch.full((self.size,), NO_LABEL, dtype=torch.int64, device=self.queue_labels.device)
            elif saved.dtype != self.queue_embeddings.dtype:
                self.queue_embeddings = self.queue_embeddings.to(saved.dtype)
        fill_key = prefix + "queue_fill"
        if fill_key in state_dict and int(state_dict[fill_key]) > (state_dict[key].shape[0] if key in state_dict else self.size):
            raise ValueError(f"state_dict: queue_fill {int(state_dict[fill_key])} exceeds the queue size")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)

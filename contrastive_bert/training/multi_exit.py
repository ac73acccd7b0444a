"""Training helpers for multi-exit models: joint training, the seed's two-stage training, and
per-exit evaluation.

- :func:`train_with_trainer`: one ``SentenceTransformerTrainer`` run (used for stage 1, joint
  training and stage 2 on the live model).
- :func:`train_stage1`: backbone + final classifier with ACL-Embed (``ACLEmbedLoss``).
- :func:`freeze_for_stage2`: freeze the backbone and the final exit; only intermediate exits train.
- :class:`LayerStateCache` + :func:`train_exits_on_cache`: stage 2 with the (frozen) backbone run
  once: hidden states of the exit layers are cached (fp16) and the exit heads train on them with
  :class:`~contrastive_bert.losses.cross_layer.CrossLayerLoss`. Same objective as stage 2 in the
  trainer except for backbone dropout (the cache is taken in eval mode); many heads/methods/seeds
  then cost one backbone pass.
- :func:`evaluate_exits`: per-exit accuracy (percent) on a cache.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pad_sequence

from contrastive_bert.heads.exits import MultiExitHeads, get_exit_heads, transformer_module
from contrastive_bert.inference.early_exit import LayerwiseEncoder


def train_with_trainer(
    model: nn.Module,
    train_dataset: Any,
    loss: nn.Module,
    *,
    max_steps: int,
    batch_size: int = 32,
    learning_rate: float = 2e-5,
    seed: int = 0,
    group_by_label: bool = True,
    output_dir: str | None = None,
    **extra_args: Any,
) -> None:
    """Train ``model`` with ``loss`` on a (text, label) dataset through ``SentenceTransformerTrainer``
    (AdamW, weight decay 0.01, 10% warmup as in the seed; no checkpoints)."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers

    if max_steps < 1:
        raise ValueError(f"max_steps: must be >= 1, got {max_steps}")
    with tempfile.TemporaryDirectory() as tmp:
        args = SentenceTransformerTrainingArguments(
            output_dir=output_dir or tmp,
            max_steps=max_steps,
            per_device_train_batch_size=batch_size,
            learning_rate=learning_rate,
            warmup_ratio=0.1,
            weight_decay=0.01,
            seed=seed,
            save_strategy="no",
            report_to="none",
            logging_steps=max(1, max_steps // 5),
            batch_sampler=BatchSamplers.GROUP_BY_LABEL if group_by_label else BatchSamplers.BATCH_SAMPLER,
            disable_tqdm=True,
            use_cpu=not torch.cuda.is_available(),
            **extra_args,
        )
        trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=train_dataset, loss=loss)
        trainer.train()


def train_stage1(
    model: nn.Module,
    train_dataset: Any,
    label_names: Sequence[str],
    *,
    max_steps: int,
    batch_size: int = 32,
    learning_rate: float = 2e-5,
    seed: int = 0,
    **acl_kwargs: Any,
) -> nn.Module:
    """Stage 1: backbone + final label-embedding classifier with ACL-Embed. Returns the loss."""
    from contrastive_bert.losses.acl_embed import ACLEmbedLoss

    loss = ACLEmbedLoss(model, label_names, **acl_kwargs)
    train_with_trainer(
        model, train_dataset, loss, max_steps=max_steps, batch_size=batch_size, learning_rate=learning_rate, seed=seed
    )
    return loss


def freeze_for_stage2(model: nn.Module) -> list[str]:
    """Freeze every parameter except the intermediate exits; returns the trainable parameter names."""
    heads = get_exit_heads(model)
    trainable = {id(p) for m in heads.intermediate_layers for p in heads.exit(m).parameters()}
    names = []
    for name, param in model.named_parameters():
        param.requires_grad_(id(param) in trainable)
        if id(param) in trainable:
            names.append(name)
    if not names:
        raise ValueError("model: the exit heads have no intermediate exits to train in stage 2")
    return names


class LayerStateCache:
    """Hidden states of the exit layers for a fixed text set, computed once with the backbone in eval mode.

    ``states[layer]``: (sum of token counts, H) fp16, rows of example i at ``offsets[i]:offsets[i+1]``;
    ``labels`` (N,). :meth:`batch` pads a subset back to (b, T, H) with mask (b, T).
    """

    def __init__(
        self,
        model: nn.Module,
        texts: Sequence[str],
        labels: Sequence[int],
        layers: Sequence[int],
        batch_size: int = 64,
        dtype: torch.dtype = torch.float16,
    ) -> None:
        if len(texts) != len(labels) or len(texts) == 0:
            raise ValueError(f"texts/labels: need equal non-zero lengths, got {len(texts)} and {len(labels)}")
        encoder = LayerwiseEncoder(transformer_module(model).auto_model)
        bad = [m for m in layers if not 1 <= m <= encoder.num_layers]
        if bad:
            raise ValueError(f"layers: must be in [1, {encoder.num_layers}], got {bad}")
        self.layers = sorted(set(layers))
        self.labels = torch.as_tensor(list(labels), dtype=torch.long)
        device = next(model.parameters()).device
        chunks: dict[int, list[Tensor]] = {m: [] for m in self.layers}
        lengths: list[int] = []
        was_training = model.training
        model.eval()
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                features = model.preprocess(list(texts[start : start + batch_size]))
                ids, mask = features["input_ids"].to(device), features["attention_mask"].to(device)
                types = features.get("token_type_ids")
                hidden = encoder.embed(ids, None if types is None else types.to(device))
                row_lengths = mask.sum(dim=1).tolist()
                lengths.extend(int(n) for n in row_lengths)
                for index in range(1, self.layers[-1] + 1):
                    hidden = encoder.layer(index, hidden, mask)
                    if index in chunks:
                        chunks[index].extend(hidden[i, :n].to("cpu", dtype) for i, n in enumerate(row_lengths))
        model.train(was_training)
        self.states = {m: torch.cat(rows) for m, rows in chunks.items()}
        self.offsets = np.concatenate([[0], np.cumsum(lengths)])

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: Sequence[int], device: torch.device | str = "cpu") -> tuple[dict[int, Tensor], Tensor, Tensor]:
        """({layer: (b, T, H) float32}, mask (b, T), labels (b,)) for the examples ``indices``."""
        spans = [(int(self.offsets[i]), int(self.offsets[i + 1])) for i in indices]
        states = {
            m: pad_sequence([self.states[m][a:b] for a, b in spans], batch_first=True).to(device, torch.float32)
            for m in self.layers
        }
        lengths = torch.tensor([b - a for a, b in spans])
        mask = (torch.arange(int(lengths.max()))[None, :] < lengths[:, None]).long().to(device)
        return states, mask, self.labels[list(indices)].to(device)


def train_exits_on_cache(
    heads: MultiExitHeads,
    cache: LayerStateCache,
    loss: nn.Module,
    *,
    max_steps: int = 300,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    weight_decay: float = 0.01,
    seed: int = 0,
) -> list[float]:
    """Stage 2 on cached states (the heads train from their current weights; build fresh heads per
    seed): AdamW on the intermediate exits (linear warmup 10%, linear decay),
    ``loss.compute_loss_from_outputs`` (a :class:`CrossLayerLoss` with ``train_final=False``).
    Returns the loss per step."""
    if getattr(loss, "train_final", False):
        raise ValueError("loss: stage 2 on a cache needs CrossLayerLoss(train_final=False)")
    students = heads.intermediate_layers
    missing = [m for m in heads.exit_layers if m not in cache.layers]
    if missing:
        raise ValueError(f"cache: has no hidden states for exit layers {missing}")
    params = [p for m in students for p in heads.exit(m).parameters()]
    if not params:
        raise ValueError("heads: no intermediate exits to train")
    device = next(heads.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=weight_decay)
    warmup = max(1, max_steps // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min((step + 1) / warmup, max(0.0, (max_steps - step) / max(1, max_steps - warmup)))
    )
    heads.train()
    history = []
    order = torch.randperm(len(cache), generator=generator)
    cursor = 0
    for _ in range(max_steps):
        if cursor + batch_size > len(order):
            order, cursor = torch.randperm(len(cache), generator=generator), 0
        indices = order[cursor : cursor + batch_size].tolist()
        cursor += batch_size
        states, mask, labels = cache.batch(indices, device)
        embeddings, logits = {}, {}
        with torch.no_grad():
            embeddings[heads.num_layers], logits[heads.num_layers] = heads.forward_layer(
                heads.num_layers, states[heads.num_layers], mask
            )
        for m in students:
            embeddings[m], logits[m] = heads.forward_layer(m, states[m], mask)
        parts = loss.compute_loss_from_outputs(embeddings, logits, labels)
        total = torch.stack(list(parts.values())).sum()
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        optimizer.step()
        scheduler.step()
        history.append(float(total.detach()))
    heads.eval()
    if not all(math.isfinite(value) for value in history):
        raise RuntimeError("train_exits_on_cache: the loss became non-finite")
    return history


@torch.no_grad()
def evaluate_exits(heads: MultiExitHeads, cache: LayerStateCache, batch_size: int = 128) -> dict[int, float]:
    """Accuracy (percent) of every exit on the cached examples: {layer: accuracy}."""
    heads.eval()
    device = next(heads.parameters()).device
    correct = {m: 0 for m in heads.exit_layers}
    for start in range(0, len(cache), batch_size):
        states, mask, labels = cache.batch(range(start, min(start + batch_size, len(cache))), device)
        for m in heads.exit_layers:
            _, logits = heads.forward_layer(m, states[m], mask)
            correct[m] += int((logits.argmax(-1) == labels).sum())
    return {m: 100.0 * c / len(cache) for m, c in correct.items()}


@torch.no_grad()
def attach_prototype_head(
    model: nn.Module,
    texts: Sequence[str],
    labels: Sequence[int],
    label_names: Sequence[str],
    per_class: int = 16,
    seed: int = 0,
    **head_kwargs: Any,
):
    """Append a label-embedding head initialised with class centroids of the model's embeddings
    (up to ``per_class`` texts per class), a warm start for short stage-1 runs. Returns the head."""
    from contrastive_bert.heads.label_embedding import LabelEmbeddingClassifier, find_label_head

    if find_label_head(model) is not None:
        raise ValueError("model: already has a label head")
    labels_array = np.asarray(labels)
    rng = np.random.default_rng(seed)
    picked = []
    for k in range(len(label_names)):
        rows = np.flatnonzero(labels_array == k)
        if len(rows) == 0:
            raise ValueError(f"labels: class {k} ({label_names[k]!r}) has no example")
        picked.extend(rng.choice(rows, size=min(per_class, len(rows)), replace=False).tolist())
    embeddings = model.encode([texts[i] for i in picked], convert_to_tensor=True, batch_size=64).float().cpu()
    picked_labels = torch.as_tensor(labels_array[picked])
    centroids = torch.stack([embeddings[picked_labels == k].mean(0) for k in range(len(label_names))])
    head = LabelEmbeddingClassifier(
        embeddings.shape[1], list(label_names), init_weight=nn.functional.normalize(centroids, dim=-1), **head_kwargs
    )
    model.append(head.to(next(model.parameters()).device))
    return head


def train_stage2_on_cache(
    model: nn.Module,
    cache: LayerStateCache,
    label_names: Sequence[str],
    *,
    head_type: str = "linear",
    method: str = "acl_cl",
    exit_layers: Sequence[int] | None = None,
    seed: int = 0,
    max_steps: int = 300,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    **loss_kwargs: Any,
) -> MultiExitHeads:
    """Stage 2 for one (head type, method, seed): replace the model's exit heads by fresh ones (the
    final exit copies the model's stage-1 label head), train the intermediate exits on ``cache``
    with ``CrossLayerLoss(method, train_final=False)``. Returns the heads (attached to ``model``)."""
    from contrastive_bert.heads.exits import add_exit_heads, remove_exit_heads
    from contrastive_bert.losses.cross_layer import CrossLayerLoss

    remove_exit_heads(model)
    torch.manual_seed(seed)
    heads = add_exit_heads(model, label_names, exit_layers=exit_layers, head_type=head_type)
    loss = CrossLayerLoss(model, method=method, train_final=False, **loss_kwargs)
    train_exits_on_cache(
        heads, cache, loss, max_steps=max_steps, batch_size=batch_size, learning_rate=learning_rate, seed=seed
    )
    return heads

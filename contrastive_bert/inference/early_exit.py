"""Early-exit classification that really stops computing layers for the examples that exited.

The BERT encoder is run layer by layer (:class:`LayerwiseEncoder`); after every layer that has an
exit head the exit criterion is applied, the rows that exit are answered and dropped from the
batch (and the padding is trimmed to the longest remaining row), so deeper layers run on fewer
rows. Criteria (the ACL seed's and PABEE's):

- ``confidence``: max_k p_k > threshold (default 0.9)
- ``margin``: p_(1) - p_(2) > threshold (default 0.3)
- ``patience``: the last ``patience`` exits predicted the same class (PABEE-style)
- ``none``: no early exit (every example runs all layers)

Rows that never satisfy the criterion are answered by the final layer's classifier, so with a
threshold of 1.0 the predictions equal the full model's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from transformers.masking_utils import create_bidirectional_mask

from contrastive_bert.heads.exits import MultiExitHeads, get_exit_heads, transformer_module
from contrastive_bert.inference.exit_criteria import DEFAULT_THRESHOLDS, EXIT_CRITERIA



class LayerwiseEncoder:
    """A BERT-family encoder run one layer at a time on any subset of rows.

    ``embed`` -> hidden states (B, T, H) after the embedding layer; ``layer(i, hidden, mask)`` ->
    hidden states after layer ``i`` (1-based). Layer by layer it reproduces the HF model's
    ``hidden_states`` output.
    """

    def __init__(self, auto_model: nn.Module) -> None:
        embeddings = getattr(auto_model, "embeddings", None)
        layers = getattr(getattr(auto_model, "encoder", None), "layer", None)
        if embeddings is None or layers is None:
            raise ValueError(
                f"auto_model: expected a BERT-family encoder with .embeddings and .encoder.layer, "
                f"got {type(auto_model).__name__}"
            )
        if getattr(auto_model.config, "is_decoder", False):
            raise ValueError("auto_model: decoder (causal) models are not supported")
        self.auto_model = auto_model
        self.embeddings = embeddings
        self.layers = layers

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def embed(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        """Token ids (B, T) -> embedding-layer output (B, T, H)."""
        return self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)

    def layer(self, index: int, hidden: Tensor, attention_mask: Tensor) -> Tensor:
        """Apply layer ``index`` (1-based) to hidden (B, T, H) with padding mask (B, T)."""
        if not 1 <= index <= self.num_layers:
            raise ValueError(f"index: layer must be in [1, {self.num_layers}], got {index}")
        mask = create_bidirectional_mask(
            config=self.auto_model.config, inputs_embeds=hidden, attention_mask=attention_mask
        )
        return self.layers[index - 1](hidden, mask)

    def all_hidden_states(
        self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor | None = None
    ) -> list[Tensor]:
        """All L + 1 hidden states (B, T, H), as HF's ``output_hidden_states``."""
        hidden = self.embed(input_ids, token_type_ids)
        states = [hidden]
        for index in range(1, self.num_layers + 1):
            hidden = self.layer(index, hidden, attention_mask)
            states.append(hidden)
        return states


def check_threshold(criterion: str, threshold: float | None) -> float | None:
    """Validate ``criterion`` and ``threshold`` in [0, 1]; fill in the default threshold."""
    if criterion not in EXIT_CRITERIA:
        raise ValueError(f"criterion: expected one of {EXIT_CRITERIA}, got {criterion!r}")
    if criterion not in DEFAULT_THRESHOLDS:
        return None
    if threshold is None:
        return DEFAULT_THRESHOLDS[criterion]
    if not isinstance(threshold, (int, float)) or not 0.0 <= float(threshold) <= 1.0:
        raise ValueError(f"threshold: must be in [0, 1], got {threshold!r}")
    return float(threshold)


def exit_decision(
    probabilities: Tensor,
    criterion: str,
    threshold: float | None = None,
    history: Tensor | None = None,
    patience: int = 2,
) -> Tensor:
    """Which rows exit: probabilities (B, K) -> bool (B,). For ``patience``, ``history`` (B, n)
    holds the predictions of the exits seen so far, the current one last."""
    threshold = check_threshold(criterion, threshold)
    if criterion == "confidence":
        return probabilities.max(dim=-1).values > threshold
    if criterion == "margin":
        top2 = probabilities.topk(2, dim=-1).values
        return (top2[:, 0] - top2[:, 1]) > threshold
    if criterion == "patience":
        if history is None or history.shape[1] < patience:
            return torch.zeros(probabilities.shape[0], dtype=torch.bool, device=probabilities.device)
        last = history[:, -patience:]
        return (last == last[:, -1:]).all(dim=1)
    return torch.zeros(probabilities.shape[0], dtype=torch.bool, device=probabilities.device)


@dataclass
class EarlyExitResult:
    """Predictions of an early-exit run.

    predictions (n,) class ids, probabilities (n, K) at the exit taken, exit_layers (n,) the layer
    each example exited at, batch_avg_layers the mean layers per batch, avg_layers overall,
    seconds wall time (tokenisation included), throughput in sentences/s.
    """

    predictions: np.ndarray
    probabilities: np.ndarray
    exit_layers: np.ndarray
    label_names: list[str]
    batch_avg_layers: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def avg_layers(self) -> float:
        return float(self.exit_layers.mean()) if len(self.exit_layers) else 0.0

    @property
    def throughput(self) -> float:
        return len(self.predictions) / self.seconds if self.seconds > 0 else float("inf")

    @property
    def labels(self) -> list[str]:
        return [self.label_names[i] for i in self.predictions]

    def accuracy(self, labels: Sequence[int]) -> float:
        """Accuracy in percent against gold class ids."""
        gold = np.asarray(labels)
        if gold.shape != self.predictions.shape:
            raise ValueError(f"labels: expected {self.predictions.shape[0]} labels, got {gold.shape[0]}")
        return float((gold == self.predictions).mean() * 100.0)


class EarlyExitClassifier:
    """Batched early-exit classification with a model that carries :class:`MultiExitHeads`.

    ``predict`` exits early by ``criterion``; ``predict_full`` runs the unmodified HF forward
    (all layers) and the final classifier; ``predict_truncated(depth)`` runs only the first
    ``depth`` layers and answers with that layer's exit.
    """

    def __init__(
        self,
        model: nn.Module,
        criterion: str = "confidence",
        threshold: float | None = None,
        patience: int = 2,
        batch_size: int = 32,
        trim_padding: bool = True,
    ) -> None:
        self.threshold = check_threshold(criterion, threshold)
        if not isinstance(patience, int) or patience < 1:
            raise ValueError(f"patience: must be an integer >= 1, got {patience!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: must be an integer >= 1, got {batch_size!r}")
        self.model = model
        self.heads: MultiExitHeads = get_exit_heads(model)
        self.encoder = LayerwiseEncoder(transformer_module(model).auto_model)
        self.criterion = criterion
        self.patience = patience
        self.batch_size = batch_size
        # Trimming keeps the first `length` positions: only valid with right padding.
        tokenizer = getattr(transformer_module(model), "tokenizer", None)
        self.trim_padding = trim_padding and getattr(tokenizer, "padding_side", "right") == "right"

    @property
    def device(self) -> torch.device:
        return next(self.heads.parameters()).device

    def _batches(self, texts: Sequence[str]) -> list[tuple[np.ndarray, dict[str, Any]]]:
        """Sort by length (as ST's encode does) and tokenize: list of (row indices, features)."""
        if isinstance(texts, str) or len(texts) == 0:
            raise ValueError("texts: expected a non-empty list of strings")
        if any(not isinstance(text, str) or not text.strip() for text in texts):
            raise ValueError("texts: every text must be a non-empty string")
        order = np.argsort([-len(text) for text in texts], kind="stable")
        batches = []
        for start in range(0, len(texts), self.batch_size):
            rows = order[start : start + self.batch_size]
            features = self.model.preprocess([texts[i] for i in rows])
            batches.append(
                (rows, {k: v.to(self.device) for k, v in features.items() if isinstance(v, Tensor)})
            )
        return batches

    def _run(self, texts: Sequence[str], step) -> EarlyExitResult:
        self.model.eval()
        n, num_classes = len(texts), len(self.heads.label_names)
        predictions = np.zeros(n, dtype=np.int64)
        probabilities = np.zeros((n, num_classes), dtype=np.float32)
        layers = np.zeros(n, dtype=np.int64)
        batch_avg = []
        start = time.perf_counter()
        with torch.inference_mode():
            for rows, features in self._batches(texts):
                probs, used = step(features)
                predictions[rows] = probs.argmax(-1).cpu().numpy()
                probabilities[rows] = probs.float().cpu().numpy()
                layers[rows] = used.cpu().numpy()
                batch_avg.append(float(used.float().mean()))
        seconds = time.perf_counter() - start
        return EarlyExitResult(predictions, probabilities, layers, self.heads.label_names, batch_avg, seconds)

    def predict(self, texts: Sequence[str]) -> EarlyExitResult:
        """Early-exit classification of ``texts``."""
        return self._run(texts, self._early_exit_batch)

    def predict_full(self, texts: Sequence[str]) -> EarlyExitResult:
        """All layers through the unmodified HF forward, answered by the final classifier."""
        return self._run(texts, self._full_batch)

    def predict_truncated(self, texts: Sequence[str], depth: int) -> EarlyExitResult:
        """Only the first ``depth`` layers, answered by the exit on layer ``depth``."""
        self.heads.exit(depth)
        return self._run(texts, lambda features: self._truncated_batch(features, depth))

    def _full_batch(self, features: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        inputs = {k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in features}
        hidden = self.encoder.auto_model(**inputs).last_hidden_state
        _, logits = self.heads.forward_layer(self.heads.num_layers, hidden, features["attention_mask"])
        used = torch.full((hidden.shape[0],), self.heads.num_layers, device=hidden.device)
        return logits.softmax(-1), used

    def _truncated_batch(self, features: dict[str, Tensor], depth: int) -> tuple[Tensor, Tensor]:
        mask = features["attention_mask"]
        hidden = self.encoder.embed(features["input_ids"], features.get("token_type_ids"))
        for index in range(1, depth + 1):
            hidden = self.encoder.layer(index, hidden, mask)
        _, logits = self.heads.forward_layer(depth, hidden, mask)
        return logits.softmax(-1), torch.full((hidden.shape[0],), depth, device=hidden.device)

    def _early_exit_batch(self, features: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """One batch: (probabilities (B, K) at each row's exit, layers used (B,))."""
        mask = features["attention_mask"]
        batch = mask.shape[0]
        hidden = self.encoder.embed(features["input_ids"], features.get("token_type_ids"))
        out_probs = torch.zeros(batch, len(self.heads.label_names), device=hidden.device)
        out_layers = torch.zeros(batch, dtype=torch.long, device=hidden.device)
        active = torch.arange(batch, device=hidden.device)  # original row of each remaining row
        history: Tensor | None = None  # (b, n_exits_seen) predictions, patience criterion
        exits = set(self.heads.exit_layers)
        last = self.encoder.num_layers
        for index in range(1, last + 1):
            hidden = self.encoder.layer(index, hidden, mask)
            if index not in exits:
                continue
            _, logits = self.heads.forward_layer(index, hidden, mask)
            probs = logits.softmax(-1)
            pred = probs.argmax(-1, keepdim=True)
            history = pred if history is None else torch.cat([history, pred], dim=1)
            if index == last:
                done = torch.ones(hidden.shape[0], dtype=torch.bool, device=hidden.device)
            else:
                done = exit_decision(probs, self.criterion, self.threshold, history, self.patience)
            if done.any():
                out_probs[active[done]] = probs[done]
                out_layers[active[done]] = index
            if done.all():
                break
            keep = ~done
            hidden, mask, active, history = hidden[keep], mask[keep], active[keep], history[keep]
            if self.trim_padding:
                length = int(mask.sum(dim=1).max())
                hidden, mask = hidden[:, :length], mask[:, :length]
        return out_probs, out_layers


def sweep_thresholds(
    model: nn.Module,
    texts: Sequence[str],
    labels: Sequence[int],
    settings: Sequence[tuple[str, float | int]],
    batch_size: int = 32,
    truncated_depths: Sequence[int] = (),
    repeats: int = 1,
) -> dict[str, Any]:
    """Accuracy (percent), throughput (sentences/s) and average layers of the full model, of each
    early-exit setting ``(criterion, threshold)`` (for ``patience`` the value is the patience t),
    and of the model truncated to each depth in ``truncated_depths``; all measured in this call.
    With ``repeats`` > 1 the fastest of the repeated timings is kept (predictions are identical).

    Returns ``{"full": {...}, "sweep": [{"criterion", "threshold", "accuracy", "throughput",
    "avg_layers"}, ...], "truncated": [{"depth", ...}, ...]}``.
    """
    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")

    def measure(run) -> dict[str, float]:
        results = [run() for _ in range(repeats)]
        best = min(results, key=lambda r: r.seconds)
        return {
            "accuracy": round(best.accuracy(labels), 2),
            "throughput": round(best.throughput, 1),
            "avg_layers": round(best.avg_layers, 3),
        }

    base = EarlyExitClassifier(model, criterion="none", batch_size=batch_size)
    out: dict[str, Any] = {"full": measure(lambda: base.predict_full(texts)), "sweep": [], "truncated": []}
    for criterion, value in settings:
        if criterion == "patience":
            classifier = EarlyExitClassifier(model, "patience", patience=int(value), batch_size=batch_size)
        else:
            classifier = EarlyExitClassifier(model, criterion, float(value), batch_size=batch_size)
        out["sweep"].append({"criterion": criterion, "threshold": value, **measure(lambda: classifier.predict(texts))})
    for depth in truncated_depths:
        out["truncated"].append({"depth": int(depth), **measure(lambda: base.predict_truncated(texts, int(depth)))})
    return out

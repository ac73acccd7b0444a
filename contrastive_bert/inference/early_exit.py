"""Early-exit classification that really stops computing layers for the examples that exited.

The encoder runs layer by layer (:class:`~contrastive_bert.encoder.LayerwiseEncoder`); after
every layer that has an exit head the criterion (:mod:`contrastive_bert.inference.exit_criteria`)
decides which rows stop; those are answered and dropped from the batch (and the padding is
trimmed to the longest remaining row), so deeper layers run on fewer rows. Rows that never
satisfy the criterion are answered by the final layer's classifier, so with a threshold of 1.0
the predictions equal the full model's.

Regrouping (``regroup=True``, the default for ``batch_size > 1``): after each exit the rows still
running are pooled across a window of batches and regrouped into full batches of ``batch_size``
before the next layers, instead of running a few leftover rows per batch. Once most rows exit at
the first exit, the deeper layers otherwise run on batches of 2-3 rows, where per-call overhead
(and the exit heads on tiny batches) costs far more than their share of the work. Each row's
answer is the same either way (rows are independent under the attention mask); only the grouping
changes. ``regroup=False`` answers every batch on its own (a streaming server that must reply
per request batch).

Where the time goes besides the layers (measured on all-MiniLM-L6-v2, CPU): tokenisation (the
tokenizer is called directly, without ``SentenceTransformer.preprocess``'s per-call work), the
exit heads (one [CLS] query per MHA exit) and the attention mask, built once per group of rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrastive_bert.benchmarking.protocol import choose_on_dev
from contrastive_bert.encoder import LayerwiseEncoder, PreparedMask, transformer_module
from contrastive_bert.heads.exits import MultiExitHeads, get_exit_heads, load_multi_exit_model
from contrastive_bert.inference.exit_criteria import DEFAULT_CRITERION, MAX_ACCURACY_LOSS, ExitCriterion, criterion_class, get_criterion

logger = logging.getLogger(__name__)

__all__ = [
    "EarlyExitClassifier",
    "EarlyExitResult",
    "choose_exit_setting",
    "default_settings",
    "exit_probabilities",
    "simulate_early_exit",
    "simulated_sweep",
    "sweep_thresholds",
]


@dataclass
class EarlyExitResult:
    """Predictions of an early-exit run.

    predictions (n,) class ids, probabilities (n, K) at the exit taken, layers_used (n,) the layer
    each example left at (the last layer for rows that ran all layers), batch_avg_layers the mean layers per batch, avg_layers overall,
    seconds wall time (tokenisation included), throughput in sentences/s; cpu_seconds the CPU
    time of this process over the same span and cpu_throughput sentences per CPU-second (with
    one torch thread, robust to other processes loading the machine).
    """

    predictions: np.ndarray
    probabilities: np.ndarray
    layers_used: np.ndarray
    label_names: list[str]
    batch_avg_layers: list[float] = field(default_factory=list)
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def avg_layers(self) -> float:
        return float(self.layers_used.mean()) if len(self.layers_used) else 0.0

    @property
    def throughput(self) -> float:
        return len(self.predictions) / self.seconds if self.seconds > 0 else float("inf")

    @property
    def cpu_throughput(self) -> float:
        return len(self.predictions) / self.cpu_seconds if self.cpu_seconds > 0 else float("inf")

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

    ``criterion``: a registered name or an :class:`ExitCriterion` object; ``threshold`` None is
    the criterion's default (for ``patience`` the threshold is the number of agreeing exits).
    ``predict`` exits early; ``predict_full`` runs the unmodified HF forward (all layers) and
    the final classifier; ``predict_truncated(depth)`` runs only the first ``depth`` layers and
    answers with that layer's exit. ``regroup``: pool the rows still running after each exit
    across up to ``regroup_window`` batches and regroup them into full batches (see the module
    docstring); False answers each batch on its own.
    """

    def __init__(
        self,
        model: nn.Module,
        criterion: str | ExitCriterion = DEFAULT_CRITERION,
        threshold: float | int | None = None,
        batch_size: int = 32,
        trim_padding: bool = True,
        regroup: bool = True,
        regroup_window: int = 64,
    ) -> None:
        self.criterion = get_criterion(criterion, threshold)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: must be an integer >= 1, got {batch_size!r}")
        if not isinstance(regroup, bool):
            raise ValueError(f"regroup: must be true or false, got {regroup!r}")
        if isinstance(regroup_window, bool) or not isinstance(regroup_window, int) or regroup_window < 1:
            raise ValueError(f"regroup_window: must be an integer >= 1 (batches), got {regroup_window!r}")
        self.model = model
        self.heads: MultiExitHeads = get_exit_heads(model)
        self.encoder = LayerwiseEncoder.from_model(model)
        self.batch_size = batch_size
        transformer = transformer_module(model)
        self.tokenizer = getattr(transformer, "tokenizer", None)
        # Trimming keeps the first `length` positions: only valid with right padding.
        self.trim_padding = trim_padding and getattr(self.tokenizer, "padding_side", "right") == "right"
        # Regrouping pads rows of different lengths on the right: needs right padding too.
        self.regroup = regroup and batch_size > 1 and self.trim_padding
        self.regroup_window = regroup_window

    @classmethod
    def from_pretrained(
        cls, path: str, criterion: str | ExitCriterion = DEFAULT_CRITERION, threshold: float | int | None = None,
        device: str | None = None, **kwargs: Any,
    ) -> EarlyExitClassifier:
        """Load a saved multi-exit model (e.g. ``<output_dir>/final`` of a two-stage recipe)."""
        return cls(load_multi_exit_model(path, device=device), criterion, threshold, **kwargs)

    @property
    def threshold(self) -> float | int | None:
        return self.criterion.threshold

    @property
    def device(self) -> torch.device:
        return next(self.heads.parameters()).device

    def _ensure_eval(self) -> None:
        """Eval mode (no dropout), set only when the model, its encoder or its heads are in training
        mode (``model.train()`` sets them all): ``model.eval()`` walks every submodule (~150 modules,
        ~7,000 Python calls on MiniLM), a fixed cost of every call that at batch 1 was about a
        quarter of an early-exit call's time outside the layers and heads."""
        if self.model.training or self.encoder.auto_model.training or self.heads.training:
            self.model.eval()

    def tokenize(self, texts: list[str]) -> dict[str, Tensor]:
        """Token ids, attention mask (and token types) (b, T), as ``model.preprocess`` gives them."""
        if self.tokenizer is None:
            features = self.model.preprocess(texts)
        else:
            features = self.tokenizer(
                texts, padding=True, truncation="longest_first", max_length=self.model.max_seq_length,
                return_tensors="pt",
            )
        return {k: v.to(self.device) for k, v in features.items() if isinstance(v, Tensor)}

    def _run(self, texts: Sequence[str], step: Callable[[list[dict[str, Tensor]]], tuple[Tensor, Tensor]],
             window: int = 1) -> EarlyExitResult:
        """Tokenise ``texts`` (sorted by length) in batches and answer them ``window`` batches at a
        time with ``step`` (list of batch features -> probabilities (N, K), layers used (N,))."""
        if isinstance(texts, str) or len(texts) == 0:
            raise ValueError("texts: expected a non-empty list of strings")
        if any(not isinstance(text, str) or not text.strip() for text in texts):
            raise ValueError("texts: every text must be a non-empty string")
        self._ensure_eval()
        n, num_classes = len(texts), len(self.heads.label_names)
        predictions = np.zeros(n, dtype=np.int64)
        probabilities = np.zeros((n, num_classes), dtype=np.float32)
        layers = np.zeros(n, dtype=np.int64)
        start, cpu_start = time.perf_counter(), time.process_time()
        order = np.argsort([-len(text) for text in texts], kind="stable")  # as ST's encode does
        span = self.batch_size * window
        with torch.inference_mode():
            for begin in range(0, n, span):
                rows = order[begin : begin + span]
                batches = [self.tokenize([texts[i] for i in rows[b : b + self.batch_size]])
                           for b in range(0, len(rows), self.batch_size)]
                probs, used = step(batches)
                probs_np, used_np = probs.float().cpu().numpy(), used.cpu().numpy()
                predictions[rows] = probs_np.argmax(-1)
                probabilities[rows] = probs_np
                layers[rows] = used_np
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        batch_avg = [float(layers[order[b : b + self.batch_size]].mean()) for b in range(0, n, self.batch_size)]
        return EarlyExitResult(predictions, probabilities, layers, self.heads.label_names, batch_avg, seconds, cpu_seconds)

    def predict(self, texts: Sequence[str]) -> EarlyExitResult:
        """Early-exit classification of ``texts``."""
        return self._run(texts, self._early_exit, window=self.regroup_window if self.regroup else 1)

    def predict_full(self, texts: Sequence[str]) -> EarlyExitResult:
        """All layers through the unmodified HF forward, answered by the final classifier."""
        return self._run(texts, lambda batches: self._each_batch(batches, self._full_batch))

    def predict_truncated(self, texts: Sequence[str], depth: int) -> EarlyExitResult:
        """Only the first ``depth`` layers, answered by the exit on layer ``depth``."""
        self.heads.exit(depth)
        return self._run(texts, lambda batches: self._each_batch(batches, lambda f: self._truncated_batch(f, depth)))

    @staticmethod
    def _each_batch(batches: list[dict[str, Tensor]], step: Callable[[dict[str, Tensor]], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        outputs = [step(features) for features in batches]
        return torch.cat([p for p, _ in outputs]), torch.cat([u for _, u in outputs])

    def _full_batch(self, features: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        inputs = {k: features[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in features}
        hidden = self.encoder.auto_model(**inputs).last_hidden_state
        _, logits = self.heads.forward_layer(self.heads.num_layers, hidden, features["attention_mask"])
        used = torch.full((hidden.shape[0],), self.heads.num_layers)
        return logits.softmax(-1), used

    def _truncated_batch(self, features: dict[str, Tensor], depth: int) -> tuple[Tensor, Tensor]:
        mask = features["attention_mask"]
        hidden = self.encoder.embed(features["input_ids"], features.get("token_type_ids"))
        hidden = self.encoder.run_layers(hidden, mask, 1, depth)
        _, logits = self.heads.forward_layer(depth, hidden, mask)
        return logits.softmax(-1), torch.full((hidden.shape[0],), depth)

    def _embedded(self, batches: list[dict[str, Tensor]]) -> Iterator[_RunningRows]:
        """Per batch its embedding output, computed lazily so only one batch's embeddings live at a time."""
        offset = 0
        for features in batches:
            padding = features["attention_mask"]
            rows = torch.arange(offset, offset + padding.shape[0], device=padding.device)
            offset += padding.shape[0]
            yield _RunningRows(self.encoder.embed(features["input_ids"], features.get("token_type_ids")), padding, rows)

    def _trim(self, group: _RunningRows) -> _RunningRows:
        """Padding cut to the longest row of ``group`` (its layer mask is rebuilt if that changed it)."""
        if not self.trim_padding:
            return group
        length = int(group.padding.sum(dim=1).max())
        if length == group.padding.shape[1]:
            return group
        return group._replace(hidden=group.hidden[:, :length], padding=group.padding[:, :length], mask=None)

    def _regrouped(self, groups: list[_RunningRows]) -> list[_RunningRows]:
        """The rows of ``groups`` (still running, in length order) as batches of ``batch_size``,
        right-padded to a common length and then trimmed per new batch."""
        width = max(group.hidden.shape[1] for group in groups)
        hidden = torch.cat([F.pad(g.hidden, (0, 0, 0, width - g.hidden.shape[1])) for g in groups])
        padding = torch.cat([F.pad(g.padding, (0, width - g.padding.shape[1])) for g in groups])
        rows = torch.cat([g.rows for g in groups])
        history = torch.cat([g.history for g in groups])
        return [
            self._trim(_RunningRows(hidden[b : b + self.batch_size], padding[b : b + self.batch_size],
                                    rows[b : b + self.batch_size], history[b : b + self.batch_size]))
            for b in range(0, hidden.shape[0], self.batch_size)
        ]

    def _early_exit(self, batches: list[dict[str, Tensor]]) -> tuple[Tensor, Tensor]:
        """Rows of ``batches`` in order: (probabilities (N, K) at each row's exit, layers used (N,)).

        Segment by segment (the layers up to the next exit), each group of rows runs the segment,
        its exit decides, the exited rows are answered and the rest go on: regrouped across the
        window into full batches (``regroup``) or each batch on its own; padding trimmed."""
        total = sum(features["attention_mask"].shape[0] for features in batches)
        device = batches[0]["attention_mask"].device
        out_probs = torch.zeros(total, len(self.heads.label_names), device=device)
        out_layers = torch.zeros(total, dtype=torch.long, device=device)
        last = self.encoder.num_layers
        groups: Iterable[_RunningRows] = self._embedded(batches)
        start = 1
        for layer in self.heads.head_layers:
            running: list[_RunningRows] = []
            for group in groups:
                mask = group.mask if group.mask is not None else self.encoder.prepare_mask(group.hidden, group.padding)
                hidden = self.encoder.run_layers(group.hidden, mask, start, layer)
                _, logits = self.heads.forward_layer(layer, hidden, group.padding)
                probs = logits.softmax(-1)
                pred = probs.argmax(-1, keepdim=True)
                history = pred if group.history is None else torch.cat([group.history, pred], dim=1)
                if layer == last:
                    out_probs[group.rows], out_layers[group.rows] = probs, layer
                    continue
                done = self.criterion.should_exit(probs, history)
                num_done = int(done.sum())
                if num_done == 0:  # nobody left: the layer mask stays valid
                    running.append(_RunningRows(hidden, group.padding, group.rows, history, mask))
                    continue
                rows = group.rows[done]
                out_probs[rows], out_layers[rows] = probs[done], layer
                if num_done < len(done):
                    keep = ~done
                    running.append(self._trim(_RunningRows(hidden[keep], group.padding[keep], group.rows[keep], history[keep])))
            if not running:
                break
            groups = self._regrouped(running) if self.regroup else running
            start = layer + 1
        return out_probs, out_layers.cpu()


class _RunningRows(NamedTuple):
    """Rows still running after some layer: hidden (b, T, H), padding mask (b, T), their row index
    in the window (b,), predicted classes at the exits so far (b, exits) or None, and the layer
    mask built for exactly these rows (None: build it)."""

    hidden: Tensor
    padding: Tensor
    rows: Tensor
    history: Tensor | None = None
    mask: PreparedMask | None = None


def default_settings(criteria: Sequence[str] = ("confidence", "margin", "patience")) -> list[tuple[str, float | int]]:
    """(criterion, threshold) pairs of each criterion's default sweep."""
    return [(name, value) for name in criteria for value in criterion_class(name).sweep_thresholds]


def sweep_thresholds(
    model: nn.Module,
    texts: Sequence[str],
    labels: Sequence[int],
    settings: Sequence[tuple[str, float | int]],
    batch_size: int = 32,
    truncated_depths: Sequence[int] = (),
    repeats: int = 1,
    regroup: bool = True,
    show_progress_bar: bool = False,
) -> dict[str, Any]:
    """Accuracy (percent), throughput (sentences/s), CPU throughput (sentences per CPU-second)
    and average layers of the full model, of each early-exit setting ``(criterion, threshold)``,
    and of the model truncated to each depth in ``truncated_depths``; all measured in this call.
    With ``repeats`` > 1 the fastest of the repeated timings is kept (predictions are identical).
    ``regroup``: early exit regroups running rows across batches (see :class:`EarlyExitClassifier`).
    ``show_progress_bar``: a tqdm bar over the settings measured (minutes on a CPU for a dev split).

    Returns ``{"full": {...}, "truncated": [{"depth", ...}, ...], "sweep": [{"criterion",
    "threshold", "accuracy", "throughput", "cpu_throughput", "avg_layers"}, ...]}``.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats: must be an integer >= 1, got {repeats!r}")
    classifiers = [EarlyExitClassifier(model, criterion, value, batch_size=batch_size, regroup=regroup)
                   for criterion, value in settings]
    base = EarlyExitClassifier(model, criterion="none", batch_size=batch_size)
    for depth in truncated_depths:
        base.heads.exit(int(depth))

    from tqdm.auto import tqdm

    bar = tqdm(total=(1 + len(truncated_depths) + len(classifiers)) * repeats, desc="early-exit sweep", unit="run",
               disable=not show_progress_bar)

    def measure(run: Callable[[], EarlyExitResult]) -> dict[str, float]:
        results = []
        for _ in range(repeats):
            results.append(run())
            bar.update(1)
        best = min(results, key=lambda r: r.seconds)
        return {
            "accuracy": round(best.accuracy(labels), 2),
            "throughput": round(best.throughput, 1),
            "cpu_throughput": round(max(r.cpu_throughput for r in results), 1),
            "avg_layers": round(best.avg_layers, 3),
        }

    out: dict[str, Any] = {"full": measure(lambda: base.predict_full(texts)), "truncated": [], "sweep": []}
    for depth in truncated_depths:
        out["truncated"].append({"depth": int(depth), **measure(lambda: base.predict_truncated(texts, int(depth)))})
    for classifier in classifiers:
        out["sweep"].append(
            {"criterion": classifier.criterion.name, "threshold": classifier.threshold,
             **measure(lambda: classifier.predict(texts))}
        )
    bar.close()
    return out


def choose_exit_setting(dev: dict[str, Any], max_loss: float = MAX_ACCURACY_LOSS) -> dict[str, Any] | None:
    """The early-exit setting to use, chosen on a dev sweep (a :func:`sweep_thresholds` or
    :func:`simulated_sweep` result) by the protocol's
    :func:`~contrastive_bert.benchmarking.protocol.choose_on_dev`: the fastest, i.e. the fewest
    average layers (a count, unlike throughput not swayed by a loaded machine), among the settings
    whose accuracy is within ``max_loss`` points of the full model's; ties go to the higher
    accuracy, then to the earlier setting. None when no setting qualifies. Returns the setting's
    sweep entry with ``full_accuracy`` and ``accuracy_loss`` added."""
    if isinstance(max_loss, bool) or not isinstance(max_loss, (int, float)) or max_loss < 0:
        raise ValueError(f"max_loss: expected a number of points >= 0, got {max_loss!r}")
    full = dev["full"]["accuracy"]
    sweep = dev["sweep"]
    fewer_layers = {i: -s["avg_layers"] for i, s in enumerate(sweep) if s["accuracy"] >= full - max_loss - 1e-9}
    chosen = choose_on_dev(fewer_layers, tie_break=lambda i: sweep[i]["accuracy"])
    if chosen is None:
        return None
    best = sweep[chosen]
    return {**best, "full_accuracy": full, "accuracy_loss": round(full - best["accuracy"], 2)}


@torch.inference_mode()
def exit_probabilities(model: nn.Module, texts: Sequence[str], batch_size: int = 64) -> dict[int, np.ndarray]:
    """Class probabilities (n, K) of every head of ``model`` (each exit and the final classifier)
    on ``texts``: ``{layer: probabilities}``, all layers run on every row (one forward per batch),
    texts cut at the model's ``max_seq_length`` as early exit cuts them. What
    :func:`simulate_early_exit` needs to answer any criterion and threshold without running again."""
    from contrastive_bert.heads.exits import exit_outputs

    if isinstance(texts, str) or len(texts) == 0:
        raise ValueError("texts: expected a non-empty list of strings")
    classifier = EarlyExitClassifier(model, "none", batch_size=batch_size)
    classifier._ensure_eval()
    parts: dict[int, list[np.ndarray]] = {layer: [] for layer in classifier.heads.head_layers}
    for start in range(0, len(texts), batch_size):
        features = classifier.tokenize(list(texts[start : start + batch_size]))
        logits = exit_outputs(model, features)["exit_logits"]
        for layer in parts:
            parts[layer].append(logits[layer].float().softmax(-1).cpu().numpy())
    return {layer: np.concatenate(chunks) for layer, chunks in parts.items()}


def simulate_early_exit(
    probabilities: dict[int, np.ndarray], criterion: str | ExitCriterion, threshold: float | int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(predictions (n,), layers used (n,)) that early exit with ``criterion`` gives, computed from
    every head's probabilities (:func:`exit_probabilities`): rows are independent, so each row
    leaves at the first exit whose decision fires, else at the last layer, exactly as
    :meth:`EarlyExitClassifier.predict` decides it (up to float rounding at a threshold)."""
    rule = get_criterion(criterion, threshold)
    layers = sorted(probabilities)
    if not layers:
        raise ValueError("probabilities: expected the probabilities of at least one head")
    n = probabilities[layers[0]].shape[0]
    predictions = np.zeros(n, dtype=np.int64)
    used = np.full(n, layers[-1], dtype=np.int64)
    running = np.ones(n, dtype=bool)
    history: list[Tensor] = []
    for layer in layers:
        probs = torch.from_numpy(np.asarray(probabilities[layer], dtype=np.float32))
        history.append(probs.argmax(-1))
        if layer == layers[-1]:
            predictions[running] = history[-1].numpy()[running]
            break
        done = rule.should_exit(probs, torch.stack(history, dim=1)).numpy() & running
        predictions[done], used[done] = history[-1].numpy()[done], layer
        running &= ~done
    return predictions, used


def simulated_sweep(
    probabilities: dict[int, np.ndarray], labels: Sequence[int], settings: Sequence[tuple[str, float | int]]
) -> dict[str, Any]:
    """Accuracy (percent) and average layers of the full model (the last head), of every head on
    its own (``exits``) and of each early-exit setting, from :func:`exit_probabilities`: the
    accuracy part of :func:`sweep_thresholds` without timing, so that :func:`choose_exit_setting` can
    choose on it. Returns ``{"full": {...}, "exits": {layer: accuracy}, "sweep": [{"criterion",
    "threshold", "accuracy", "avg_layers"}, ...]}``."""
    gold = np.asarray(labels)
    layers = sorted(probabilities)
    if gold.shape[0] != probabilities[layers[-1]].shape[0]:
        raise ValueError(f"labels: expected {probabilities[layers[-1]].shape[0]} labels, got {gold.shape[0]}")

    def accuracy(predicted: np.ndarray) -> float:
        return round(float((predicted == gold).mean() * 100.0), 2)

    exits = {layer: accuracy(probabilities[layer].argmax(-1)) for layer in layers}
    out: dict[str, Any] = {"full": {"accuracy": exits[layers[-1]], "avg_layers": float(layers[-1])}, "exits": exits, "sweep": []}
    for criterion, value in settings:
        predicted, used = simulate_early_exit(probabilities, criterion, value)
        rule = get_criterion(criterion, value)
        out["sweep"].append({"criterion": rule.name, "threshold": rule.threshold, "accuracy": accuracy(predicted),
                             "avg_layers": round(float(used.mean()), 3)})
    return out

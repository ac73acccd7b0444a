"""Exit heads for multi-exit models: a classifier (and a sentence embedding) on intermediate layers.

Two exit types, both ending in the label-embedding classifier of
:mod:`contrastive_bert.heads.label_embedding` (its weight rows are the exit's label embeddings):

- :class:`LinearExit`: pooled hidden state of layer m (mean or [CLS], optionally L2-normalised)
  -> label-embedding classifier.
- :class:`MHAExit` (the ACL seed's MHA exit): project the token states of layer m to
  ``exit_dim`` (d_e = 64), tanh, multi-head self-attention over the sequence, re-transform the
  [CLS] vector to ``out_features`` (tanh), then the label-embedding classifier.

:class:`MultiExitHeads` holds one exit per chosen layer and is a sentence-transformers module:
appended to a ``SentenceTransformer`` it is listed in ``modules.json`` and saved by
``model.save(path)`` like any module, and it leaves plain ``encode`` untouched (it passes the
features through, adding ``exit_embeddings``/``exit_logits`` only when the transformer returns its
hidden states, see :func:`exit_outputs`). Reload with :func:`load_multi_exit_model` /
``contrastive_bert.models.load_model(path)``, or ``SentenceTransformer(path, trust_remote_code=True)``
(sentence-transformers 6 imports module classes outside its own namespace only when trusted).

``exit_layers`` has one meaning everywhere (the heads, the ``cross_layer`` loss options, recipes):
the 1-based **intermediate** layers that get an exit. The last layer's exit is implicit: it is
always a linear exit, the model's final classifier (the teacher of ACL-CL and stage 1 of
two-stage training). :func:`check_exit_layers` is the one check of that convention;
``MultiExitHeads.head_layers`` lists every layer with a head (the exit layers and the last).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from sentence_transformers.base.modules import Module
from torch import Tensor, nn
from torch.nn import functional as F

from contrastive_bert.encoder import LayerwiseEncoder, transformer_module
from contrastive_bert.heads.label_embedding import LabelEmbeddingClassifier, find_label_head
from contrastive_bert.models import unwrap_model

EXIT_HEAD_TYPES: tuple[str, ...] = ("linear", "mha")
POOLING_MODES: tuple[str, ...] = ("mean", "cls")


def check_exit_layers(
    exit_layers: Sequence[int] | None, num_layers: int | None = None, name: str = "exit_layers"
) -> list[int] | None:
    """The one check of exit layers: a non-empty list of distinct 1-based layer numbers below the
    last layer (the last layer's exit, the final classifier, is implicit). Returns them sorted;
    None stays None (the caller's default: every intermediate layer). Without ``num_layers`` (no
    model yet, e.g. a recipe's options) only the form is checked. ``name`` prefixes the error
    (e.g. ``loss_options.exit_layers``)."""
    if exit_layers is None:
        return None
    if isinstance(exit_layers, (str, bytes)) or not isinstance(exit_layers, Sequence) or not exit_layers or any(
        isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in exit_layers
    ):
        raise ValueError(f"{name}: expected a non-empty list of layer numbers >= 1 (1-based), got {exit_layers!r}")
    if len(set(exit_layers)) != len(exit_layers):
        raise ValueError(f"{name}: a layer is listed twice in {list(exit_layers)}")
    if num_layers is not None:
        if num_layers in exit_layers:
            raise ValueError(
                f"{name}: layer {num_layers} is the last layer, whose exit (the final classifier) is always there; "
                f"list intermediate layers only, in [1, {num_layers - 1}]"
            )
        bad = [m for m in exit_layers if not 1 <= m < num_layers]
        if bad:
            raise ValueError(
                f"{name}: layers {bad} are out of range; the encoder has {num_layers} layers, exits go on [1, {num_layers - 1}]"
            )
    return sorted(int(m) for m in exit_layers)


def pool_tokens(token_embeddings: Tensor, attention_mask: Tensor, mode: str = "mean") -> Tensor:
    """Pool token states (B, T, H) with mask (B, T) into (B, H) by masked mean or [CLS]."""
    if mode == "cls":
        return token_embeddings[:, 0]
    if mode != "mean":
        raise ValueError(f"pooling: expected one of {POOLING_MODES}, got {mode!r}")
    mask = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)
    return (token_embeddings * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


class LinearExit(nn.Module):
    """Pooled hidden state -> sentence embedding (B, H) -> label-embedding classifier (B, K)."""

    def __init__(
        self, in_features: int, label_names: Sequence[str], pooling: str = "mean", normalize: bool = True
    ) -> None:
        super().__init__()
        if pooling not in POOLING_MODES:
            raise ValueError(f"pooling: expected one of {POOLING_MODES}, got {pooling!r}")
        self.pooling = pooling
        self.normalize = normalize
        self.out_features = in_features
        self.classifier = LabelEmbeddingClassifier(in_features, list(label_names))

    def embed(self, token_embeddings: Tensor, attention_mask: Tensor) -> Tensor:
        """Token states (B, T, H), mask (B, T) -> sentence embedding (B, H)."""
        embedding = pool_tokens(token_embeddings, attention_mask, self.pooling)
        return F.normalize(embedding, dim=-1) if self.normalize else embedding

    def forward(self, token_embeddings: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Returns (embedding (B, H), logits (B, K))."""
        embedding = self.embed(token_embeddings, attention_mask)
        return embedding, self.classifier.logits(embedding)


class MHAExit(nn.Module):
    """The seed's MHA exit: (B, T, H) -> tanh(W_p h) (B, T, d_e) -> self-attention -> [CLS] (B, d_e)
    -> tanh(W_o c) (B, out) -> label-embedding classifier (B, K)."""

    def __init__(
        self,
        in_features: int,
        label_names: Sequence[str],
        exit_dim: int = 64,
        num_heads: int = 4,
        out_features: int | None = None,
        dropout: float = 0.1,
        normalize: bool = True,
    ) -> None:
        super().__init__()
        if exit_dim < 1 or exit_dim % num_heads != 0:
            raise ValueError(f"exit_dim: must be a positive multiple of num_heads={num_heads}, got {exit_dim}")
        self.out_features = out_features or in_features
        self.normalize = normalize
        self.project = nn.Linear(in_features, exit_dim)
        self.attention = nn.MultiheadAttention(exit_dim, num_heads, dropout=dropout, batch_first=True)
        self.retransform = nn.Linear(exit_dim, self.out_features)
        self.classifier = LabelEmbeddingClassifier(self.out_features, list(label_names))

    def embed(self, token_embeddings: Tensor, attention_mask: Tensor) -> Tensor:
        """Token states (B, T, H), mask (B, T) -> sentence embedding (B, out_features)."""
        projected = torch.tanh(self.project(token_embeddings))  # (B, T, d_e)
        # Only the [CLS] query is needed: its attention over the unpadded tokens.
        if self.training:
            attended, _ = self.attention(
                projected[:, :1], projected, projected, key_padding_mask=attention_mask == 0, need_weights=False
            )  # (B, 1, d_e)
        else:
            attended = self._cls_attention(projected, attention_mask)
        embedding = torch.tanh(self.retransform(attended[:, 0]))
        return F.normalize(embedding, dim=-1) if self.normalize else embedding

    def _cls_attention(self, projected: Tensor, attention_mask: Tensor) -> Tensor:
        """``self.attention`` for the [CLS] query without dropout (inference), computed directly with
        the module's weights: (B, T, d_e) -> (B, 1, d_e). nn.MultiheadAttention's argument checks
        and reshapes cost more than the arithmetic on the small batches of early exit."""
        attention = self.attention
        batch, length, dim = projected.shape
        heads = attention.num_heads
        weight, bias = attention.in_proj_weight, attention.in_proj_bias
        query = F.linear(projected[:, :1], weight[:dim], None if bias is None else bias[:dim])
        key, value = F.linear(projected, weight[dim:], None if bias is None else bias[dim:]).chunk(2, dim=-1)
        query = query.view(batch, 1, heads, dim // heads).transpose(1, 2)  # (B, h, 1, d_h)
        key = key.reshape(batch, length, heads, dim // heads).transpose(1, 2)  # (B, h, T, d_h)
        value = value.reshape(batch, length, heads, dim // heads).transpose(1, 2)
        keep = (attention_mask != 0)[:, None, None, :]  # (B, 1, 1, T): True = attend
        attended = F.scaled_dot_product_attention(query, key, value, attn_mask=keep)  # (B, h, 1, d_h)
        return attention.out_proj(attended.transpose(1, 2).reshape(batch, 1, dim))

    def forward(self, token_embeddings: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Returns (embedding (B, out_features), logits (B, K))."""
        embedding = self.embed(token_embeddings, attention_mask)
        return embedding, self.classifier.logits(embedding)


class MultiExitHeads(Module):
    """One exit head per intermediate layer in ``exit_layers`` (1-based; default: every layer below
    the last) plus the final classifier, a linear exit on the last layer (always there, never listed).

    As a sentence-transformers module it passes features through; when the features hold the
    transformer's ``all_layer_embeddings`` (L + 1 tensors of (B, T, H)) it adds
    ``exit_embeddings`` and ``exit_logits``: dicts layer -> (B, d) and layer -> (B, K).
    """

    config_keys: list[str] = [
        "in_features",
        "label_names",
        "num_layers",
        "exit_layers",
        "head_type",
        "pooling",
        "normalize",
        "exit_dim",
        "num_heads",
        "dropout",
        "scale",
        "cosine",
    ]

    def __init__(
        self,
        in_features: int,
        label_names: Sequence[str],
        num_layers: int,
        exit_layers: Sequence[int] | None = None,
        head_type: str = "linear",
        pooling: str = "mean",
        normalize: bool = True,
        exit_dim: int = 64,
        num_heads: int = 4,
        dropout: float = 0.1,
        scale: float = 20.0,
        cosine: bool = True,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers: must be >= 1, got {num_layers}")
        if head_type not in EXIT_HEAD_TYPES:
            raise ValueError(f"head_type: expected one of {EXIT_HEAD_TYPES}, got {head_type!r}")
        if len(label_names) < 2:
            raise ValueError(f"label_names: need at least 2 labels, got {len(label_names)}")
        layers = check_exit_layers(exit_layers, num_layers)
        self.in_features = in_features
        self.label_names = list(label_names)
        self.num_layers = num_layers
        self.exit_layers: list[int] = list(range(1, num_layers)) if layers is None else layers
        self.head_type = head_type
        self.pooling = pooling
        self.normalize = normalize
        self.exit_dim = exit_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.scale = float(scale)
        self.cosine = bool(cosine)
        self.exits = nn.ModuleDict({str(m): self._make_exit(m) for m in self.head_layers})

    def _make_exit(self, layer: int) -> nn.Module:
        if self.head_type == "linear" or layer == self.num_layers:
            head = LinearExit(self.in_features, self.label_names, self.pooling, self.normalize)
        else:
            head = MHAExit(
                self.in_features,
                self.label_names,
                exit_dim=self.exit_dim,
                num_heads=self.num_heads,
                dropout=self.dropout,
                normalize=self.normalize,
            )
        head.classifier.scale = self.scale
        head.classifier.normalize = self.cosine
        return head

    @property
    def head_layers(self) -> list[int]:
        """Every layer with a head: the exit layers (the students of ACL-CL) and the last layer."""
        return [*self.exit_layers, self.num_layers]

    @property
    def final_exit(self) -> nn.Module:
        """The final layer's exit: the model's final classifier."""
        return self.exits[str(self.num_layers)]

    def exit(self, layer: int) -> nn.Module:
        """The exit head on ``layer`` (1-based)."""
        if layer not in self.head_layers:
            raise ValueError(f"layer: no exit on layer {layer}; heads are on {self.head_layers}")
        return self.exits[str(layer)]

    def label_embeddings(self, layer: int) -> Tensor:
        """Label embeddings (K, d) of the exit on ``layer``."""
        return self.exit(layer).classifier.weight

    def forward_layer(self, layer: int, token_embeddings: Tensor, attention_mask: Tensor) -> tuple[Tensor, Tensor]:
        """Hidden states (B, T, H) of ``layer`` -> (embedding (B, d), logits (B, K))."""
        return self.exit(layer)(token_embeddings, attention_mask)

    def forward_all(
        self, all_layer_embeddings: Sequence[Tensor], attention_mask: Tensor, layers: Sequence[int] | None = None
    ) -> tuple[dict[int, Tensor], dict[int, Tensor]]:
        """``all_layer_embeddings``: L + 1 tensors (B, T, H) (index 0 = embedding layer).
        Returns dicts layer -> embedding (B, d) and layer -> logits (B, K)."""
        if len(all_layer_embeddings) != self.num_layers + 1:
            raise ValueError(
                f"all_layer_embeddings: expected {self.num_layers + 1} hidden states for a "
                f"{self.num_layers}-layer encoder, got {len(all_layer_embeddings)}"
            )
        embeddings, logits = {}, {}
        for m in self.head_layers if layers is None else layers:
            embeddings[m], logits[m] = self.forward_layer(m, all_layer_embeddings[m], attention_mask)
        return embeddings, logits

    def forward(self, features: dict[str, Any], **kwargs) -> dict[str, Any]:
        if "all_layer_embeddings" in features:
            features["exit_embeddings"], features["exit_logits"] = self.forward_all(
                features["all_layer_embeddings"], features["attention_mask"]
            )
        return features

    def save(self, output_path: str, *args, safe_serialization: bool = True, **kwargs) -> None:
        self.save_config(output_path)
        self.save_torch_weights(output_path, safe_serialization=safe_serialization)

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs) -> MultiExitHeads:
        hub_kwargs = {
            key: kwargs[key] for key in ("token", "cache_folder", "revision", "local_files_only") if key in kwargs
        }
        config = cls.load_config(model_name_or_path, subfolder=subfolder, **hub_kwargs)
        if isinstance(config.get("exit_layers"), list):
            # saved before exit_layers meant the intermediate layers only, the last layer was listed too
            config["exit_layers"] = [m for m in config["exit_layers"] if m != config.get("num_layers")] or None
        heads = cls(**config)
        weights = cls.load_torch_weights(model_name_or_path, subfolder=subfolder, **hub_kwargs)
        saved_layers = sorted({int(key.split(".")[1]) for key in weights if key.startswith("exits.")})
        if saved_layers != heads.head_layers:
            raise ValueError(
                f"exit_layers: the saved weights hold heads on layers {saved_layers} but the saved "
                f"config declares heads on {heads.head_layers} (exit layers {heads.exit_layers} and the last layer)"
            )
        heads.load_state_dict(weights)
        return heads


def _check_expected_layers(heads: MultiExitHeads, exit_layers: Sequence[int] | None) -> None:
    expected = check_exit_layers(exit_layers, heads.num_layers)
    if expected is not None and expected != heads.exit_layers:
        raise ValueError(
            f"exit_layers: expected exits on layers {expected}, the model has exits on layers {heads.exit_layers} "
            f"(and the final classifier on layer {heads.num_layers})"
        )


def add_exit_heads(
    model: nn.Module,
    label_names: Sequence[str],
    exit_layers: Sequence[int] | None = None,
    head_type: str = "linear",
    **kwargs: Any,
) -> MultiExitHeads:
    """Create :class:`MultiExitHeads` matching ``model`` (hidden size, depth, pooling mode, normalisation),
    append it to ``model`` and return it. ``exit_layers``: 1-based intermediate layers (default:
    every layer below the last); the final classifier on the last layer is always added."""
    if find_exit_heads(model) is not None:
        raise ValueError("model: already has exit heads; use get_exit_heads(model)")
    encoder = LayerwiseEncoder.from_model(model)
    pooling, normalize = "mean", False
    for module in list(model)[1:]:
        mode = getattr(module, "pooling_mode", None)
        if mode is not None:
            mode = mode if isinstance(mode, str) else ""
            pooling = "cls" if "cls" in mode else "mean"
        if type(module).__name__ == "Normalize":
            normalize = True
    kwargs.setdefault("pooling", pooling)
    kwargs.setdefault("normalize", normalize)
    label_head = find_label_head(model)
    if label_head is not None and list(label_head.label_names) == list(label_names):
        kwargs.setdefault("scale", label_head.scale)
        kwargs.setdefault("cosine", label_head.normalize)
    heads = MultiExitHeads(encoder.hidden_size, label_names, encoder.num_layers, exit_layers, head_type, **kwargs)
    if label_head is not None and list(label_head.label_names) == heads.label_names:
        copy_label_head(heads, label_head)  # the trained final classifier becomes the final exit
    device = next(encoder.auto_model.parameters()).device
    unwrap_model(model).append(heads.to(device))
    return heads


def find_exit_heads(model: nn.Module) -> MultiExitHeads | None:
    """The model's :class:`MultiExitHeads` module, or None."""
    for module in unwrap_model(model).children():
        if isinstance(module, MultiExitHeads):
            return module
    return None


@torch.no_grad()
def copy_label_head(heads: MultiExitHeads, label_head: LabelEmbeddingClassifier, layers: Sequence[int] | None = None) -> None:
    """Copy a trained label head (weight, scale, cosine/linear form) into the linear exits on
    ``layers`` (default: the final exit only), e.g. stage 1's ACL-Embed head into the final exit."""
    if list(label_head.label_names) != heads.label_names:
        raise ValueError(
            f"label_head: its {len(label_head.label_names)} label names differ from the exit heads' "
            f"{len(heads.label_names)} label names (names and order must match)"
        )
    if (label_head.scale, label_head.normalize) != (heads.scale, heads.cosine):
        raise ValueError(
            f"label_head: scale={label_head.scale}, normalize={label_head.normalize} differ from the exit heads' "
            f"scale={heads.scale}, cosine={heads.cosine}"
        )
    for layer in [heads.num_layers] if layers is None else layers:
        exit_head = heads.exit(layer)
        if not isinstance(exit_head, LinearExit) or exit_head.classifier.in_features != label_head.in_features:
            raise ValueError(f"layers: the exit on layer {layer} is not a linear exit of width {label_head.in_features}")
        exit_head.classifier.weight.copy_(label_head.weight)


def tie_exits_to_label_head(heads: MultiExitHeads, label_head: LabelEmbeddingClassifier) -> None:
    """Give every (linear) exit a copy of one shared label head: the AdaptiveLayerLoss baseline,
    where one classifier reads the pooled embedding of any layer."""
    copy_label_head(heads, label_head, heads.head_layers)


def get_exit_heads(model: nn.Module, exit_layers: Sequence[int] | None = None) -> MultiExitHeads:
    """The model's exit heads; ValueError when missing, when they do not fit the encoder, or when
    ``exit_layers`` (the expected intermediate exit layers) does not match the saved heads."""
    heads = find_exit_heads(model)
    if heads is None:
        raise ValueError("model: has no exit heads; add them with add_exit_heads(model, label_names, ...)")
    depth = LayerwiseEncoder.from_model(model).num_layers
    if heads.num_layers != depth:
        raise ValueError(f"model: exit heads were built for {heads.num_layers} layers, the encoder has {depth}")
    _check_expected_layers(heads, exit_layers)
    return heads


@contextmanager
def hidden_states_enabled(model: nn.Module) -> Iterator[None]:
    """Within the block the transformer returns ``all_layer_embeddings`` (restored afterwards, also on error)."""
    config = transformer_module(model).auto_model.config
    original = config.output_hidden_states
    config.output_hidden_states = True
    try:
        yield
    finally:
        config.output_hidden_states = original


def exit_outputs(model: nn.Module, features: dict[str, Any]) -> dict[str, Any]:
    """Run ``model`` on tokenized ``features`` with hidden states on; the returned features hold
    ``sentence_embedding`` (B, D), ``exit_embeddings`` {layer: (B, d)} and ``exit_logits`` {layer: (B, K)}."""
    get_exit_heads(model)
    with hidden_states_enabled(model):
        return model(features)


def load_multi_exit_model(
    path: str | os.PathLike, exit_layers: Sequence[int] | None = None, device: str | None = None
) -> nn.Module:
    """Load a model saved with ``model.save(path)`` whose modules include :class:`MultiExitHeads`
    (no ``trust_remote_code`` needed, see :func:`contrastive_bert.models.load_model`).
    ``exit_layers``: the expected exit layers (ValueError when the saved heads differ)."""
    from contrastive_bert.models import load_model

    check_multi_exit_folder(path)
    model = load_model(str(path), device=device)
    get_exit_heads(model, exit_layers)
    return model


TRAIN_EXITS = ("train them with a cross_layer stage (e.g. scripts/recipes/banking77_multi_exit.yaml) and pass its "
               "<output-dir>/final folder")


def check_multi_exit_folder(path: str | os.PathLike, argument: str = "path") -> None:
    """ValueError naming ``argument`` unless ``path`` is a saved model folder whose ``modules.json`` lists
    :class:`MultiExitHeads`: checked before any weight loads."""
    if not os.path.isdir(path):
        raise ValueError(f"{argument}: expected the folder of a multi-exit model, got {str(path)!r} (not a folder); {TRAIN_EXITS}")
    modules = os.path.join(path, "modules.json")
    if not os.path.isfile(modules):
        raise ValueError(f"{argument}: {path} is not a saved sentence-transformers model (no modules.json)")
    with open(modules, encoding="utf-8") as stream:
        types = [str(entry.get("type", "")) for entry in json.load(stream)]
    if not any(t.endswith(".MultiExitHeads") for t in types):
        raise ValueError(f"{argument}: the model in {path} has no exit heads; {TRAIN_EXITS}")

"""One layer-by-layer view of a BERT-family encoder (BERT, RoBERTa, DistilBERT, MPNet).

Exit heads, early exit, layer freezing and the cross-layer loss all need the same three things
of a Hugging Face encoder: where its embeddings and its layer list live, how to run the
embedding step, and how to run one layer with the attention mask in the form that
architecture expects. :class:`LayerwiseEncoder` is that one place:

- ``embed(input_ids, token_type_ids)`` -> (B, T, H), the embedding-layer output;
- ``prepare_mask(hidden, attention_mask)`` -> the mask the layers take (built once per batch,
  by transformers' own ``create_bidirectional_mask`` for the model's attention implementation);
- ``layer(i, hidden, mask)`` -> (B, T, H) after layer ``i`` (1-based);
- ``all_hidden_states(...)`` -> the L + 1 states of HF's ``output_hidden_states``.

MPNet's relative position bias depends only on the sequence length; it is recomputed when the
length changes (rows dropped and padding trimmed by early exit).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from contrastive_bert.models import unwrap_model

logger = logging.getLogger(__name__)

__all__ = ["LayerwiseEncoder", "PreparedMask", "transformer_module", "encoder_num_layers"]

# (layer list path, embeddings path) per family; the first that exists wins.
_LAYOUTS: tuple[tuple[str, str], ...] = (
    ("encoder.layer", "embeddings"),  # BERT, RoBERTa, MPNet, ELECTRA, ...
    ("transformer.layer", "embeddings"),  # DistilBERT
)


def _get_path(module: Any, path: str) -> Any:
    for part in path.split("."):
        module = getattr(module, part, None)
        if module is None:
            return None
    return module


def transformer_module(model: Any) -> Any:
    """The sentence-transformers ``Transformer`` module (first module) of ``model``."""
    base = unwrap_model(model)
    first = base[0] if hasattr(base, "__getitem__") and len(base) > 0 else None
    if first is None or not hasattr(first, "auto_model"):
        raise ValueError("model: the first module must be a sentence-transformers Transformer")
    return first


def encoder_num_layers(model: Any) -> int:
    """Number of transformer layers of the model's encoder."""
    return LayerwiseEncoder.from_model(model).num_layers


class PreparedMask:
    """A padding mask (B, T) with the layer-ready form derived from it (and MPNet's position bias)."""

    __slots__ = ("padding", "layer_mask", "position_bias")

    def __init__(self, padding: Any, layer_mask: Any, position_bias: Any = None) -> None:
        self.padding = padding
        self.layer_mask = layer_mask
        self.position_bias = position_bias


class LayerwiseEncoder:
    """A BERT-family encoder run one layer at a time on any subset of rows.

    Built from a Hugging Face model (``auto_model``) or, with :meth:`from_model`, from a
    SentenceTransformer. Layer by layer it reproduces the HF model's ``hidden_states`` output.
    """

    def __init__(self, auto_model: Any) -> None:
        base = getattr(auto_model, "base_model", auto_model)
        layers = embeddings = None
        for layers_path, embeddings_path in _LAYOUTS:
            layers, embeddings = _get_path(base, layers_path), _get_path(base, embeddings_path)
            if layers is not None and embeddings is not None:
                break
        if layers is None or embeddings is None or len(layers) == 0:
            raise ValueError(
                f"auto_model: expected a BERT-family encoder (BERT, RoBERTa, DistilBERT, MPNet) with embeddings and "
                f"a layer list, got {type(auto_model).__name__}"
            )
        if getattr(base.config, "is_decoder", False):
            raise ValueError("auto_model: decoder (causal) models are not supported")
        self.auto_model = base
        self.config = base.config
        self.embeddings = embeddings
        self.layers = layers
        self._embeddings_take_token_types = "token_type_ids" in inspect.signature(embeddings.forward).parameters
        encoder = getattr(base, "encoder", None)
        self._position_bias = getattr(encoder, "compute_position_bias", None)  # MPNet

    @classmethod
    def from_model(cls, model: Any) -> LayerwiseEncoder:
        """From a SentenceTransformer (its first module's ``auto_model``) or a Hugging Face model."""
        base = unwrap_model(model)
        try:
            auto_model = transformer_module(base).auto_model
        except (ValueError, TypeError):
            auto_model = base
        return cls(auto_model)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def hidden_size(self) -> int:
        return int(getattr(self.config, "hidden_size", None) or getattr(self.config, "dim"))

    def embed(self, input_ids: Any, token_type_ids: Any = None) -> Any:
        """Token ids (B, T) -> embedding-layer output (B, T, H)."""
        if self._embeddings_take_token_types:
            return self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        return self.embeddings(input_ids=input_ids)

    def prepare_mask(self, hidden: Any, attention_mask: Any) -> PreparedMask:
        """The layer-ready mask for hidden (B, T, H) and padding mask (B, T); build it once per batch."""
        from transformers.masking_utils import create_bidirectional_mask

        layer_mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden, attention_mask=attention_mask)
        bias = self._position_bias(hidden) if self._position_bias is not None else None
        return PreparedMask(attention_mask, layer_mask, bias)

    def layer(self, index: int, hidden: Any, mask: Any) -> Any:
        """Apply layer ``index`` (1-based) to hidden (B, T, H); ``mask`` is a :class:`PreparedMask`
        or a padding mask (B, T) (then prepared here)."""
        if not 1 <= index <= self.num_layers:
            raise ValueError(f"index: layer must be in [1, {self.num_layers}], got {index}")
        if not isinstance(mask, PreparedMask):
            mask = self.prepare_mask(hidden, mask)
        layer = self.layers[index - 1]
        if mask.position_bias is not None:
            out = layer(hidden, mask.layer_mask, mask.position_bias)
        else:
            out = layer(hidden, mask.layer_mask)
        return out[0] if isinstance(out, tuple) else out

    def run_layers(self, hidden: Any, mask: Any, start: int, stop: int) -> Any:
        """Layers ``start``..``stop`` (1-based, inclusive) on hidden (B, T, H)."""
        if not isinstance(mask, PreparedMask):
            mask = self.prepare_mask(hidden, mask)
        for index in range(start, stop + 1):
            hidden = self.layer(index, hidden, mask)
        return hidden

    def all_hidden_states(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> list[Any]:
        """All L + 1 hidden states (B, T, H), as HF's ``output_hidden_states``."""
        hidden = self.embed(input_ids, token_type_ids)
        mask = self.prepare_mask(hidden, attention_mask)
        states = [hidden]
        for index in range(1, self.num_layers + 1):
            hidden = self.layer(index, hidden, mask)
            states.append(hidden)
        return states

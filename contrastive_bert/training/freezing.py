"""Memory/compute savers for BERT-like SentenceTransformers: frozen lower layers, non-reentrant
gradient checkpointing, and a callback logging gradient norms (total and per layer group).

The seed design freezes "the first 6 layers" and caches/checkpoints them; here the embeddings
and the lowest ``N`` encoder layers get ``requires_grad=False`` (the optimizer then skips them),
whatever the architecture calls its layer list (BERT/RoBERTa ``encoder.layer``, DistilBERT
``transformer.layer``, ``layers``, GPT-style ``h``).
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from torch import nn
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

logger = logging.getLogger(__name__)

__all__ = [
    "GradNormCallback",
    "enable_gradient_checkpointing",
    "find_encoder_parts",
    "freeze_layers",
    "grad_norms",
]

_LAYER_PATHS = ("encoder.layer", "transformer.layer", "encoder.layers", "layers", "layer", "h", "block")


def _get_path(module: nn.Module, path: str) -> Any:
    for part in path.split("."):
        module = getattr(module, part, None)
        if module is None:
            return None
    return module


def _backbone(model: nn.Module) -> nn.Module:
    """The Hugging Face model inside the first ST module (``Transformer.auto_model``), or ``model``."""
    model = getattr(model, "_orig_mod", model)
    model = getattr(model, "module", model)
    first = model[0] if isinstance(model, nn.Sequential) and len(model) > 0 else model
    backbone = getattr(first, "auto_model", None) or getattr(first, "model", None) or first
    # encoder-decoder style wrappers: prefer the bare base model (BertModel inside BertForX)
    base = getattr(backbone, "base_model", None)
    return base if isinstance(base, nn.Module) else backbone


def find_encoder_parts(model: nn.Module) -> tuple[nn.Module | None, nn.ModuleList]:
    """``(embeddings, layers)`` of a BERT-like SentenceTransformer or HF model.
    ValueError when no layer list is found."""
    backbone = _backbone(model)
    embeddings = getattr(backbone, "embeddings", None)
    if embeddings is None:
        embeddings = getattr(backbone, "embed_tokens", None) or getattr(backbone, "wte", None)
    for path in _LAYER_PATHS:
        layers = _get_path(backbone, path)
        if isinstance(layers, nn.ModuleList) and len(layers) > 0:
            return embeddings, layers
    raise ValueError(
        f"model: could not find the encoder layers of {type(backbone).__name__} "
        f"(looked for {', '.join(_LAYER_PATHS)})"
    )


def freeze_layers(model: nn.Module, num_layers: int, freeze_embeddings: bool = True) -> int:
    """Freeze the embeddings (optional) and the lowest ``num_layers`` encoder layers in place.

    Returns the number of parameters frozen. ``num_layers`` larger than the model's depth is an
    error (freezing everything leaves nothing to train), 0 freezes only the embeddings.
    """
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 0:
        raise ValueError(f"num_layers: expected an int >= 0, got {num_layers!r}")
    embeddings, layers = find_encoder_parts(model)
    if num_layers > len(layers):
        raise ValueError(f"num_layers: the model has {len(layers)} layers, cannot freeze {num_layers}")
    if num_layers == len(layers) and freeze_embeddings:
        logger.warning("freezing the embeddings and all %d layers: only the pooling/head modules train", num_layers)
    modules: list[nn.Module] = list(layers[:num_layers])
    if freeze_embeddings:
        if embeddings is None:
            raise ValueError("freeze_embeddings: the model has no embeddings module that could be found")
        modules.insert(0, embeddings)
    frozen = 0
    for module in modules:
        for param in module.parameters():
            if param.requires_grad:
                param.requires_grad_(False)
                frozen += param.numel()
    return frozen


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Non-reentrant activation checkpointing on every submodule that supports it.

    Non-reentrant checkpointing (``use_reentrant=False``) works with frozen embeddings (no
    input that requires grad is needed) and with GradCache's RNG replay.
    """
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if enable is None:
        raise ValueError(f"model: {type(model).__name__} does not support gradient checkpointing")
    enable(gradient_checkpointing_kwargs=kwargs)


def grad_norms(model: nn.Module) -> dict[str, float]:
    """L2 norm of the current gradients: ``total``, ``embeddings`` and ``layer_<i>``, over
    parameters that have a gradient (frozen ones have none)."""
    groups: dict[str, list[torch.Tensor]] = {"total": []}
    try:
        embeddings, layers = find_encoder_parts(model)
    except ValueError:
        embeddings, layers = None, nn.ModuleList()
    owner: dict[int, str] = {}
    if embeddings is not None:
        owner.update({id(p): "embeddings" for p in embeddings.parameters()})
    for i, layer in enumerate(layers):
        owner.update({id(p): f"layer_{i}" for p in layer.parameters()})
    for param in model.parameters():
        if param.grad is None:
            continue
        g = param.grad.detach().float().norm() ** 2
        groups["total"].append(g)
        if id(param) in owner:
            groups.setdefault(owner[id(param)], []).append(g)
    return {name: math.sqrt(float(torch.stack(values).sum())) if values else 0.0 for name, values in groups.items()}


class GradNormCallback(TrainerCallback):
    """Log gradient norms per layer group (``grad_norm/<group>``) every ``logging_steps``.

    The trainer already logs the total pre-clipping ``grad_norm``; these are measured at
    ``on_pre_optimizer_step``, i.e. after clipping, and show which layers actually learn.
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.last: dict[str, float] = {}

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs):
        if args.logging_steps and (state.global_step + 1) % args.logging_steps == 0:
            self.last = grad_norms(self.model)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs=None, **kwargs):
        if logs is not None and "loss" in logs and self.last:
            extra = {f"grad_norm/{k}": round(v, 6) for k, v in self.last.items()}
            logs.update(extra)
            if state.log_history and state.log_history[-1].get("step") == state.global_step:
                state.log_history[-1].update(extra)

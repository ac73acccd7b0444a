"""Encoding under bf16 autocast: ``load_model(backend="torch-bf16")``, ``--model-backend torch-bf16``.

Why: on a CPU with bf16 instructions (AVX512_BF16, AMX) a forward under bf16 autocast encodes
several times faster than fp32 at nearly the same SciFact nDCG@10 (measured in
``eval/results/cpu_precision.json``); on a GPU it is the usual inference precision. The weights
stay fp32 (training, saving and the multi-process pool see an ordinary model); the matrix products
run in bf16 and every embedding comes back as float32. Its rows are not fp32's, so a corpus store
or index of them carries its own identity (:attr:`Bf16AutocastSentenceTransformer.encoding_identity`,
mixed into :func:`~contrastive_bert.embedding_store.weights_fingerprint`) and is never read as fp32's.
"""

from __future__ import annotations

from typing import Any

import torch
from sentence_transformers import SentenceTransformer

__all__ = ["BF16_ENCODING_IDENTITY", "Bf16AutocastSentenceTransformer", "encode_in_bf16"]

#: the identity of rows encoded under bf16 autocast (fp32 rows have none)
BF16_ENCODING_IDENTITY = "torch-bf16-autocast"


class Bf16AutocastSentenceTransformer(SentenceTransformer):
    """A ``SentenceTransformer`` whose forward runs under ``torch.autocast(device, torch.bfloat16)``.

    ``encode``, ``encode_query``/``encode_document``, evaluators, mteb and the multi-process pool
    all call the forward, so all of them encode in bf16; floating outputs
    (``token_embeddings``: (B, T, d), ``sentence_embedding``: (B, d)) are returned as float32.
    Made from a loaded model by :func:`encode_in_bf16` (no weights are copied or cast)."""

    encoding_identity = BF16_ENCODING_IDENTITY

    def forward(self, input: dict[str, torch.Tensor], **kwargs) -> dict[str, Any]:
        with torch.autocast(device_type=self.device.type, dtype=torch.bfloat16):
            features = super().forward(input, **kwargs)
        return {name: value.float() if isinstance(value, torch.Tensor) and value.is_floating_point() else value
                for name, value in features.items()}


def encode_in_bf16(model: SentenceTransformer) -> Bf16AutocastSentenceTransformer:
    """``model`` itself, turned into a :class:`Bf16AutocastSentenceTransformer` (its class is
    swapped in place: same modules, same fp32 weights). ``ValueError`` for anything that is not a
    plain ``SentenceTransformer`` (an ONNX encoder, a bare function, a subclass with a forward of
    its own, which this one would not wrap)."""
    if isinstance(model, Bf16AutocastSentenceTransformer):
        return model
    if type(model) is not SentenceTransformer:
        raise ValueError(f"model: bf16 encoding wraps a SentenceTransformer, got {type(model).__name__}")
    model.__class__ = Bf16AutocastSentenceTransformer
    return model

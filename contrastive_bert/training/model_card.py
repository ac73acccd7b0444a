"""The saved model card (``README.md`` of a model folder) says how to load a model with this package's modules.

sentence-transformers writes ``model = SentenceTransformer("<id>")`` into the card of every model
it saves. A model whose ``modules.json`` names a class of this package (a label head from ACL
training, the exit heads of a multi-exit model) does not load that way: sentence-transformers 6
imports module classes from outside its own namespace only with ``trust_remote_code=True``. The
card is rewritten to show the two lines that do load it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["LOAD_NOTE_MARKER", "custom_module_types", "note_custom_modules"]

PACKAGE_PREFIX = "contrastive_bert."
LOAD_NOTE_MARKER = "<!-- contrastive_bert: how to load -->"
_LOAD_LINE = re.compile(r'^(?P<indent>\s*)(?P<lhs>\w+\s*=\s*)SentenceTransformer\("(?P<id>[^"]*)"\)\s*$', re.MULTILINE)
_USAGE_HEADING = "### Direct Usage (Sentence Transformers)"


def custom_module_types(folder: str | Path) -> list[str]:
    """The module types of this package listed in ``folder/modules.json`` (e.g.
    ``contrastive_bert.heads.exits.MultiExitHeads``); [] for a plain sentence-transformers model."""
    modules = Path(folder) / "modules.json"
    if not modules.is_file():
        return []
    entries = json.loads(modules.read_text(encoding="utf-8"))
    return [e["type"] for e in entries if str(e.get("type", "")).startswith(PACKAGE_PREFIX)]


def load_note(types: list[str]) -> str:
    """The paragraph put under the card's usage heading."""
    names = ", ".join(f"`{t.rsplit('.', 1)[-1]}`" for t in types)
    return (
        f"{LOAD_NOTE_MARKER}\n"
        f"This model holds modules of the `contrastive_bert` package ({names}). With that package installed, "
        "load it with either line (a plain `SentenceTransformer(path)` refuses it, since sentence-transformers "
        "imports module classes outside its own namespace only when trusted):\n\n"
        "```python\n"
        "from contrastive_bert.models import load_model\n"
        "model = load_model(path)  # or: SentenceTransformer(path, trust_remote_code=True)\n"
        "```\n"
    )


def note_custom_modules(folder: str | Path) -> bool:
    """Rewrite ``folder/README.md`` of a model with this package's modules: the load line gets
    ``trust_remote_code=True`` and a note names ``contrastive_bert.models.load_model``. Returns
    whether the card was changed (False: no such modules, no card, or already noted)."""
    folder = Path(folder)
    card = folder / "README.md"
    types = custom_module_types(folder)
    if not types or not card.is_file():
        return False
    text = card.read_text(encoding="utf-8")
    if LOAD_NOTE_MARKER in text:
        return False
    text = _LOAD_LINE.sub(
        lambda m: f'{m["indent"]}{m["lhs"]}SentenceTransformer("{m["id"]}", trust_remote_code=True)', text
    )
    note = load_note(types)
    if _USAGE_HEADING in text:
        text = text.replace(_USAGE_HEADING, f"{_USAGE_HEADING}\n\n{note}", 1)
    else:
        text = f"{note}\n{text}"
    card.write_text(text, encoding="utf-8")
    return True

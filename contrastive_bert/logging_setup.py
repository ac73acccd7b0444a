"""The package's one logging setup, called once per process at an entry point (the CLI, a benchmark).

Our modules only ``logging.getLogger(__name__)``; this adds one stderr handler to the root logger
(kept across calls) and sets the levels: verbosity -1 errors only, 0 info, 1 debug. Nothing here
imports torch.
"""

from __future__ import annotations

import logging
import os
import sys

LOG_LEVELS = {-1: logging.ERROR, 0: logging.INFO, 1: logging.DEBUG}


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (so repeated ``main()`` calls, e.g. in tests, agree)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def configure_logging(verbosity: int) -> None:
    """Once per process, at the entry point. Adds one stderr handler to the root logger (kept
    across calls) and sets the levels; ``verbosity`` is clipped to -1 (errors), 0 (info), 1 (debug)."""
    level = LOG_LEVELS[max(-1, min(1, int(verbosity)))]
    root = logging.getLogger()
    if not any(isinstance(handler, _StderrHandler) for handler in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"))
        root.addHandler(handler)
    root.setLevel(level)
    if level >= logging.ERROR:  # --quiet: no progress bars either (read when those libraries import)
        for variable in ("TQDM_DISABLE", "HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS"):
            os.environ.setdefault(variable, "1")
    # faiss logs which CPU-instruction builds it tried to load, at INFO, on every import
    for name in ("transformers", "sentence_transformers", "datasets", "mteb", "urllib3", "filelock", "httpx", "faiss"):
        logging.getLogger(name).setLevel(level if level == logging.DEBUG else max(level, logging.WARNING))

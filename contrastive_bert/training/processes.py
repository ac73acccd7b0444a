"""This run's processes: one, or several started by a launcher (``torchrun``, ``accelerate launch``).

Under a launcher every process runs the same ``contrastive-bert train`` and the trainer trains them
together (DDP). The work around training that writes files or evaluates (clearing the output
folder, ``recipe.json``, mining corpus negatives, the scores before and after, ``final/``,
``results.json``) runs in the main process only; the others wait where they need its result
(:meth:`Processes.wait`, :meth:`Processes.main_first`) and log warnings only, so the user reads one
copy of the progress. The process group is accelerate's ``PartialState``, set up from the
launcher's environment as the trainer sets it up (the trainer then finds it ready). A process not
started by a launcher gets :data:`SINGLE`: no process group, nothing imported, every wait a no-op.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

__all__ = ["SINGLE", "Processes", "join_processes", "launched"]

# The process group's timeout: how long a process waits at a barrier (and, the group being the
# trainer's too, in a training collective). The others wait while the main process mines a corpus
# or scores the untrained model, hours on a large corpus; the trainer's own 30 minutes would end
# such a run. A process that fails ends the others through the launcher, so only a true deadlock
# waits this long.
WAIT_TIMEOUT = timedelta(hours=6)

# The environment variables that give the number of processes, as accelerate reads them.
_WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


@dataclass(frozen=True)
class Processes:
    """Where this process stands in the run: ``main`` does the work around training; ``count``
    processes train together; ``state`` is accelerate's ``PartialState`` (None: a single process)."""

    main: bool = True
    count: int = 1
    state: Any = None

    def wait(self) -> None:
        """Wait until every process reaches this point (a no-op for a single process)."""
        if self.state is not None:
            self.state.wait_for_everyone()

    @contextmanager
    def main_first(self) -> Iterator[None]:
        """The main process runs the block first; the others run it once it has (to read what it wrote)."""
        if self.state is None:
            yield
            return
        with self.state.main_process_first():
            yield


SINGLE = Processes()


def launched() -> bool:
    """Whether a launcher started this process (``LOCAL_RANK`` or a world size above one in its environment)."""
    if int(os.environ.get("LOCAL_RANK", "-1")) != -1:
        return True
    return any(int(os.environ.get(name, "1")) > 1 for name in _WORLD_SIZE_VARIABLES)


def _world_size() -> int:
    return max(int(os.environ.get(name, "1")) for name in _WORLD_SIZE_VARIABLES)


def join_processes() -> Processes:
    """This process's :class:`Processes`: :data:`SINGLE` unless a launcher started it; else joins the
    process group (``PartialState``, on CPUs with ``ACCELERATE_USE_CPU=true``, as the trainer would)
    and, outside the main process, lowers logging to warnings. Called again, it returns the same."""
    if not launched():
        return SINGLE
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"), timeout=WAIT_TIMEOUT)
    if state.num_processes == 1 and _world_size() > 1:
        raise ValueError(
            f"launcher: started as {_world_size()} processes (WORLD_SIZE), but accelerate found no device to train "
            "them together, so each would train alone into the same folder; on CPUs set ACCELERATE_USE_CPU=true"
        )
    if not state.is_main_process:
        _log_warnings_only()
    return Processes(main=bool(state.is_main_process), count=int(state.num_processes), state=state)


def _log_warnings_only() -> None:
    """A process other than the main one: warnings and errors only, no progress bars of loading
    (``datasets``, ``transformers``); the trainer shows its own bar in the main process only."""
    root = logging.getLogger()
    root.setLevel(max(root.level, logging.WARNING))
    from datasets.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    disable_progress_bars()
    transformers_logging.disable_progress_bar()

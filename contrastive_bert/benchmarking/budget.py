"""A wall-clock limit for a benchmark process (``--max-minutes``): a run is started only if it is
expected to finish in the time left, so a benchmark given N minutes on a borrowed GPU ends cleanly
with every finished run logged instead of being killed in the middle of one."""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator

logger = logging.getLogger(__name__)


class Budget:
    """Seconds left of ``max_minutes`` (None: no limit) since this object was made, and the
    durations of the runs timed so far, per kind of run (e.g. a method name)."""

    def __init__(self, max_minutes: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if max_minutes is not None and not (isinstance(max_minutes, (int, float)) and max_minutes > 0):
            raise ValueError(f"max_minutes: expected a positive number of minutes or None, got {max_minutes!r}")
        self.max_minutes = max_minutes
        self._clock = clock
        self._start = clock()
        self._durations: dict[str, list[float]] = {}
        self.stopped = False

    def remaining(self) -> float:
        """Seconds left (``inf`` without a limit)."""
        if self.max_minutes is None:
            return math.inf
        return self.max_minutes * 60 - (self._clock() - self._start)

    def expected(self, kind: str) -> float | None:
        """The longest duration timed so far for ``kind`` (None before the first)."""
        durations = self._durations.get(kind)
        return max(durations) if durations else None

    def record(self, kind: str, seconds: float) -> None:
        """Note that a run of ``kind`` took ``seconds`` (e.g. read back from a run log)."""
        self._durations.setdefault(kind, []).append(float(seconds))

    def allows(self, kind: str = "run", estimate: float | None = None) -> bool:
        """Whether a run of ``kind`` fits in the time left: its expected duration (the longest so
        far of that kind, else ``estimate``, else 0) must not exceed :meth:`remaining`. Once a run
        is refused, every later call is refused too (:attr:`stopped`), so runs stay in order."""
        if self.stopped:
            return False
        needed = self.expected(kind)
        needed = estimate if needed is None else needed
        left = self.remaining()
        if left <= 0 or (needed is not None and needed > left):
            logger.info("wall-clock limit: %.0f s left, a %s run needs ~%s s: stopping here", max(left, 0), kind,
                        "?" if needed is None else f"{needed:.0f}")
            self.stopped = True
            return False
        return True

    @contextlib.contextmanager
    def timed(self, kind: str = "run") -> Iterator[None]:
        """Time the block as one run of ``kind``."""
        start = self._clock()
        yield
        self.record(kind, self._clock() - start)

    def summary(self) -> dict[str, float]:
        """Median seconds per run of each kind timed so far."""
        return {kind: statistics.median(d) for kind, d in self._durations.items()}

"""Early-exit criteria: small objects with one interface, and a registry by name.

A criterion looks at the class probabilities (b, K) of the exit just computed and at the
predictions (b, n) of the exits seen so far (the current one last) and says which rows stop:

- ``confidence``: max_k p_k > threshold (default 0.9);
- ``margin``: p_(1) - p_(2) > threshold (default 0.3);
- ``patience``: the last ``threshold`` exits predicted the same class (PABEE; default 2);
- ``none``: never (every row runs all layers).

Add one by subclassing :class:`ExitCriterion` (``name``, ``default_threshold``,
``should_exit``) and calling :func:`register_criterion`; the ``early-exit`` CLI lists the
registry. This module imports no torch at import time (the CLI parser reads it).
"""

from __future__ import annotations

import difflib
import logging
from typing import Any, ClassVar

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CRITERION",
    "MAX_ACCURACY_LOSS",
    "ExitCriterion",
    "criterion_class",
    "criterion_names",
    "get_criterion",
    "register_criterion",
]

DEFAULT_CRITERION = "margin"
# The accuracy (points) an early-exit setting may lose against the full model on dev and still be chosen.
MAX_ACCURACY_LOSS = 1.0


class ExitCriterion:
    """Base class. ``threshold`` defaults to ``default_threshold``; :meth:`check_threshold`
    validates it (a probability in [0, 1] unless a subclass says otherwise)."""

    name: ClassVar[str] = ""
    default_threshold: ClassVar[float | int | None] = None
    sweep_thresholds: ClassVar[tuple[float | int, ...]] = ()
    description: ClassVar[str] = ""

    def __init__(self, threshold: float | int | None = None) -> None:
        self.threshold = self.check_threshold(self.default_threshold if threshold is None else threshold)

    @classmethod
    def check_threshold(cls, threshold: Any) -> float | int | None:
        """A probability threshold in [0, 1]; ValueError otherwise."""
        if threshold is None:
            return None
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= float(threshold) <= 1.0:
            raise ValueError(f"threshold: criterion {cls.name!r} expects a value in [0, 1], got {threshold!r}")
        return float(threshold)

    def should_exit(self, probabilities: Any, history: Any) -> Any:
        """probabilities (b, K) of the current exit, history (b, n) predicted class ids of the
        exits so far (current last) -> bool (b,): rows that exit here."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(threshold={self.threshold!r})"


class ConfidenceCriterion(ExitCriterion):
    name = "confidence"
    default_threshold = 0.9
    sweep_thresholds = (0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
    description = "max probability > threshold"

    def should_exit(self, probabilities: Any, history: Any) -> Any:
        return probabilities.max(dim=-1).values > self.threshold


class MarginCriterion(ExitCriterion):
    name = "margin"
    default_threshold = 0.3
    sweep_thresholds = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
    description = "top-1 minus top-2 probability > threshold"

    def should_exit(self, probabilities: Any, history: Any) -> Any:
        top2 = probabilities.topk(2, dim=-1).values
        return (top2[:, 0] - top2[:, 1]) > self.threshold


class PatienceCriterion(ExitCriterion):
    name = "patience"
    default_threshold = 2
    sweep_thresholds = (2, 3)
    description = "the last `threshold` exits agree on the class"

    @classmethod
    def check_threshold(cls, threshold: Any) -> int:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or threshold < 1 or threshold != int(threshold):
            raise ValueError(f"threshold: criterion 'patience' expects an integer >= 1 (exits that agree), got {threshold!r}")
        return int(threshold)

    def should_exit(self, probabilities: Any, history: Any) -> Any:
        import torch

        if history.shape[1] < self.threshold:
            return torch.zeros(probabilities.shape[0], dtype=torch.bool, device=probabilities.device)
        last = history[:, -self.threshold :]
        return (last == last[:, -1:]).all(dim=1)


class NoExitCriterion(ExitCriterion):
    name = "none"
    description = "never exit early"

    def should_exit(self, probabilities: Any, history: Any) -> Any:
        import torch

        return torch.zeros(probabilities.shape[0], dtype=torch.bool, device=probabilities.device)


_CRITERIA: dict[str, type[ExitCriterion]] = {}


def register_criterion(cls: type[ExitCriterion]) -> type[ExitCriterion]:
    """Add a criterion class to the registry under ``cls.name`` (usable as a decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, ExitCriterion)) or not cls.name:
        raise ValueError(f"cls: expected an ExitCriterion subclass with a name, got {cls!r}")
    _CRITERIA[cls.name] = cls
    return cls


for _cls in (ConfidenceCriterion, MarginCriterion, PatienceCriterion, NoExitCriterion):
    register_criterion(_cls)


def criterion_names() -> list[str]:
    """Registered criterion names, in registration order."""
    return list(_CRITERIA)


def get_criterion(criterion: str | ExitCriterion, threshold: float | int | None = None) -> ExitCriterion:
    """A criterion object by name (``threshold`` None = its default), or ``criterion`` itself."""
    if isinstance(criterion, ExitCriterion):
        if threshold is not None:
            raise ValueError("threshold: give it to the criterion object, not alongside one")
        return criterion
    if criterion not in _CRITERIA:
        close = difflib.get_close_matches(str(criterion), _CRITERIA, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"criterion: expected one of {criterion_names()}, got {criterion!r}{hint}")
    return _CRITERIA[criterion](threshold)


def criterion_class(name: str) -> type[ExitCriterion]:
    """The registered class of ``name`` (its default and sweep thresholds), ValueError if unknown."""
    if name not in _CRITERIA:
        get_criterion(name)  # raises the one error for an unknown name
    return _CRITERIA[name]

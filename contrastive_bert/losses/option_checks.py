"""Value checks of loss options that need no model: one error spelling for every loss.

Each check raises ``ValueError("loss_options.<name>: expected ..., got ...")`` and skips options
that are absent from the mapping (the constructor default applies). The losses' config
dataclasses call them from ``__post_init__`` on their own fields (``vars(self)``), so each option
has one check, run whenever a config is made (by the registry before any model loads, or by the
loss's constructor).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["check_choice", "check_flags", "check_number", "check_unknown", "config_dict", "option_error", "option_names"]


def option_error(name: str, expected: str, value: Any) -> ValueError:
    return ValueError(f"loss_options.{name}: expected {expected}, got {value!r}")


def check_unknown(options: Mapping[str, Any], known: Iterable[str], loss_name: str) -> None:
    """Reject option names that are not in ``known`` (with a close-match hint)."""
    known = sorted(set(known))
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"loss_options.{key}: unknown option of {loss_name}{hint}; options are {', '.join(known)}")


def check_number(
    options: Mapping[str, Any],
    name: str,
    expected: str,
    valid: Callable[[float], bool] = lambda value: True,
    *,
    integer: bool = False,
    allow_none: bool = False,
) -> None:
    """``options[name]`` must be a finite (integer if ``integer``) number with ``valid(value)``, or None if ``allow_none``."""
    if name not in options:
        return
    value = options[name]
    if value is None and allow_none:
        return
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value) or not valid(value):
        raise option_error(name, expected + (" or null" if allow_none else ""), value)


def check_flags(options: Mapping[str, Any], names: Iterable[str]) -> None:
    """Each of ``names`` present in ``options`` must be a bool."""
    for name in names:
        if name in options and not isinstance(options[name], bool):
            raise option_error(name, "true or false", options[name])


def check_choice(options: Mapping[str, Any], name: str, choices: tuple[Any, ...]) -> None:
    if name in options and options[name] not in choices:
        raise option_error(name, "one of " + ", ".join(repr(c) for c in choices), options[name])


def option_names(config_class: type) -> tuple[str, ...]:
    """The option names of a config dataclass: its field names, in order."""
    return tuple(f.name for f in dataclasses.fields(config_class))


def config_dict(config: Any) -> dict[str, Any]:
    """A config dataclass as a JSON-friendly dict (``dataclasses.asdict`` without copying values):
    nested dataclasses become dicts, modules (a guide model given as an object) their class name."""
    out = {}
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = config_dict(value)
        elif not isinstance(value, (str, int, float, bool, type(None), list, tuple, dict)):
            value = type(value).__name__
        out[f.name] = value
    return out

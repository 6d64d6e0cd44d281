"""Conversions of Python values to the wire forms the API expects."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["format_duration", "format_time", "task_spec"]

_US_PER_MS = 1_000
_US_PER_S = 1_000_000
_US_PER_MIN = 60 * _US_PER_S
_US_PER_H = 60 * _US_PER_MIN

# Spec fields holding a Go duration, and those holding an RFC 3339 time.
_DURATION_FIELDS = ("in", "every", "unique_for")
_TIME_FIELDS = ("at",)


def _fraction(value: int, unit: int) -> str:
    """Write value/unit as a decimal without trailing zeros ("1.5")."""
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


def format_duration(value: str | _dt.timedelta | int | float) -> str:
    """Return value as a Go duration string, as ``time.Duration`` prints it.

    A str is returned unchanged (the server checks it). A
    :class:`datetime.timedelta`, or a number of seconds, is written the way
    Go writes durations: ``"10s"``, ``"1.5s"``, ``"1m30s"``, ``"1h0m0s"``,
    ``"250ms"``, ``"0s"`` (microsecond resolution).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        raise TypeError("a duration must be a str, timedelta or number of seconds, not bool")
    if isinstance(value, (int, float)):
        value = _dt.timedelta(seconds=value)
    if not isinstance(value, _dt.timedelta):
        raise TypeError(
            f"a duration must be a str, timedelta or number of seconds, not {type(value).__name__}"
        )
    us = value // _dt.timedelta(microseconds=1)
    sign = "-" if us < 0 else ""
    us = abs(us)
    if us == 0:
        return "0s"
    if us < _US_PER_MS:
        return f"{sign}{us}us"
    if us < _US_PER_S:
        return f"{sign}{_fraction(us, _US_PER_MS)}ms"
    hours, rest = divmod(us, _US_PER_H)
    minutes, rest = divmod(rest, _US_PER_MIN)
    out = sign
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    return out + _fraction(rest, _US_PER_S) + "s"


def format_time(value: str | _dt.datetime) -> str:
    """Return value as an RFC 3339 time string.

    A str is returned unchanged (the server checks it). A naive
    :class:`datetime.datetime` is taken as local time, as Python does
    elsewhere; an aware one keeps its offset, UTC being written ``Z``.
    """
    if isinstance(value, str):
        return value
    if not isinstance(value, _dt.datetime):
        raise TypeError(f"a time must be a str or datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        value = value.astimezone()
    text = value.isoformat()
    if text.endswith("+00:00"):
        text = text[: -len("+00:00")] + "Z"
    return text


def _id_list(value: str | Iterable[str]) -> list[str]:
    """Return an id, or an iterable of ids, as a list of ids."""
    if isinstance(value, str):
        return [value]
    return list(value)


def task_spec(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Return the JSON task spec for fields, dropping those that are None.

    ``in_`` is sent as ``in``; ``at`` may be a datetime, ``in``, ``every``
    and ``unique_for`` timedeltas, ``after`` any iterable of ids and
    ``unique_states`` an iterable of states. Other keys, and the payload,
    pass through unchanged.
    """
    spec: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None:
            continue
        if key == "in_":
            key = "in"
        if key in _TIME_FIELDS:
            value = format_time(value)
        elif key in _DURATION_FIELDS:
            value = format_duration(value)
        elif key == "after":
            value = _id_list(value)
        elif key == "unique_states" and not isinstance(value, str):
            value = ",".join(value)
        spec[key] = value
    return spec

"""The one place the code reads the time, so tests and the eval harness can move it."""

from datetime import timedelta

from django.utils import timezone

_offset = timedelta(0)


def now():
    """The current time, plus whatever the clock has been advanced by."""
    return timezone.now() + _offset


def advance(delta):
    """Move the clock forward by `delta` (a timedelta)."""
    global _offset
    _offset += delta


def reset():
    """Put the clock back to real time."""
    global _offset
    _offset = timedelta(0)


def parse_duration(text):
    """'91d', '45m', '8h', '30s' -> timedelta."""
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    text = str(text).strip()
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise ValueError(f"not a duration like '91d' or '45m': {text!r}")
    return timedelta(**{units[text[-1]]: int(text[:-1])})

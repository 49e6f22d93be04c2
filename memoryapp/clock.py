"""The one place the code reads the time; tests and the eval harness move it through settings.CLOCK_OFFSET."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone


def now():
    """The current time, plus settings.CLOCK_OFFSET (a timedelta; zero outside tests and evaluations)."""
    return timezone.now() + getattr(settings, "CLOCK_OFFSET", timedelta(0))


def parse_duration(text):
    """'91d', '45m', '8h', '30s' -> timedelta."""
    units = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}
    text = str(text).strip()
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise ValueError(f"not a duration like '91d' or '45m': {text!r}")
    return timedelta(**{units[text[-1]]: int(text[:-1])})

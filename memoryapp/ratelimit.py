"""Fixed-window rate limits in Django's cache (Redis when REDIS_URL is set)."""

import time

from django.conf import settings
from django.core.cache import cache


def _now():
    return int(time.time())


def hit(bucket, limit, window=60):
    """Count one request in `bucket`; returns (allowed, seconds until the window resets)."""
    now = _now()
    start = now - now % window
    key = f"rl:{bucket}:{start}"
    # add() is atomic: only the first request of a window creates the counter.
    if cache.add(key, 1, timeout=window + 1):
        count = 1
    else:
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add() and incr()
            cache.add(key, 1, timeout=window + 1)
            count = 1
    return count <= limit, start + window - now


def hit_key(api_key):
    """Count one call made with `api_key` against its per-minute limit; returns (allowed, retry_after)."""
    return hit(f"api-key:{api_key.id}", settings.MEMORY["API_RATE_PER_MINUTE"])

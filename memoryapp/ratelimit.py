"""Fixed-window rate limits that every web process shares: in Redis (Django's cache, one round trip a
call) when REDIS_URL is set, else in PostgreSQL's UNLOGGED memoryapp_ratecounter table.

A process-local cache would give each uvicorn worker a limit of its own (two workers let through
twice the limit), so the embedded default counts in the database it already has.
"""

import time

from django.conf import settings
from django.core.cache import cache
from django.db import connection

from memoryapp.models import RateCounter

PRUNE_BATCH = 1000

_COUNT_SQL = f"""
INSERT INTO {RateCounter._meta.db_table} (bucket, window_start, expires_at, count) VALUES (%s, %s, %s, 1)
ON CONFLICT (bucket, window_start) DO UPDATE SET count = {RateCounter._meta.db_table}.count + 1
RETURNING count
"""
# SKIP LOCKED: processes that open new windows at the same moment each prune a different batch
# instead of waiting on one another's row locks.
_PRUNE_SQL = f"""
DELETE FROM {RateCounter._meta.db_table} WHERE id IN (
    SELECT id FROM {RateCounter._meta.db_table} WHERE expires_at < %s LIMIT {PRUNE_BATCH} FOR UPDATE SKIP LOCKED
)
"""


def _now():
    return int(time.time())


def _count_in_database(bucket, start, window):
    # One atomic statement in autocommit: the row lock lasts only as long as the statement, so
    # concurrent requests of one bucket queue for microseconds, never for a transaction.
    with connection.cursor() as cursor:
        cursor.execute(_COUNT_SQL, [bucket[:200], start, start + window])
        count = cursor.fetchone()[0]
        if count == 1:  # the first request of a new window clears ended ones (of every bucket)
            cursor.execute(_PRUNE_SQL, [start])
    return count


def hit(bucket, limit, window=60):
    """Count one request in `bucket`; returns (allowed, seconds until the window resets)."""
    now = _now()
    start = now - now % window
    if settings.REDIS_URL:
        count = cache.count(f"rl:{bucket}:{start}", window + 1)  # memoryapp.cache.SharedRedisCache
    else:
        count = _count_in_database(bucket, start, window)
    return count <= limit, start + window - now


def hit_key(api_key):
    """Count one call made with `api_key` against its per-minute limit; returns (allowed, retry_after)."""
    return hit(f"api-key:{api_key.id}", settings.MEMORY["API_RATE_PER_MINUTE"])

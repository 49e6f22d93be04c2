"""Readiness: can this process reach what a request needs (the database, the Celery broker) right now.

Each check opens a connection of its own with a short timeout, so a probe never waits on (or
breaks) the request's own connection and a dead dependency answers in seconds.
"""

import psycopg
from django.db import connection
from kombu.exceptions import KombuError

from memoryapp.celery import app

TIMEOUT_SECONDS = 2


def database_params():
    """How this process connects to its database, with the probe's short connect timeout."""
    return {**connection.get_connection_params(), "connect_timeout": TIMEOUT_SECONDS}


def database_ok():
    """Whether the database accepts a connection and answers a query within the timeout."""
    try:
        with psycopg.connect(**database_params()) as conn:
            conn.execute(f"SET statement_timeout = {TIMEOUT_SECONDS * 1000}")
            conn.execute("SELECT 1")
    except (psycopg.Error, OSError):
        return False
    return True


def broker_ok():
    """Whether the Celery broker accepts a connection within the timeout (one attempt, no retry wait)."""
    conn = app.connection_for_write(connect_timeout=TIMEOUT_SECONDS)
    try:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=TIMEOUT_SECONDS)
    except (KombuError, OSError):
        return False
    finally:
        conn.release()
    return True


def unavailable():
    """The names of the dependencies that are down (empty when ready)."""
    return [name for name, ok in (("database", database_ok), ("broker", broker_ok)) if not ok()]

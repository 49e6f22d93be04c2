"""Pages read from a replica when one is configured; the agent path and every write use the primary.

Set DATABASE_REPLICA_URL to a streaming replica of DATABASE_URL. A GET or HEAD of a page (/me/,
/console/, /orgs/) marks the request as replica-safe; everything else (the agent API, posts, tasks,
commands) reads the primary. A person who has just changed something is pinned to the primary for
REPLICA_PIN_SECONDS through a signed cookie, so they see their own correction at once even while the
replica lags behind.

A replica that gives no connection within REPLICA_CONNECT_SECONDS is skipped: that request reads the
primary, and so does every request of this process for the next REPLICA_RETRY_SECONDS (a circuit
breaker), so a dead standby costs one short wait per process and period, not one per page.
"""

import contextvars
import logging
import time

from django.conf import settings
from django.db import DatabaseError, connections

REPLICA = "replica"
PAGE_PREFIXES = ("/me/", "/console/", "/orgs/")
PIN_COOKIE = "primary_until"
_reads_from_replica = contextvars.ContextVar("reads_from_replica", default=False)
# time.monotonic() until which this process reads the primary only (the replica failed to answer).
_replica_down_until = 0.0
log = logging.getLogger(__name__)


def use_replica(request):
    """Whether this request's reads may come from the replica (a safe page request, not recently pinned)."""
    if REPLICA not in settings.DATABASES or request.method not in ("GET", "HEAD"):
        return False
    if not request.path.startswith(PAGE_PREFIXES):
        return False
    pinned_until = request.get_signed_cookie(PIN_COOKIE, default=None, salt=PIN_COOKIE)
    return not (pinned_until and float(pinned_until) > time.time())


def replica_answers():
    """Whether the replica gives this thread a connection now; a failure opens the breaker for a while."""
    global _replica_down_until
    if time.monotonic() < _replica_down_until:
        return False
    try:
        # The connection this request's reads will use (from the pool when there is one), taken now so
        # that a dead replica shows here, before any read, and not as a 500 halfway through the page.
        replica = connections[REPLICA]
        replica.close_if_health_check_failed()
        replica.ensure_connection()
    except DatabaseError as exc:
        _replica_down_until = time.monotonic() + settings.REPLICA_RETRY_SECONDS
        log.warning("replica unreachable, pages read the primary for %s s: %s", settings.REPLICA_RETRY_SECONDS, exc)
        return False
    return True


class ReplicaRouter:
    """Reads go to the replica inside a replica-safe request, and never inside a transaction."""

    def db_for_read(self, model, **hints):
        if not _reads_from_replica.get():
            return None

        if connections["default"].in_atomic_block:
            return None  # reads in a transaction must see that transaction's writes
        return REPLICA

    def db_for_write(self, model, **hints):
        return "default"

    def allow_relation(self, obj1, obj2, **hints):
        return True  # the replica holds the same rows as the primary

    def allow_migrate(self, db, app_label, **hints):
        return db == "default"


class ReplicaMiddleware:
    """Marks replica-safe requests for the router; pins a person to the primary after a write."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = _reads_from_replica.set(use_replica(request) and replica_answers())
        try:
            response = self.get_response(request)
        finally:
            _reads_from_replica.reset(token)
        if REPLICA in settings.DATABASES and request.method not in ("GET", "HEAD", "OPTIONS"):
            pin = settings.REPLICA_PIN_SECONDS
            response.set_signed_cookie(
                PIN_COOKIE, str(time.time() + pin), salt=PIN_COOKIE, max_age=pin, httponly=True, samesite="Lax"
            )
        return response

"""Pages read from a replica when one is configured; the agent path and every write use the primary.

Set DATABASE_REPLICA_URL to a streaming replica of DATABASE_URL. A GET or HEAD of a page (/me/,
/console/, /orgs/) marks the request as replica-safe; everything else (the agent API, posts, tasks,
commands) reads the primary. A person who has just changed something is pinned to the primary for
REPLICA_PIN_SECONDS through a signed cookie, so they see their own correction at once even while the
replica lags behind.
"""

import contextvars
import time

from django.conf import settings
from django.db import connections

REPLICA = "replica"
PAGE_PREFIXES = ("/me/", "/console/", "/orgs/")
PIN_COOKIE = "primary_until"
_reads_from_replica = contextvars.ContextVar("reads_from_replica", default=False)


def use_replica(request):
    """Whether this request's reads may come from the replica (a safe page request, not recently pinned)."""
    if REPLICA not in settings.DATABASES or request.method not in ("GET", "HEAD"):
        return False
    if not request.path.startswith(PAGE_PREFIXES):
        return False
    pinned_until = request.get_signed_cookie(PIN_COOKIE, default=None, salt=PIN_COOKIE)
    return not (pinned_until and float(pinned_until) > time.time())


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
        token = _reads_from_replica.set(use_replica(request))
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

"""Django's Redis cache with one client, and so one connection pool, per process, and a counter
that costs one round trip.

Why: the server runs Django's views in a2wsgi's threads, and a2wsgi runs each request in a copy of
the context. Django keeps cache backends in context-local storage, so every request built a new
backend, a new connection pool and a new TCP connection to Redis (up to 1,121 in one bench_pages run,
docs/benchmarks.md "Pages"). redis-py's pool is thread-safe, and after a fork (Celery's
workers) it drops the parent's connections and opens its own.
"""

import threading

from django.core.cache.backends.redis import RedisCache
from django.utils.functional import cached_property

_clients = {}
_lock = threading.Lock()  # two threads' first requests must not each build a client


class SharedRedisCache(RedisCache):
    """RedisCache whose client (servers, options) is built once per process and shared."""

    @cached_property
    def _cache(self):
        key = (tuple(self._servers), repr(sorted(self._options.items())))
        with _lock:
            if key not in _clients:
                _clients[key] = self._class(self._servers, **self._options)
            return _clients[key]

    def count(self, key, timeout):
        """Add one to the counter `key`, created with a life of `timeout` seconds; returns its value.

        One round trip where Django's add() and incr() take three (SET NX, then EXISTS and INCRBY).
        MULTI/EXEC: the key cannot expire between the two commands and be created again with no life.
        """
        key = self.make_and_validate_key(key)
        pipe = self._cache.get_client(key, write=True).pipeline(transaction=True)
        pipe.set(key, 0, ex=timeout, nx=True)
        pipe.incr(key)
        return pipe.execute()[1]

"""Issue 42 part 5: rate limits hold across processes (no Redis: counted in PostgreSQL), and a stranger's
wrong passwords cannot lock a person out of their account."""

import subprocess
import sys
import uuid

import pytest
import redis

from memoryapp import ratelimit, sessions
from memoryapp.models import Organization, RateCounter
from tests.conftest import BASE_DIR, REDIS_TEST_URL, call_asgi, worker_database_url

# Each process counts 5 calls in one bucket against a limit of 5, on a pinned clock (one window).
COUNT_IN_A_PROCESS = """
import django; django.setup()
from memoryapp import ratelimit
ratelimit._now = lambda: 1_800_000_005
print(sum(ratelimit.hit("shared-bucket", 5)[0] for _ in range(5)))
"""


@pytest.mark.django_db(transaction=True)
def test_two_processes_share_one_limit():
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": BASE_DIR,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": "memory://",
    }
    procs = [
        subprocess.Popen([sys.executable, "-c", COUNT_IN_A_PROCESS], cwd=BASE_DIR, env=env, stdout=subprocess.PIPE)
        for _ in range(2)
    ]
    allowed = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert sum(allowed) == 5, allowed  # per-process counters would let 10 through


@pytest.mark.django_db
def test_ended_windows_are_pruned(monkeypatch):
    monkeypatch.setattr(ratelimit, "_now", lambda: 1_800_000_005)
    ratelimit.hit("a", 5)
    ratelimit.hit("b", 5)
    monkeypatch.setattr(ratelimit, "_now", lambda: 1_800_000_125)  # two windows later
    assert ratelimit.hit("c", 5) == (True, 55)
    assert list(RateCounter.objects.values_list("bucket", flat=True)) == ["c"]


@pytest.fixture
def counted_in_redis(settings):
    """The limits counted in the machine's Redis, as a deployment with REDIS_URL counts them."""
    from django.core.cache import cache

    settings.REDIS_URL = REDIS_TEST_URL
    settings.CACHES = {"default": {"BACKEND": "memoryapp.cache.SharedRedisCache", "LOCATION": REDIS_TEST_URL}}
    yield
    cache.close()


@pytest.mark.django_db
def test_in_redis_a_window_allows_the_limit_then_refuses_and_the_next_starts_afresh(counted_in_redis, monkeypatch):
    monkeypatch.setattr(ratelimit, "_now", lambda: 1_800_000_005)
    bucket = f"redis-test-{uuid.uuid4().hex}"
    assert [ratelimit.hit(bucket, 3)[0] for _ in range(5)] == [True, True, True, False, False]
    assert ratelimit.hit(bucket, 3)[1] == 55  # seconds until the window resets
    assert not RateCounter.objects.exists()  # counted in Redis, not in the database
    # The counter lives one window (and a second): Redis forgets it, nothing needs pruning.
    from django.core.cache import cache

    life = redis.Redis.from_url(REDIS_TEST_URL).ttl(cache.make_key(f"rl:{bucket}:1800000000"))
    assert 0 < life <= 61
    monkeypatch.setattr(ratelimit, "_now", lambda: 1_800_000_065)
    assert ratelimit.hit(bucket, 3)[0]


async def _no_body():
    return {"type": "http.request", "body": b"", "more_body": False}


@pytest.mark.django_db(transaction=True)
def test_api_calls_through_the_server_share_one_redis_connection(counted_in_redis, monkeypatch):
    # Django keeps cache backends in context-local storage, so with its own Redis backend every call
    # built a new connection pool and opened a new TCP connection to Redis (about one per request).
    connects = []
    original = redis.connection.AbstractConnection.connect_check_health

    def counted(self, *args, **kwargs):
        if self._sock is None:  # a new TCP connection, not a check of an open one
            connects.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "connect_check_health", counted)
    org = Organization.objects.create(slug=f"rl-{uuid.uuid4().hex[:8]}", name="Rate limits")
    _, key = sessions.create_api_key(org, "agent")
    # Through the ASGI application `make run` serves: a2wsgi runs each request in a copy of the context.
    auth = [(b"authorization", f"Bearer {key}".encode())]
    statuses = [call_asgi("GET", "/api/v1/users/someone/facts", auth, _no_body)[0] for _ in range(5)]
    assert statuses == [404] * 5  # no such person: answered after the key was checked and counted
    assert len(connects) <= 1, f"{len(connects)} Redis connections for 5 calls"


def _sign_in(client, username, password, address):
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.django_db
def test_wrong_passwords_from_one_address_do_not_lock_out_another(client, make_user, settings, rate_window):
    settings.MEMORY = {**settings.MEMORY, "LOGIN_RATE_PER_MINUTE": 10}
    make_user("dana")
    tries = [_sign_in(client, "dana", "wrong", "203.0.113.7").status_code for _ in range(11)]
    assert tries == [200] * 10 + [429]  # the form with its error, then the pause
    assert _sign_in(client, "dana", "correct horse battery", "203.0.113.7").status_code == 429
    own = _sign_in(client, "dana", "correct horse battery", "198.51.100.2")
    assert own.status_code == 302 and client.session["_auth_user_id"]


@pytest.mark.django_db
def test_one_address_cannot_spray_many_account_names(client, settings, rate_window):
    settings.MEMORY = {**settings.MEMORY, "LOGIN_RATE_PER_MINUTE": 10, "LOGIN_ADDRESS_RATE_PER_MINUTE": 30}
    codes = [_sign_in(client, f"user{i}", "wrong", "203.0.113.7").status_code for i in range(31)]
    assert codes == [200] * 30 + [429]
    assert _sign_in(client, "user0", "wrong", "198.51.100.2").status_code == 200

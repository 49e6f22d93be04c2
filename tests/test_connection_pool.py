"""Issue 42 part 1: connections come from a pool, so a flood cannot exhaust PostgreSQL.

The server is the one `make run` ships (uvicorn, two workers, the ASGI app) on this test's database.
Under ASGI Django runs each request's sync code in a thread of its own; with persistent connections
each of those threads kept one until the server refused new clients ("too many clients").
"""

import concurrent.futures
import os
import threading
import time
import urllib.parse

import httpx
import pytest
from django.db import connection
from psycopg_pool import PoolTimeout

from bench.common import stop_processes
from memoryapp import sessions
from memoryapp.models import Organization
from tests.conftest import BASE_DIR, start_uvicorn, worker_database_url

POOL_MAX = 3
WORKERS = 2
SERVER_NAME = "pool-test-server"  # its connections, told apart from this test process's own


def _with_query(url, **params):
    return url + ("&" if "?" in url else "?") + urllib.parse.urlencode(params)


@pytest.fixture
def server(transactional_db):
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ANTHROPIC_API_KEY", "DATABASE_URL")}
    env.update(
        DATABASE_URL=_with_query(worker_database_url(), application_name=SERVER_NAME),
        DB_POOL_MAX_SIZE=str(POOL_MAX),
        DB_POOL_MIN_SIZE="1",
        EXTRACTION_BACKEND="offline",
        CELERY_BROKER_URL="memory://",
        DJANGO_SETTINGS_MODULE="memoryapp.settings",
        PYTHONPATH=str(BASE_DIR),
    )
    proc, base = start_uvicorn(env, "--workers", str(WORKERS))
    yield base
    stop_processes([proc], timeout=10)


def _server_connections():
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [SERVER_NAME])
        return cursor.fetchone()[0]


@pytest.mark.slow
def test_a_flood_of_made_up_keys_holds_at_most_the_pools_connections_and_valid_agents_keep_working(server):
    org = Organization.objects.create(slug="acme", name="Acme")
    _, key = sessions.create_api_key(org, "agent")
    peak, done = [0], threading.Event()

    for i in range(4):
        sessions.get_or_create_user(org, f"person{i}")

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], _server_connections())
            time.sleep(0.02)
        connection.close()  # this thread's own connection

    def bogus(i):
        made_up = [{"Authorization": f"Bearer mem_madeup{i}x{n}"} for n in range(20)]
        return [http.get(f"/api/v1/users/u{i}/facts", headers=h).status_code for h in made_up]

    def valid(i):
        valid_key = {"Authorization": f"Bearer {key}"}
        return [http.get(f"/api/v1/users/person{i}/facts", headers=valid_key).status_code for _ in range(10)]

    watcher = threading.Thread(target=watch)
    watcher.start()
    # One client shared by the 36 callers (it is thread-safe, with a connection each in flight): a
    # client apiece cost ~30 ms of CPU each to build its TLS context.
    try:
        with httpx.Client(base_url=server, timeout=30) as http, concurrent.futures.ThreadPoolExecutor(40) as pool:
            flood = [pool.submit(bogus, i) for i in range(32)]
            agents = [pool.submit(valid, i) for i in range(4)]
            flood_codes = [c for f in flood for c in f.result()]
            agent_codes = [c for f in agents for c in f.result()]
    finally:
        done.set()
        watcher.join()
    assert set(flood_codes) == {401}, "a made-up key gets 401, never a 5xx"
    assert set(agent_codes) == {200}, "valid agents are served during the flood"
    # Each web process holds at most its pool.
    assert peak[0] <= WORKERS * POOL_MAX, f"{peak[0]} server connections for {WORKERS} pools of {POOL_MAX}"


@pytest.mark.django_db(transaction=True)
def test_an_exhausted_pool_answers_a_json_503_with_retry_after_not_a_500(api_key, monkeypatch):
    from django.test import Client

    from memoryapp.dbbackend.base import DatabaseWrapper

    def exhausted(self, conn_params):
        raise PoolTimeout("couldn't get a connection after 5.00 sec")

    connection.close()
    monkeypatch.setattr(DatabaseWrapper, "get_new_connection", exhausted)
    response = Client().get("/api/v1/users/alice/facts", HTTP_AUTHORIZATION=f"Bearer {api_key}")
    monkeypatch.undo()
    assert response.status_code == 503
    assert response["Retry-After"].isdigit()
    assert response.json()["error"]["code"] == "unavailable"

"""Issue 45 part 4: pages read a real streaming replica; writes, the agent API and a fresh writer do not.

A hot standby of the test's own PostgreSQL (pg_basebackup from the embedded server's binaries, in a tmp
folder, on its own port) and the app under uvicorn with DATABASE_REPLICA_URL pointing at it. Pausing
the standby's replay makes it lag on purpose, so which server answered shows on the page itself.
"""

import statistics
import tempfile
import time

import httpx
import pytest
from django.db import connection

from bench.common import stop_processes
from bench.standby import Standby
from memoryapp import sessions
from memoryapp.models import ExternalIdentity, MemoryFact
from tests.conftest import BASE_DIR, start_uvicorn, worker_database_url

SERVER_NAME = "replica-test-server"  # the app's connections on the standby, told apart from the test's
PASSWORD = "correct horse battery"


@pytest.fixture
def standby(transactional_db):
    params = connection.get_connection_params()
    primary = {k: params[k] for k in ("host", "port", "user") if params.get(k)}
    try:
        server = Standby.start(primary, tempfile.mkdtemp(prefix="memoryapp-standby-"))
    except RuntimeError as exc:
        pytest.fail(f"could not start a hot standby of the test database's server: {exc}")
    yield server
    server.remove()


@pytest.fixture
def app_server(standby, tmp_path):
    import os

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "ANTHROPIC_API_KEY", "DATABASE_URL", "DATABASE_REPLICA_URL")
    }
    env.update(
        DATABASE_URL=worker_database_url(),
        DATABASE_REPLICA_URL=standby.url(connection.settings_dict["NAME"], application_name=SERVER_NAME),
        DB_POOL_MIN_SIZE="1",
        REPLICA_CONNECT_SECONDS="2",
        REPLICA_RETRY_SECONDS="120",  # the breaker stays open for the rest of the test once it trips
        EXTRACTION_BACKEND="offline",
        CELERY_BROKER_URL="memory://",
        DJANGO_SETTINGS_MODULE="tests.settings",  # the test hasher: the users this test signs in were made with it
        PYTHONPATH=str(BASE_DIR),
    )
    log = tmp_path / "server.log"
    with open(log, "w") as stderr:
        proc, base = start_uvicorn(env, "--workers", "1", stderr=stderr)
        yield base, log
        stop_processes([proc], timeout=10)


def _fact(user, text):
    """A row written straight to the primary, as another process would."""
    return MemoryFact.objects.create(user=user, text=text, kind="profile", origin="user", embedding_model="test")


def _page(client):
    response = client.get("/me/")
    assert response.status_code == 200, response.text[:500]
    return response.text


def _app_connections_on(standby):
    with standby.connect() as conn:
        sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        return conn.execute(sql, [SERVER_NAME]).fetchone()[0]


def test_pages_read_the_standby_writers_and_agents_the_primary_and_a_dead_standby_falls_back(
    standby, app_server, org, make_user
):
    base, log = app_server
    alice = make_user("alice", org=org)
    ExternalIdentity.objects.create(org=org, user=alice, external_id="alice")
    _, key = sessions.create_api_key(org, "agent")
    porto = _fact(alice, "The user lives in Porto.")

    with httpx.Client(base_url=base, timeout=30) as client:
        client.get("/login/")
        login = {"username": "alice", "password": PASSWORD, "csrfmiddlewaretoken": client.cookies["csrftoken"]}
        assert client.post("/login/", data=login).status_code == 302
        standby.catch_up()  # her sign-in session is on the standby too
        standby.pause_replay()  # from here on the standby lags: what is written now is not on it

        _fact(alice, "The user's favourite tea is oolong.")
        client.cookies.delete("primary_until")  # five seconds after signing in, say
        page = _page(client)
        assert "Porto" in page and "oolong" not in page, "the page came from the lagging standby"
        assert _app_connections_on(standby) >= 1

        # The agent API reads the primary: it sees the row the standby has not applied yet.
        agent = client.get("/api/v1/users/alice/facts", headers={"Authorization": f"Bearer {key}"})
        assert agent.status_code == 200
        assert "The user's favourite tea is oolong." in [f["text"] for f in agent.json()["facts"]]

        # A write from a page goes to the primary (the standby is read-only: there it would be a 500) and
        # pins her to the primary, so her next page shows her own change although the standby lags.
        headers = {"X-CSRFToken": client.cookies["csrftoken"]}
        assert client.post(f"/me/facts/{porto.id}/delete/", headers=headers).status_code == 302
        assert not MemoryFact.objects.filter(id=porto.id).exists()
        page = _page(client)
        assert "oolong" in page and "Porto" not in page, "a read right after a write came from the primary"
        client.cookies.delete("primary_until")
        assert "Porto" in _page(client), "unpinned, the page comes from the standby again"

        standby.resume_replay()
        standby.catch_up()
        page = _page(client)
        assert "oolong" in page and "Porto" not in page, "once replayed, the standby shows both changes"

        standby.stop()
        started = time.perf_counter()
        page = _page(client)
        first = time.perf_counter() - started
        assert "oolong" in page, "with the standby down the page is served from the primary"
        later = []
        for _ in range(5):
            started = time.perf_counter()
            assert "oolong" in _page(client)
            later.append(time.perf_counter() - started)

    # One wait on the dead standby (bounded by REPLICA_CONNECT_SECONDS), then the breaker skips it.
    assert first < 2 + 3, f"the first page after the standby stopped took {first:.1f} s"
    assert statistics.median(later) < 2, f"pages kept waiting on the dead standby: {later}"
    assert log.read_text().count("replica unreachable") == 1, log.read_text()[-2000:]

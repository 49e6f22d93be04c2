"""Issue 11: faults that must lose nothing and double nothing.

(a) Redis down when a session ends; (b) a worker killed in the middle of an extraction;
(c) the model API down for an hour; (d) the database restarted while the API is under load.
"""

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2
import psycopg
import pytest
from django.db import connection
from django.test import Client

from bench.common import stop_processes
from memoryapp import backends, clock, extraction, sessions
from memoryapp.models import AgentSession, ExtractionRun, MemoryFact, Organization, Turn
from tests.conftest import (
    BASE_DIR,
    REDIS_TEST_URL,
    Api,
    _redis_or_fail,
    _reset_celery_producers,
    anthropic_reply,
    wait_for,
    worker_database_url,
)

CLOSED_PORT_BROKER = "redis://127.0.0.1:6390/0"  # nothing listens here


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _point_publisher_at(monkeypatch, broker, queue, transport_options=None):
    from memoryapp.celery import app

    # Celery reads CELERY_BROKER_URL from the environment before its own configuration.
    monkeypatch.setenv("CELERY_BROKER_URL", broker)
    app.conf.update(broker_url=broker, task_default_queue=queue, broker_transport_options=transport_options or {})
    _reset_celery_producers(app)


@pytest.fixture
def publisher(monkeypatch):
    """Lets a test repoint where this process publishes tasks; puts everything back afterwards."""
    from memoryapp.celery import app

    saved = {k: app.conf[k] for k in ("broker_url", "task_default_queue", "broker_transport_options")}
    yield lambda broker, queue, options=None: _point_publisher_at(monkeypatch, broker, queue, options)
    app.conf.update(saved)
    _reset_celery_producers(app)


# --- (a) Redis down when a session ends ----------------------------------------------------------------


@pytest.mark.queue
@pytest.mark.django_db(transaction=True)
def test_broker_down_at_session_end_loses_nothing_and_the_sweeper_recovers_it(
    celery_redis, celery_workers, publisher, org, travel
):
    _, queue = celery_redis
    api = Api(sessions.create_api_key(org, "agent")[1])
    sid = api.post("/v1/sessions", {"user": "broker-down"}).json()["id"]
    api.post(f"/v1/sessions/{sid}/turns", {"turns": [{"role": "user", "content": "I prefer dark mode in every app."}]})

    publisher(CLOSED_PORT_BROKER, queue)
    started = time.monotonic()
    response = api.post(f"/v1/sessions/{sid}/end")
    assert response.status_code == 202 and response.json() == {"status": "queued"}
    assert time.monotonic() - started < 15  # the publish gives up quickly; the request is not held hostage
    session = AgentSession.objects.get(id=sid)
    assert session.ended_at is not None and session.extraction_status == "queued"
    assert session.next_attempt_at > clock.now()  # a lease: the sweeper takes over when it runs out
    assert Turn.objects.filter(session_id=sid).count() == 1

    # The broker is back, and a real worker is listening.
    publisher(REDIS_TEST_URL, queue)
    celery_workers(1)
    assert sessions.sweep()["enqueued"] == 0  # still inside the lease: nobody double-enqueues
    travel(sessions.QUEUE_LEASE + timedelta(seconds=1))
    assert sessions.sweep()["enqueued"] == 1

    wait_for(lambda: AgentSession.objects.get(id=sid).extraction_status == "done", message="the sweeper's retry")
    assert ExtractionRun.objects.filter(session_id=sid, status="succeeded").count() == 1
    assert list(MemoryFact.objects.filter(source_session_id=sid).values_list("text", flat=True)) == [
        "The user prefers dark mode in every app."
    ]
    travel(timedelta(hours=1))
    assert sessions.sweep()["enqueued"] == 0  # done is done


# --- a fake Anthropic endpoint on loopback, for worker subprocesses ------------------------------------


class FakeModel(ThreadingHTTPServer):
    """POST /v1/messages on loopback. `hold` makes the next call wait until released."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _FakeModelHandler)
        self.calls = []
        self.hold = threading.Event()
        self.release = threading.Event()
        self.answer = {"facts": [{"text": "The user prefers green tea.", "kind": "preference"}]}

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class _FakeModelHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.calls.append(body)
        if self.server.hold.is_set():
            self.server.hold.clear()
            self.server.release.wait(timeout=300)
        reply = anthropic_reply(json.dumps(self.server.answer), input_tokens=50, output_tokens=20)
        data = json.dumps(reply).encode()
        try:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the worker that asked was killed

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_model():
    server = FakeModel()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


WORKER_SCRIPT = """
import json, os, sys
import django
django.setup()
from memoryapp.celery import app
app.conf.broker_transport_options = json.loads(os.environ["TEST_TRANSPORT_OPTIONS"])
app.worker_main(["worker", "-Q", os.environ["CELERY_QUEUE"], "--pool=solo", "-l", "WARNING",
                 "-n", sys.argv[1], "--without-gossip", "--without-mingle", "--without-heartbeat"])
"""


@pytest.fixture
def own_workers(transactional_db):
    """Workers on a queue and key prefix of their own, talking to the fake model (not the shared pool)."""
    _redis_or_fail()
    tag = f"faults-{uuid.uuid4().hex[:10]}"
    # The key prefix keeps a short visibility timeout from touching anyone else's unacked messages.
    options = {"visibility_timeout": 8, "global_keyprefix": f"{tag}:", "unacked_restore_throttle": 1}
    procs = []

    def start(model_url):
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "CELERY_EAGER")}
        env.update(
            DATABASE_URL=worker_database_url(),
            CELERY_BROKER_URL=REDIS_TEST_URL,
            CELERY_QUEUE=tag,
            TEST_TRANSPORT_OPTIONS=json.dumps(options),
            EXTRACTION_BACKEND="anthropic",
            ANTHROPIC_API_KEY="sk-test",
            ANTHROPIC_BASE_URL=model_url,
            ANTHROPIC_MAX_RETRIES="0",
            ANTHROPIC_TIMEOUT="300",
            DJANGO_SETTINGS_MODULE="memoryapp.settings",
            PYTHONPATH=BASE_DIR,
        )
        proc = subprocess.Popen([sys.executable, "-c", WORKER_SCRIPT, f"{tag}-{len(procs)}@%h"], cwd=BASE_DIR, env=env)
        procs.append(proc)
        return proc

    start.queue, start.options = tag, options
    yield start
    stop_processes(procs, timeout=15)
    import redis

    client = redis.Redis.from_url(REDIS_TEST_URL)
    for key in client.scan_iter(f"{tag}:*"):
        client.delete(key)


# --- (b) a worker killed in the middle of an extraction ---------------------------------------------------


@pytest.mark.queue
@pytest.mark.django_db(transaction=True)
def test_worker_killed_inside_the_model_call_is_extracted_exactly_once_after_restart(
    own_workers, fake_model, publisher, org, travel
):
    publisher(REDIS_TEST_URL, own_workers.queue, own_workers.options)
    first = own_workers(fake_model.url)
    fake_model.hold.set()  # the first model call blocks: the worker is "inside" it

    api = Api(sessions.create_api_key(org, "agent")[1])
    sid = api.post("/v1/sessions", {"user": "killed"}).json()["id"]
    api.post(f"/v1/sessions/{sid}/turns", {"turns": [{"role": "user", "content": "I drink green tea all day."}]})
    assert api.post(f"/v1/sessions/{sid}/end").status_code == 202

    wait_for(lambda: len(fake_model.calls) == 1, timeout=120, message="the worker to call the model")
    # While it waits on the model it holds no lock: the session row is free (erasure would not wait)...
    with connection.cursor() as cur:
        cur.execute("SELECT id FROM memoryapp_agentsession WHERE id = %s FOR UPDATE NOWAIT", [sid])
    # ...and its attempt is already on record, committed before the call.
    assert [r.status for r in ExtractionRun.objects.filter(session_id=sid)] == ["running"]

    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    fake_model.release.set()
    # The killed attempt stays visible to staff, and nothing else of it was written.
    assert [r.status for r in ExtractionRun.objects.filter(session_id=sid)] == ["running"]
    assert not MemoryFact.objects.filter(source_session_id=sid).exists()

    own_workers(fake_model.url)  # the restart; the unacknowledged message comes back to it, but
    # the dead worker's lease (renewed before each call) still runs, so the redelivery does nothing
    # until the sweeper sees the lease run out, marks the attempt abandoned and enqueues it again.
    assert sessions.sweep()["enqueued"] == 0
    lease_ends = AgentSession.objects.get(id=sid).next_attempt_at  # the worker's lease (its own settings)
    travel(lease_ends - clock.now() + timedelta(seconds=1))
    assert sessions.sweep()["enqueued"] == 1
    wait_for(
        lambda: AgentSession.objects.get(id=sid).extraction_status == "done",
        timeout=120,
        message="the redelivered task to finish",
    )
    assert sorted(r.status for r in ExtractionRun.objects.filter(session_id=sid)) == ["abandoned", "succeeded"]
    assert list(MemoryFact.objects.filter(source_session_id=sid).values_list("text", flat=True)) == [
        "The user prefers green tea."
    ]
    assert len([c for c in fake_model.calls if c["system"][0]["text"] == backends.base.EXTRACT_SYSTEM]) == 2
    travel(timedelta(hours=1))
    assert sessions.sweep()["enqueued"] == 0


# --- (c) the model API down for an hour --------------------------------------------------------------------


class FlakyModel:
    """An Anthropic Messages endpoint (httpx2 MockTransport) that is down until told otherwise."""

    def __init__(self):
        self.down = True
        self.calls = 0

    def __call__(self, request):
        self.calls += 1
        if self.down:
            body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            return httpx2.Response(529, json=body, headers={"retry-after-ms": "1"})
        said = json.loads(request.content)["messages"][0]["content"]
        drink = said.split("I drink ")[1].split(" ")[0]
        answer = {"facts": [{"text": f"The user drinks {drink} every morning.", "kind": "preference"}]}
        return httpx2.Response(200, json=anthropic_reply(json.dumps(answer), output_tokens=10))


@pytest.mark.django_db
def test_model_down_for_an_hour_is_retried_with_backoff_and_extracted_exactly_once(
    org, make_user, settings, django_capture_on_commit_callbacks, travel
):
    settings.ANTHROPIC_API_KEY, settings.EXTRACTION_BACKEND, settings.ANTHROPIC_MAX_RETRIES = "sk-test", "anthropic", 0
    model = FlakyModel()
    settings.ANTHROPIC_HTTP_CLIENT = httpx2.Client(transport=httpx2.MockTransport(model))
    try:
        drinks = ["coffee", "tea", "mate"]
        ids = []
        for drink in drinks:
            person = sessions.get_or_create_user(org, f"drinker-{drink}")
            session = sessions.open_session(org, person)
            sessions.add_turns(session, [("user", f"I drink {drink} every morning.")])
            with django_capture_on_commit_callbacks(execute=False):
                sessions.end_session(session)
            ids.append(session.id)
        for sid in ids:  # the worker's first attempt, into the outage
            assert extraction.extract_session(sid).status == "failed"

        staff = make_user("sam", is_staff=True)
        console = Client()
        console.force_login(staff)
        outage_started = clock.now()
        checked_console = False
        while clock.now() - outage_started < timedelta(minutes=120):
            travel(timedelta(minutes=1))
            if clock.now() - outage_started >= timedelta(minutes=60):
                model.down = False
            with django_capture_on_commit_callbacks(execute=False):
                sessions.sweep()  # enqueues what is due; here the test plays the worker
            for sid in [s for s in ids if AgentSession.objects.get(id=s).extraction_status == "queued"]:
                extraction.extract_session(sid)
            if not checked_console and clock.now() - outage_started >= timedelta(minutes=30):
                health = console.get("/console/health/")
                assert health.status_code == 200
                assert health.context["health"].backlog == 3
                assert health.context["health"].backlog_by_status == {"failed": 3}
                checked_console = True
    finally:
        settings.ANTHROPIC_HTTP_CLIENT = None  # the settings fixture restores it too

    assert checked_console
    for sid, drink in zip(ids, drinks, strict=True):
        session = AgentSession.objects.get(id=sid)
        assert session.extraction_status == "done", f"session {drink} was lost: {session.extraction_status}"
        runs = list(ExtractionRun.objects.filter(session_id=sid).order_by("started_at", "id"))
        failed = [r for r in runs if r.status == "failed"]
        assert [r.status for r in runs][-1] == "succeeded" and len(runs) - len(failed) == 1
        assert len(failed) >= 4 and all("529" in r.error or "Overloaded" in r.error for r in failed)
        gaps = [(b.started_at - a.started_at).total_seconds() for a, b in zip(runs, runs[1:], strict=False)]
        assert gaps == sorted(gaps) and gaps[-1] > gaps[0]  # backoff, not a hammering loop
        assert list(MemoryFact.objects.filter(source_session_id=sid).values_list("text", flat=True)) == [
            f"The user drinks {drink} every morning."
        ]
    assert model.calls < 40  # three sessions over two hours: a handful of attempts each


# --- (d) the database restarted while the API is under load ----------------------------------------------


def _admin_connection():
    # Another database on the same server: Postgres will not close the doors of the one you are in.
    return psycopg.connect(worker_database_url(), dbname="postgres", autocommit=True)


@pytest.mark.django_db(transaction=True)
def test_database_restart_under_load_gives_503s_and_never_half_a_batch(org, settings):
    settings.MEMORY = {**settings.MEMORY, "API_RATE_PER_MINUTE": 1_000_000}
    from django.core.wsgi import get_wsgi_application
    from werkzeug.test import Client as WsgiClient

    from memoryapp.models import ApiKey

    key = sessions.create_api_key(org, "agent")[1]
    assert ApiKey.objects.count() == 1
    app = get_wsgi_application()
    headers = {"Authorization": f"Bearer {key}"}
    session_ids = [
        WsgiClient(app).post("/api/v1/sessions", json={"user": f"load-{i}"}, headers=headers).json["id"]
        for i in range(4)
    ]
    db_name = connection.settings_dict["NAME"]
    with connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        own_pid = cur.fetchone()[0]

    results = []  # (session id, batch marker, status, body)
    phase = {"name": "up"}
    stop = threading.Event()

    def agent(sid, n):
        client = WsgiClient(app)
        try:
            for i in itertools.count():
                final = stop.is_set()  # one more request after recovery, to show it works again
                marker = f"batch-{n}-{i}"
                turns = [{"role": "user", "content": f"{marker} part {k}"} for k in range(5)]
                response = client.post(f"/api/v1/sessions/{sid}/turns", json={"turns": turns}, headers=headers)
                when = "final" if final else phase["name"]
                results.append((sid, marker, response.status_code, response.get_data(as_text=True), when))
                if final:
                    break
        finally:
            connection.close()  # this thread's own connection

    threads = [threading.Thread(target=agent, args=(sid, n)) for n, sid in enumerate(session_ids)]
    admin = _admin_connection()
    try:
        for t in threads:
            t.start()
        time.sleep(1.0)
        # "Restart": refuse new connections and drop every existing one of the API (not ours).
        phase["name"] = "down"
        admin.execute(f'ALTER DATABASE "{db_name}" WITH ALLOW_CONNECTIONS false')
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> %s AND pid <> pg_backend_pid()",
                [db_name, own_pid],
            )
            time.sleep(0.05)
    finally:
        admin.execute(f'ALTER DATABASE "{db_name}" WITH ALLOW_CONNECTIONS true')
        admin.close()
        phase["name"] = "recovered"
        time.sleep(0.5)
        stop.set()
        for t in threads:
            t.join(timeout=60)

    statuses = {status for _, _, status, _, _ in results}
    assert statuses <= {202, 503}, f"unexpected statuses: {statuses}"
    unavailable = [r for r in results if r[2] == 503]
    assert unavailable, "the restart produced no failed request: the test did not test anything"
    for _, _, _, body, _ in unavailable:
        assert json.loads(body)["error"]["code"] == "unavailable"
    assert all(status == 202 for _, _, status, _, when in results if when == "final")

    stored = {}
    for content in Turn.objects.values_list("content", flat=True):
        stored.setdefault(content.split(" part ")[0], 0)
        stored[content.split(" part ")[0]] += 1
    partial = {m: n for m, n in stored.items() if n != 5}
    assert not partial, f"half-written batches: {partial}"
    for _, marker, status, _, _ in results:
        if status == 202:
            assert stored.get(marker) == 5, marker
    for sid in session_ids:
        session = AgentSession.objects.get(id=sid)
        assert session.turn_count == Turn.objects.filter(session_id=sid).count()
    assert Organization.objects.count() == 1


# --- the load test, at smoke size ----------------------------------------------------------------------------


@pytest.mark.queue
@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_load_test_smoke_every_session_once_no_duplicates_no_errors(tmp_path):
    from django.core.management import call_command

    _redis_or_fail()
    out = tmp_path / "load.json"
    call_command("load_test", "--smoke", "--broker", REDIS_TEST_URL, "--json", str(out))
    report = json.loads(out.read_text())
    assert report["ok"] is True
    assert report["sessions"] == report["expected_sessions"] == 12
    assert report["sessions_extracted_once"] == 12 and report["failed_runs"] == 0
    assert report["http_errors"] == 0 and report["users_with_duplicate_live_facts"] == 0
    assert report["live_facts"] > 0  # the run really extracted something
    assert not Organization.objects.filter(slug__startswith="loadtest-").exists()  # it cleans up after itself

import concurrent.futures
import contextlib
import fcntl
import json
import os
import threading
from datetime import timedelta

# Tests publish to an in-memory broker unless a test starts a real worker on Redis itself.
os.environ.setdefault("CELERY_BROKER_URL", "memory://")

import anyio
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client, override_settings

from bench.common import stop_processes
from memoryapp import backends, db, sessions
from memoryapp.models import Membership, Organization, all_scopes


def _remembered_embeddings():
    """The local models' vectors, remembered per call in this test process.

    The suite embeds the same few hundred sentences over and over (each scenario, calibration pair and
    seeded memory, in many tests); the model is deterministic, so the same texts in the same call give
    the same vectors. Keyed by the whole call (its texts in order), never by one text out of a batch:
    a batch pads to its longest text, so a text's vector may differ in the last digits from its own.
    The first call with given texts still runs the model, and test_foundation checks its vectors
    against reference ones; the servers and commands the tests start are not affected.
    """
    from memoryapp import embeddings

    for cls in (embeddings.MiniLM, embeddings.QuantizedMiniLM):
        real = cls.__dict__.get("embed")
        if real is None:
            continue

        def embed(self, texts, _real=real, _seen={}):  # noqa: B006 - the per-class memory
            texts = tuple(texts)
            key = (type(self).__name__, texts)
            if key not in _seen:
                _seen[key] = _real(self, texts)
            return _seen[key].copy()

        cls.embed = embed


_remembered_embeddings()


_seeding = threading.local()


@contextlib.contextmanager
def demo_seeding():
    """Hold the demo seeding lock shared by every xdist worker (re-entrant within a thread).

    The workers share one data folder, so one worker's `seed_demo` could replace the demo key file
    another had just written and was about to read.
    """
    if getattr(_seeding, "held", False):
        yield
        return
    with open(db.DATA_DIR / "demo-seed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _seeding.held = True
        try:
            yield
        finally:
            _seeding.held = False


@pytest.fixture(autouse=True, scope="session")
def _seed_demo_one_worker_at_a_time():
    """Every in-process `seed_demo` runs under `demo_seeding`."""
    from memoryapp.management.commands import seed_demo

    handle = seed_demo.Command.handle

    def locked(self, *args, **options):
        with demo_seeding():
            return handle(self, *args, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(seed_demo.Command, "handle", locked)
        yield


@pytest.fixture(autouse=True, scope="session")
def _empty_tables_by_delete():
    """A transactional test empties the tables afterwards with DELETE, not Django's one TRUNCATE.

    Why: TRUNCATE gives each of the ~40 tables and their indexes new files, 0.19 s of PostgreSQL's
    time after each of the 157 such tests, where deleting their few rows takes a few milliseconds.
    Django runs the statements in one transaction and declares every foreign key DEFERRABLE INITIALLY
    DEFERRED, so the keys are checked at commit, when every table is empty. With reset_sequences (no test asks
    for it today) Django's own statement runs.
    """
    ops = type(connection.ops)
    truncate = ops.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return [f"DELETE FROM {self.quote_name(table)};" for table in tables]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ops, "sql_flush", sql_flush)
        yield


def pytest_collection_modifyitems(config, items):
    """Tests marked `slow` run first (a stable sort: the same order on every pytest-xdist worker).

    The workers are handed tests in collection order; a 40-second test that starts last keeps one
    worker busy while the others have finished. Started first, the short ones fill in around it.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def rate_window(monkeypatch):
    """Pin the rate limiter's clock 5 s into a one-minute window, so a test cannot straddle a boundary."""
    from memoryapp import ratelimit

    monkeypatch.setattr(ratelimit, "_now", lambda: 1_800_000_000 + 5)


@pytest.fixture
def travel(settings):
    """Move the app clock: travel(timedelta) adds to settings.CLOCK_OFFSET, put back after the test."""
    settings.CLOCK_OFFSET = timedelta(0)

    def move(delta):
        settings.CLOCK_OFFSET = settings.CLOCK_OFFSET + delta

    return move


@pytest.fixture
def scripted():
    """Install a scripted extraction backend; set .extract_answer / .verdict_map per test."""
    backend = backends.ScriptedBackend()
    with override_settings(EXTRACTION_BACKEND=backend):
        yield backend


@pytest.fixture
def org(db):
    return Organization.objects.create(slug="acme", name="Acme")


@pytest.fixture
def other_org(db):
    return Organization.objects.create(slug="globex", name="Globex")


@pytest.fixture
def api_key(org):
    """A key with every scope (tests that check scopes make narrower ones)."""
    _, key = sessions.create_api_key(org, "test", all_scopes())
    return key


class Api:
    """A JSON client for the agent API with a bearer key."""

    def __init__(self, key):
        self.client = Client()
        self.key = key

    def _headers(self):
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def post(self, path, data=None, raw=None, headers=None):
        body = raw if raw is not None else json.dumps(data if data is not None else {})
        headers = {**self._headers(), **(headers or {})}
        return self.client.post(f"/api{path}", body, content_type="application/json", headers=headers)

    def get(self, path):
        return self.client.get(f"/api{path}", headers=self._headers())

    def delete(self, path):
        return self.client.delete(f"/api{path}", headers=self._headers())

    def patch(self, path, data):
        return self.client.patch(
            f"/api{path}", json.dumps(data), content_type="application/json", headers=self._headers()
        )


@pytest.fixture
def api(api_key):
    return Api(api_key)


@pytest.fixture
def make_user(db):
    """A person with a password, optionally a member of an org."""

    def make(username, org=None, role="member", password="correct horse battery", **extra):
        user = get_user_model().objects.create_user(username=username, password=password, **extra)
        if org is not None:
            Membership.objects.create(user=user, org=org, role=role)
        return user

    return make


# --- browser tests ----------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = os.path.join(os.path.dirname(__file__), "screenshots")


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by Playwright (never a downloaded browser)."""
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, live_server):
    """A fresh page (JavaScript on) whose relative URLs go to the live server."""
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 900})
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture
def page_nojs(browser, live_server):
    """A fresh page with JavaScript disabled: every action must still work."""
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1440, "height": 900}, java_script_enabled=False
    )
    pg = context.new_page()
    yield pg
    context.close()


def anthropic_reply(text=None, *, content=None, stop_reason="end_turn", **usage):
    """The JSON body of an Anthropic Messages reply, for fake transports and fake servers."""
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5-20251001",
        "content": [{"type": "text", "text": text}] if content is None else content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, **usage},
    }


def login(page, username, password="correct horse battery"):
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")


def settled(field):
    """Wait until a form swapped in by htmx has settled: app.js then moves the focus to its field with the
    caret at the end, and a fill made before that lands after the old text instead of replacing it."""
    from playwright.sync_api import expect

    expect(field).to_be_focused()


def screenshot(page, name):
    """Save the current page at 1440 px and 375 px wide under tests/screenshots/.

    JPEG, to be looked at: Chromium encodes a tall page in half the time it takes for a PNG, and the
    suite takes a few hundred of them (docs/screenshots/ keeps PNGs, made by test_screenshots)."""
    os.makedirs(SCREENSHOTS, exist_ok=True)
    original = page.viewport_size
    for width, height in ((1440, 900), (375, 812)):
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=os.path.join(SCREENSHOTS, f"{name}-{width}.jpg"), full_page=True, quality=85)
    page.set_viewport_size(original)


# --- real Celery workers on the real Redis (queue tests) -----------------------------

REDIS_TEST_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
BASE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker_database_url():
    """A DATABASE_URL for the test database this process is using (for worker subprocesses)."""
    return db.connection_url(connection)


def _reset_celery_producers(app):
    from kombu import pools

    pools.reset()  # kombu's global connection and producer pools, keyed by broker URL
    if app._pool is not None:
        app._pool.force_close_all()
    app._pool = None
    app.__dict__.pop("amqp", None)  # cached queues, router and producer pool are rebuilt from conf


def _redis_or_fail():
    import redis

    try:
        redis.Redis.from_url(REDIS_TEST_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.fail(f"the queue tests need Redis at {REDIS_TEST_URL}: {exc}")


@pytest.fixture(scope="session")
def celery_queue_name():
    """One Redis queue for this test run, shared by the workers and the publishing test process."""
    import uuid

    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def celery_redis(monkeypatch, celery_queue_name):
    """This process publishes to the real Redis on the run's own queue; yields (broker_url, queue).

    Fails (never skips) when Redis is not reachable.
    """
    from memoryapp.celery import app

    _redis_or_fail()
    saved = {k: app.conf[k] for k in ("task_default_queue", "broker_transport_options")}
    # Celery reads CELERY_BROKER_URL from the environment before its own conf.
    monkeypatch.setenv("CELERY_BROKER_URL", REDIS_TEST_URL)
    app.conf.update(task_default_queue=celery_queue_name, broker_transport_options={}, broker_url=REDIS_TEST_URL)
    _reset_celery_producers(app)
    yield REDIS_TEST_URL, celery_queue_name
    app.conf.update(saved)
    _reset_celery_producers(app)


@pytest.fixture(scope="session")
def _celery_worker_pool(django_db_setup, django_db_blocker, celery_queue_name):
    """Real `celery worker` subprocesses on the test database, started on first use and kept for the run
    (a worker takes seconds to boot; the tests share them). Stopped before the test database goes."""
    import subprocess
    import sys

    import redis

    procs = []

    def start(n):
        with django_db_blocker.unblock():
            database_url = worker_database_url()
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ANTHROPIC_API_KEY", "CELERY_EAGER")}
        env.update(
            DATABASE_URL=database_url,
            CELERY_BROKER_URL=REDIS_TEST_URL,
            CELERY_QUEUE=celery_queue_name,
            EXTRACTION_BACKEND="offline",
            DJANGO_SETTINGS_MODULE="memoryapp.settings",
            PYTHONPATH=BASE_DIR,
        )
        celery_bin = os.path.join(os.path.dirname(sys.executable), "celery")
        while len(procs) < n:
            cmd = [celery_bin, "-A", "memoryapp", "worker", "-Q", celery_queue_name, "--pool=solo", "-l", "WARNING"]
            cmd += [
                "-n",
                f"{celery_queue_name}-{len(procs)}@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ]
            procs.append(subprocess.Popen(cmd, cwd=BASE_DIR, env=env))
        return procs

    yield start
    stop_processes(procs, timeout=15)
    if procs:
        redis.Redis.from_url(REDIS_TEST_URL).delete(celery_queue_name)


@pytest.fixture
def celery_workers(celery_redis, transactional_db, _celery_worker_pool):
    """Call start(n) for at least n real workers (offline backend) consuming this run's queue;
    waits until they answer a ping. Use with django_db(transaction=True)."""
    import socket

    from memoryapp.celery import app

    def start(n=1):
        procs = _celery_worker_pool(n)
        _, queue = celery_redis
        # Ping only our own workers: others may share this Redis.
        names = [f"{queue}-{i}@{socket.gethostname()}" for i in range(len(procs))]
        wait_for(
            lambda: len(app.control.ping(names, timeout=0.5)) >= n if all(p.poll() is None for p in procs) else "died",
            timeout=90,
            message=f"{n} Celery worker(s) to start",
        )
        dead = [p.args for p in procs if p.poll() is not None]
        assert not dead, f"a Celery worker exited: {dead}"
        return procs

    return start


def start_uvicorn(env, *args, stderr=None):
    """`uvicorn memoryapp.asgi:application` on a free loopback port with `env`; returns (process, base URL)
    once /healthz answers. Stop it with bench.common.stop_processes. `stderr`: a file for the server's log."""
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "uvicorn", "memoryapp.asgi:application", "--port", str(port), "--log-level", "warning"]
    proc = subprocess.Popen([*cmd, *args], cwd=BASE_DIR, env=env, stderr=stderr)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=1) as http:  # one client: each new one costs ~30 ms of CPU (its TLS context)
        while True:
            try:
                if http.get(f"{base}/healthz").status_code == 200:
                    return proc, base
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_processes([proc], timeout=5)
                pytest.fail("uvicorn did not start")
            time.sleep(0.2)


def demote_at_once(*memberships):
    """Demote each membership to member from its own thread, released together: 'ok' or 'refused' each."""
    from memoryapp import orgs

    barrier = threading.Barrier(len(memberships))
    results = {}

    def demote(membership):
        barrier.wait()
        orgs.change_role(membership, "member")
        return "ok"

    threads = [in_thread(lambda m=m: demote(m), results, i) for i, m in enumerate(memberships)]
    for t in threads:
        t.join()
    for outcome in results.values():
        if isinstance(outcome, BaseException) and not isinstance(outcome, orgs.OrgError):
            raise outcome
    return sorted("refused" if isinstance(o, orgs.OrgError) else o for o in results.values())


def wait_for(predicate, timeout=60.0, interval=0.2, message="condition"):
    """Poll `predicate` (wall clock, for real workers) until it returns something truthy."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {message}")


def in_fresh_loop(main):
    """Run the coroutine function `main` to completion on an event loop of its own, in its own thread.

    The browser tests leave Playwright's loop running in the main thread, where asyncio.run refuses
    to start another one; a worker thread has no loop.
    """
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, main).result()


def call_asgi(method, path, headers, receive):
    """Run the ASGI application `make run` serves (memoryapp.asgi) on one request, on a loop of its own;
    `receive` is the ASGI receive callable. Returns (status, headers as a dict, body bytes)."""
    from memoryapp.asgi import application

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    sent = []

    async def send(message):
        sent.append(message)

    in_fresh_loop(lambda: application(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


def in_thread(fn, results, key):
    """Run `fn` in a thread with its own database connection; its result (or exception) lands in results[key]."""

    def target():
        try:
            results[key] = fn()
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            results[key] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    return thread

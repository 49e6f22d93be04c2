"""Drills: the shipped server under ordinary and hostile load, audited for loss, errors and connections.

Each drill starts what scripts/run starts (uvicorn with 2 workers on the ASGI app, a Celery worker with
concurrency 2) on loopback, on a private Redis queue, with the process management of bench/loadtest.py,
and runs a bounded amount of traffic that stops by itself:

- load:  20 clients writing sessions (open, turns, a remembered fact, more turns, end);
- burst: 50 clients released at once, 10 sessions each;
- flood: 32 threads sending made-up API keys and oversized bodies while 4 valid agents work, after a
  quiet run of the same 4 agents alone (the baseline for their latency).

Then it waits for extraction to settle and compares what the API acknowledged (2xx) with the rows in
the database, counts 5xx answers to valid calls, samples PostgreSQL's connections (pg_stat_activity)
and counts "too many clients" in the server's and worker's output. Targets: nothing lost, no 5xx for
valid calls (load, burst), and during the flood a valid p95 under 10x its quiet value and no "too many
clients".

Fault drills (celery beat runs too: the sweeper every SWEEP_SECONDS, the recovery measured is the shipped one):
- provider-hung / provider-down: a fake Anthropic endpoint on loopback (FakeProvider) hangs or answers 500
  to verdict calls while 4 agents remember facts next to their own and end sessions; no valid call over
  MODEL_REQUEST_SECONDS + a margin, 0 5xx, the offline fallback labelled, every ended session extracted once;
- worker-killed / worker-stopped: SIGKILL (with its children) or SIGTERM the worker while the provider holds
  its extraction call, start another; the session redone within 90 s, extracted once;
- db-stopped: the embedded PostgreSQL stopped under 20 writers (a server of its own, in a tmp dir: the
  command re-runs itself there); nothing acknowledged lost, 5xx only in the outage, restarted by the app.
"""

import collections
import contextlib
import json
import os
import secrets
import signal
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx
import psutil
import psycopg
from django.conf import settings
from django.db import connection

from bench import loadtest
from memoryapp import db, sessions
from memoryapp.models import AgentSession, ExtractionRun, FactEvent, MemoryFact, Organization, Turn

# Full size and the smoke size (a test runs it in well under a minute).
DRILLS = {
    "load": {"clients": 20, "sessions": 10},
    "burst": {"clients": 50, "sessions": 10},
    "flood": {"clients": 4, "sessions": 8, "attackers": 32, "attack_requests": 200},
    "provider-hung": {"clients": 4, "sessions": 3},
    "provider-down": {"clients": 4, "sessions": 3},
    "worker-killed": {"clients": 1, "sessions": 1},
    "worker-stopped": {"clients": 1, "sessions": 1},
    "db-stopped": {"clients": 20, "sessions": 6, "stop_after_seconds": 4},
}
SMOKE = {
    "load": {"clients": 3, "sessions": 2},
    "burst": {"clients": 6, "sessions": 2},
    "flood": {"clients": 2, "sessions": 2, "attackers": 4, "attack_requests": 20},
    "provider-hung": {"clients": 2, "sessions": 2},
    "provider-down": {"clients": 2, "sessions": 2},
    "worker-killed": {"clients": 1, "sessions": 1},
    "worker-stopped": {"clients": 1, "sessions": 1},
    "db-stopped": {"clients": 4, "sessions": 3, "stop_after_seconds": 2},
}
PROVIDER_DRILLS = ("provider-hung", "provider-down")
WORKER_DRILLS = ("worker-killed", "worker-stopped")
# The fault drills' model settings (the server's and worker's environment): a web request waits at most
# MODEL_REQUEST_SECONDS for a verdict; a valid call may take that plus the margin (the rest of its work).
FAULT_ENV = {"MODEL_REQUEST_SECONDS": "5", "ANTHROPIC_TIMEOUT": "10", "ANTHROPIC_MAX_RETRIES": "1"}
WAIT_MARGIN_SECONDS = 5
# At smoke size a session whose extraction failed while the provider was down is retried seconds after
# it recovers, through the same sweeper and backoff, instead of after production's minute.
SMOKE_RETRY_ENV = {"SWEEP_SECONDS": "1", "EXTRACTION_RETRY_SECONDS": "1"}
REDO_TARGET_SECONDS = 90  # a killed worker's session, extracted again by another worker
FLOOD_P95_FACTOR = 10
OVERSIZED_BYTES = 2 * 1024 * 1024  # twice MAX_REQUEST_BYTES' default
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class Calls:
    """Every valid call's name, status (or transport error) and latency, from all client threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.records = []
        self.failures = []  # the first few answers that were not 2xx, to see why
        self.started = time.perf_counter()
        self.error_times = []  # seconds into the run at which each 5xx answer came back

    def add(self, name, status, seconds, detail=""):
        with self.lock:
            self.records.append((name, status, seconds))
            if isinstance(status, int) and status >= 500:
                # Unrounded: compared with the moment of a fault (rounding put a 5xx at 2.04 s before a stop at 2.04 s).
                self.error_times.append(time.perf_counter() - self.started)
            if detail and len(self.failures) < 5:
                self.failures.append(f"{name}: {status} {detail[:200]}")

    def summary(self):
        """Counts and latency percentiles (ms) of the calls so far."""
        statuses = collections.Counter(str(status) for _, status, _ in self.records)
        errors = collections.Counter(name for name, st, _ in self.records if isinstance(st, int) and st >= 500)
        times = [s for _, _, s in self.records]
        return {
            "calls": len(self.records),
            "statuses": dict(sorted(statuses.items())),
            "server_errors_5xx": sum(errors.values()),
            "server_errors_by_call": dict(errors),
            "server_errors_at_seconds": [round(t, 1) for t in self.error_times[:50]],
            "transport_errors": sum(1 for _, st, _ in self.records if not isinstance(st, int)),
            "p50_ms": loadtest.percentile(times, 50),
            "p95_ms": loadtest.percentile(times, 95),
            "max_ms": loadtest.percentile(times, 100),
            "failure_samples": self.failures,
        }


class Acknowledged:
    """What the API said it stored (2xx): sessions, turns per session, ends and remembered facts."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sessions, self.ended, self.facts = set(), set(), set()
        self.turns = collections.Counter()

    def note(self, kind, sid, value=None):
        with self.lock:
            if kind == "session":
                self.sessions.add(sid)
            elif kind == "turns":
                self.turns[sid] += value
            elif kind == "end":
                self.ended.add(sid)
            elif kind == "fact":
                self.facts.add(value)


def _call(client, calls, name, path, body):
    started = time.perf_counter()
    try:
        response = client.post(path, json=body)
        status = response.status_code
    except httpx.HTTPError as exc:
        response, status = None, type(exc).__name__
    ok = isinstance(status, int) and 200 <= status < 300
    calls.add(
        name, status, time.perf_counter() - started, "" if ok else (response.text if response is not None else "-")
    )
    return response.json() if ok else None


def valid_agent(base_url, key, user, index, n_sessions, deadline, calls, acked, start=None):
    """One well-behaved agent: `n_sessions` sessions, each acknowledged piece noted in `acked`."""
    if start is not None:
        start.wait()
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        for s in range(n_sessions):
            if time.monotonic() > deadline:
                return
            opened = _call(client, calls, "open", "/api/v1/sessions", {"user": user})
            if opened is None:
                continue
            sid = uuid.UUID(opened["id"])
            acked.note("session", sid)
            said = loadtest.SCRIPT[(index + s) % len(loadtest.SCRIPT)]
            turns = [{"role": "user", "content": said}] + [{"role": r, "content": c} for r, c in loadtest.NOISE]
            for batch in (turns, [{"role": "user", "content": "Thanks!"}]):
                answer = _call(client, calls, "turns", f"/api/v1/sessions/{sid}/turns", {"turns": batch})
                if answer is not None:
                    acked.note("turns", sid, answer["accepted"])
            text = f"The user's gym locker number is {index * 1000 + s}."
            fact = _call(
                client,
                calls,
                "remember",
                f"/api/v1/users/{user}/facts",
                {"text": text, "kind": "profile", "session": str(sid)},
            )
            if fact is not None:
                acked.note("fact", sid, uuid.UUID(fact["fact"]["id"]))
            if _call(client, calls, "end", f"/api/v1/sessions/{sid}/end", {}) is not None:
                acked.note("end", sid)


def attacker(base_url, index, n_requests, stop, calls):
    """Made-up API keys, one in four with an oversized body, until `stop` or `n_requests`."""
    oversized = index % 4 == 0
    body = b'{"turns": [{"role": "user", "content": "' + b"x" * OVERSIZED_BYTES + b'"}]}'
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for _ in range(n_requests):
            if stop.is_set():
                return
            headers = {"Authorization": f"Bearer mem_{secrets.token_urlsafe(24)}", "Content-Type": "application/json"}
            started = time.perf_counter()
            try:
                if oversized:
                    path = f"/api/v1/sessions/{uuid.uuid4()}/turns"
                    status = client.post(path, content=body, headers=headers).status_code
                else:
                    status = client.post("/api/v1/sessions", json={"user": "nobody"}, headers=headers).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            calls.add("oversized" if oversized else "made-up key", status, time.perf_counter() - started)


class FakeProvider(ThreadingHTTPServer):
    """An Anthropic Messages endpoint on loopback whose verdict calls can hang or fail, and which can hold
    the next extraction call until recover(). Verdict calls are the ones whose prompt names a NEW fact."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _FakeProviderHandler)
        self.verdicts = "ok"  # ok | hung | down
        self.hold_extraction = threading.Event()
        self.held = threading.Event()  # an extraction call is being held
        self.recovered = threading.Event()
        self.counts = collections.Counter()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.recover()
        self.shutdown()
        self.server_close()

    def recover(self):
        """Answer every call again, and let held calls go."""
        self.verdicts = "ok"
        self.recovered.set()


def _message_text(body):
    content = (body.get("messages") or [{}])[-1].get("content", "")
    return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


class _FakeProviderHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        server = self.server
        said = _message_text(json.loads(self.rfile.read(int(self.headers["content-length"]))))
        verdict = said.startswith("NEW fact:")
        server.counts[f"{'verdict' if verdict else 'extraction'}_{server.verdicts if verdict else 'ok'}"] += 1
        if verdict and server.verdicts == "hung":
            server.recovered.wait(timeout=120)  # longer than any caller waits
        elif verdict and server.verdicts == "down":
            return self._send(500, {"type": "error", "error": {"type": "api_error", "message": "drill: down"}})
        elif not verdict and server.hold_extraction.is_set():
            server.hold_extraction.clear()
            server.held.set()
            server.recovered.wait(timeout=300)
        if verdict:
            existing = said.split("EXISTING facts:", 1)[-1].strip().splitlines()
            answer = {"verdicts": ["INDEPENDENT"] * len(existing)}
        else:
            answer = {"facts": [{"text": "The user prefers green tea.", "kind": "preference", "scope": "personal"}]}
        self._send(200, _anthropic_reply(json.dumps(answer)))

    def _send(self, status, body):
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller gave up (a web request's bound) or was killed (worker-killed)

    def log_message(self, *args):
        pass


def _anthropic_reply(text):
    return {
        "id": "msg_drill",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5-20251001",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 20},
    }


class ConnectionSampler:
    """PostgreSQL's client connections (pg_stat_activity) every `every` seconds, on a connection of its own."""

    def __init__(self, url, every=0.2):
        self.url, self.every = url, every
        self.stop_event = threading.Event()
        self.peak_total = self.peak_database = self.samples = 0
        self.max_connections = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(timeout=10)

    def _run(self):
        query = (
            "SELECT count(*) FILTER (WHERE backend_type = 'client backend'), "
            "count(*) FILTER (WHERE backend_type = 'client backend' AND datname = current_database()) "
            "FROM pg_stat_activity"
        )
        while not self.stop_event.is_set():
            try:
                self._sample(query)
            except psycopg.OperationalError:  # the server is stopped (drill db-stopped): sample again later
                self.stop_event.wait(0.5)

    def _sample(self, query):
        with psycopg.connect(self.url, autocommit=True, connect_timeout=2) as conn:
            self.max_connections = int(conn.execute("SHOW max_connections").fetchone()[0])
            while not self.stop_event.is_set():
                total, here = conn.execute(query).fetchone()
                self.peak_total, self.peak_database = max(self.peak_total, total), max(self.peak_database, here)
                self.samples += 1
                self.stop_event.wait(self.every)

    def report(self):
        return {
            "peak_client_connections": self.peak_total,
            "peak_connections_to_this_database": self.peak_database,
            "max_connections": self.max_connections,
            "samples": self.samples,
        }


def _is_loopback(host):
    return not host or host in LOOPBACK or host.startswith("/")


def check_loopback(broker):
    """Refuse a broker or database that is not on this machine: a drill is loud traffic."""
    host = urlsplit(broker).hostname
    if not _is_loopback(host):
        raise ValueError(f"the drill runs on loopback only; the broker {host} is not")
    db_host = connection.get_connection_params().get("host")
    if not _is_loopback(db_host):
        raise ValueError(f"the drill runs on loopback only; the database host {db_host} is not")


def _run_clients(base_url, key, tag, size, deadline, calls, acked, together=False):
    """`size['clients']` valid agents, two per person; `together`: all released at one instant."""
    n = size["clients"]
    start = threading.Barrier(n) if together else None
    args = (size["sessions"], deadline, calls, acked, start)
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(valid_agent, base_url, key, f"{tag}-user-{i // 2}", i, *args) for i in range(n)]
        for f in futures:
            f.result()


def _flood(base_url, key, tag, size, deadline, acked):
    """The 4 agents alone (quiet), then again under 32 attacking threads; their calls of each phase."""
    quiet, flooded = Calls(), Calls()
    _run_clients(base_url, key, f"{tag}-quiet", size, deadline, quiet, acked)
    stop, attacks = threading.Event(), Calls()
    attackers = [
        threading.Thread(target=attacker, args=(base_url, i, size["attack_requests"], stop, attacks))
        for i in range(size["attackers"])
    ]
    for t in attackers:
        t.start()
    try:
        _run_clients(base_url, key, f"{tag}-flood", size, deadline, flooded, acked)
    finally:
        stop.set()
        for t in attackers:
            t.join()
    return quiet, flooded, attacks


def _provider_fault(name, base_url, key, tag, size, deadline, acked, fake):
    """The agents remember and end sessions while verdict calls hang (or answer 500); then it recovers."""
    fake.verdicts = "hung" if name == "provider-hung" else "down"
    calls = Calls()
    try:
        _run_clients(base_url, key, tag, size, deadline, calls, acked)
    finally:
        fake.recover()
    return calls


def _kill_tree(pid, sig):
    """Send `sig` to a process and, for SIGKILL, to its children too (a prefork worker's pool)."""
    parent = psutil.Process(pid)
    family = [parent] + (parent.children(recursive=True) if sig == signal.SIGKILL else [])
    for process in family:
        process.send_signal(sig)


def _worker_fault(name, base_url, key, tag, size, deadline, acked, fake, procs, report):
    """A worker is killed (or stopped) while the provider holds its extraction call; a new one starts."""
    fake.hold_extraction.set()
    calls = Calls()
    _run_clients(base_url, key, tag, size, deadline, calls, acked)
    if not fake.held.wait(timeout=120):
        raise RuntimeError("no extraction call reached the provider within 120 s")
    worker = procs.workers[-1]
    fault_at = time.perf_counter()
    _kill_tree(worker.pid, signal.SIGKILL if name == "worker-killed" else signal.SIGTERM)
    try:
        worker.wait(timeout=60)
    except Exception:  # noqa: BLE001 (a worker that ignores SIGTERM for a minute is the finding)
        _kill_tree(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    procs.dead.append(worker)
    report["worker_exit_seconds"] = round(time.perf_counter() - fault_at, 2)
    report["worker_exit_code"] = worker.returncode
    fake.recover()  # the held call answers into a closed socket; the next one is served
    procs.start_worker(tag, f"{tag}-second", concurrency=2)
    return calls, fault_at


def _reconnect():
    """This process's own connections point at a stopped server: drop them (closing one may fail), open anew."""
    with contextlib.suppress(Exception):
        connection.close_pool()
    with contextlib.suppress(Exception):
        connection.close()
    connection.connection = None


def _db_running():
    # Why the AssertionError: postmaster.pid read while the restarting server is still writing it.
    try:
        return db.embedded_status()[0]
    except AssertionError:
        return False


def _db_stopped(base_url, key, tag, size, deadline, acked, report):
    """The writers run; after `stop_after_seconds` the embedded PostgreSQL is stopped (fast shutdown) and
    nobody starts it: the app does, on its next connection attempt. Times are seconds into the run."""
    if not settings.DATABASES["default"].get("EMBEDDED") or not db.DATA_DIR.is_relative_to(tempfile.gettempdir()):
        raise ValueError("db-stopped stops the embedded server: run it on one of its own (manage.py drill does)")
    calls = Calls()
    writers = threading.Thread(target=_run_clients, args=(base_url, key, tag, size, deadline, calls, acked))
    writers.start()
    time.sleep(size["stop_after_seconds"])
    stopped_at = time.perf_counter() - calls.started
    report["db_stopped_cleanly"] = db.embedded_stop()
    report["db_stopped_at_seconds"] = round(stopped_at, 1)
    while not _db_running() and time.perf_counter() - calls.started < stopped_at + 120:
        time.sleep(0.05)
    running = _db_running()
    report["db_restarted_by_the_app_after_seconds"] = (
        round(time.perf_counter() - calls.started - stopped_at, 1) if running else None
    )
    writers.join()
    _reconnect()
    errors = calls.error_times
    report["last_5xx_after_stop_seconds"] = round(max(errors) - stopped_at, 1) if errors else None
    report["5xx_before_stop"] = sum(1 for t in errors if t < stopped_at)
    return calls


def audit(acked):
    """Acknowledged against stored: sessions, turns, ends (and their extraction), remembered facts."""
    stored = AgentSession.objects.in_bulk(list(acked.sessions))
    turn_rows = collections.Counter(
        Turn.objects.filter(session_id__in=list(acked.sessions)).values_list("session_id", flat=True)
    )
    settled = (AgentSession.Extraction.DONE, AgentSession.Extraction.SKIPPED)
    # Retention deletes the turns of a session that taught nothing once it is extracted; the session's
    # turn_count, written in the same transaction as the turns, still shows they were stored.
    emptied = {sid for sid, s in stored.items() if s.extraction_status in settled and not turn_rows[sid]}
    turns_missing = sum(
        max(0, n - (stored[sid].turn_count if sid in emptied else turn_rows[sid])) for sid, n in acked.turns.items()
    )
    ends_lost = sum(1 for sid in acked.ended if sid not in stored or stored[sid].ended_at is None)
    not_extracted = sum(1 for sid in acked.ended if sid in stored and stored[sid].extraction_status not in settled)
    facts_stored = MemoryFact.objects.filter(id__in=list(acked.facts)).count()
    report = {
        "sessions_acknowledged": len(acked.sessions),
        "sessions_stored": len(stored),
        "turns_acknowledged": sum(acked.turns.values()),
        "turns_missing": turns_missing,
        "sessions_emptied_by_retention": len(emptied & set(acked.turns)),
        "ends_acknowledged": len(acked.ended),
        "ends_lost": ends_lost,
        "ended_sessions_not_extracted": not_extracted,
        "facts_acknowledged": len(acked.facts),
        "facts_stored": facts_stored,
        "facts_extracted": MemoryFact.objects.filter(source_session_id__in=list(acked.sessions)).count(),
    }
    finished = collections.Counter(
        ExtractionRun.objects.filter(session_id__in=list(acked.ended), status__in=ExtractionRun.FINISHED).values_list(
            "session_id", flat=True
        )
    )
    report["ended_sessions_extracted_once"] = sum(1 for sid in acked.ended if finished[sid] == 1)
    report["ended_sessions_extracted_twice_or_more"] = sum(1 for sid in acked.ended if finished[sid] > 1)
    report["runs_abandoned"] = ExtractionRun.objects.filter(
        session_id__in=list(acked.ended), status=ExtractionRun.Status.ABANDONED
    ).count()
    report["runs_failed"] = ExtractionRun.objects.filter(
        session_id__in=list(acked.ended), status=ExtractionRun.Status.FAILED
    ).count()
    # The web path's fallback, as the audit trail says it: the remembered facts whose verdicts the
    # offline judge gave because the model did not answer in time.
    report["facts_judged_offline"] = FactEvent.objects.filter(
        fact_id__in=list(acked.facts), action=FactEvent.Action.CREATED, reason__contains="verdicts by the offline judge"
    ).count()
    report["lost"] = (
        report["sessions_acknowledged"]
        - report["sessions_stored"]
        + turns_missing
        + ends_lost
        + not_extracted
        + report["facts_acknowledged"]
        - facts_stored
    )
    return report


def _count_in(path, needle):
    with open(path, errors="replace") as log:
        return sum(line.lower().count(needle) for line in log)


def _first_lines_with(path, needle, limit=3):
    with open(path, errors="replace") as log:
        return [line.strip()[:300] for line in log if needle in line.lower()][:limit]


def run(name, smoke=False, db_pool=None, broker=None, web_workers=2, max_seconds=600, settle_timeout=600, out=print):
    """Run drill `name`; returns its report (a dict, also what the JSON holds)."""
    size = (SMOKE if smoke else DRILLS)[name]
    broker = broker or settings.REDIS_URL or "redis://127.0.0.1:6379/0"
    check_loopback(broker)
    db_pool = settings.DB_POOL if db_pool is None else db_pool
    tag = f"drill-{name}-{secrets.token_hex(4)}"
    org = Organization.objects.create(slug=tag, name=f"Drill {tag}")
    _, key = sessions.create_api_key(org, "drill")
    port = loadtest.free_port()
    base_url = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile("w+", prefix=f"{tag}-", suffix=".log", delete=False)  # noqa: SIM115 (the servers write to it for the whole drill)
    faulted = name in PROVIDER_DRILLS + WORKER_DRILLS + ("db-stopped",)
    fake = FakeProvider()
    env = {"DB_POOL": "1" if db_pool else "0"}
    if name in PROVIDER_DRILLS + WORKER_DRILLS:
        env.update(FAULT_ENV, EXTRACTION_BACKEND="anthropic", ANTHROPIC_API_KEY="sk-test", ANTHROPIC_BASE_URL=fake.url)
    retry_env = SMOKE_RETRY_ENV if faulted and smoke else {}
    env.update(retry_env)
    env = loadtest.server_env(broker, tag, **env)
    if name == "db-stopped":
        env.pop("DATABASE_URL")  # the stack's own embedded server (MEMORYAPP_DATA_DIR), which it restarts
    procs = loadtest.Processes(env, log=log)
    sweep_every = env.get("SWEEP_SECONDS", settings.SWEEP_SECONDS)
    report = {
        "drill": name,
        "smoke": smoke,
        "size": size,
        "db_pool": db_pool,
        "server": f"uvicorn --workers {web_workers}",
        "celery": "1 worker, concurrency 2" + (f"; beat (sweeper every {sweep_every} s)" if faulted else ""),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }
    if faulted:
        lease = settings.EXTRACTION_LEASE.total_seconds()
        report["model_settings"] = dict(FAULT_ENV, **retry_env, EXTRACTION_LEASE_SECONDS=lease)
    acked = Acknowledged()
    try:
        with fake, tempfile.TemporaryDirectory(prefix=f"{tag}-beat-") as beat_dir:
            procs.start_web(port, web_workers)
            procs.start_worker(tag, tag, concurrency=2)
            if faulted:
                # Why beat and not the drill calling sweep(): the recovery measured is the shipped one.
                procs.start_beat(os.path.join(beat_dir, "celerybeat-schedule"))
            loadtest.wait_until_up(base_url, procs)
            out(f"drill {name}{' (smoke)' if smoke else ''}: {size}, DB_POOL={int(db_pool)}, {base_url}")
            _drive(name, report, acked, procs, fake, org, base_url, key, tag, size, max_seconds, settle_timeout)
            report["provider_calls"] = dict(fake.counts)
        report.update(audit(acked))
    finally:
        procs.stop()
        loadtest.forget_queue(broker, tag)
        if name == "db-stopped":
            _reconnect()
        loadtest.clean_up(org)
        log.flush()
        report["too_many_clients_in_log"] = _count_in(log.name, "too many clients")
        report["tracebacks_in_log"] = _count_in(log.name, "traceback (most recent call last)")
        # Why a 503 happened, in the server's words (the pool's wait running out, a refused connection).
        report["database_unavailable_in_log"] = _count_in(log.name, "database unavailable")
        report["database_unavailable_samples"] = _first_lines_with(log.name, "database unavailable")
        log.close()
        os.unlink(log.name)
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    report["targets"] = targets(report)
    report["ok"] = all(report["targets"].values())
    _print(report, out)
    return report


def _drive(name, report, acked, procs, fake, org, base_url, key, tag, size, max_seconds, settle_timeout):
    """The drill's traffic (and fault), then the wait for extraction to settle; fills `report`."""
    deadline = time.monotonic() + max_seconds
    started = time.perf_counter()
    fault_at = None
    with ConnectionSampler(loadtest.database_url()) as sampler:
        if name == "flood":
            quiet, flooded, attacks = _flood(base_url, key, tag, size, deadline, acked)
            report["valid_quiet"], report["valid"] = quiet.summary(), flooded.summary()
            report["attacks"] = attacks.summary()
        elif name in PROVIDER_DRILLS:
            report["valid"] = _provider_fault(name, base_url, key, tag, size, deadline, acked, fake).summary()
        elif name in WORKER_DRILLS:
            calls, fault_at = _worker_fault(name, base_url, key, tag, size, deadline, acked, fake, procs, report)
            report["valid"] = calls.summary()
        elif name == "db-stopped":
            report["valid"] = _db_stopped(base_url, key, tag, size, deadline, acked, report).summary()
        else:
            calls = Calls()
            _run_clients(base_url, key, tag, size, deadline, calls, acked, together=name == "burst")
            report["valid"] = calls.summary()
        report["traffic_seconds"] = round(time.perf_counter() - started, 1)
        left = loadtest.wait_for_backlog(org, settle_timeout, procs)
    report["settle_seconds"] = round(time.perf_counter() - started - report["traffic_seconds"], 1)
    if fault_at is not None:
        report["redo_seconds_after_fault"] = round(time.perf_counter() - fault_at, 1) if not left else None
    report["backlog_left"] = left
    report["connections"] = sampler.report()


def targets(report):
    """Which of the drill's targets were met."""
    met = {"nothing_lost": report["lost"] == 0}
    if report["drill"] == "flood":
        quiet, flooded = report["valid_quiet"]["p95_ms"], report["valid"]["p95_ms"]
        met["valid_p95_under_10x_quiet"] = bool(quiet and flooded and flooded < FLOOD_P95_FACTOR * quiet)
        met["no_too_many_clients"] = report["too_many_clients_in_log"] == 0
    else:
        met["no_5xx_for_valid_calls"] = report["valid"]["server_errors_5xx"] == 0
        met["no_transport_errors"] = report["valid"]["transport_errors"] == 0
    if report["drill"] in PROVIDER_DRILLS:
        bound = float(FAULT_ENV["MODEL_REQUEST_SECONDS"]) + WAIT_MARGIN_SECONDS
        if not report["smoke"]:  # a wall-clock bound is the full drill's, on a quiet machine, not a smoke's in CI
            met[f"no_valid_call_over_{bound:g}_s"] = (report["valid"]["max_ms"] or 0) <= bound * 1000
        # Some remembered fact needed a verdict, and each that fell back says so in its audit trail.
        met["fallback_labelled"] = report["facts_judged_offline"] > 0
    if report["drill"] in PROVIDER_DRILLS + WORKER_DRILLS:
        met["every_ended_session_extracted_once"] = (
            report["ended_sessions_extracted_once"] == report["ends_acknowledged"] > 0
        )
    if report["drill"] == "db-stopped":
        # 5xx only while the server was down (the stop, the app's restart, and 5 s of grace after it).
        restarted = report.get("db_restarted_by_the_app_after_seconds")
        last = report.get("last_5xx_after_stop_seconds")
        met["restarted_with_no_manual_step"] = restarted is not None
        met["5xx_only_during_the_outage"] = report["5xx_before_stop"] == 0 and (
            last is None or (restarted is not None and last <= restarted + 5)
        )
        met.pop("no_5xx_for_valid_calls")
        met.pop("no_transport_errors")
    if report["drill"] in WORKER_DRILLS:
        redo = report.get("redo_seconds_after_fault")
        met[f"redone_within_{REDO_TARGET_SECONDS}_s"] = redo is not None and redo <= REDO_TARGET_SECONDS
    return met


def _print(report, out):
    v = report["valid"]
    out(f"  valid calls: {v['calls']}, statuses {v['statuses']}, p50 {v['p50_ms']} ms, p95 {v['p95_ms']} ms")
    if "valid_quiet" in report:
        q = report["valid_quiet"]
        out(f"  quiet baseline: {q['calls']} calls, p50 {q['p50_ms']} ms, p95 {q['p95_ms']} ms")
        a = report["attacks"]
        out(f"  attackers: {a['calls']} calls, statuses {a['statuses']}, p95 {a['p95_ms']} ms")
    out(
        f"  acknowledged vs stored: sessions {report['sessions_acknowledged']}/{report['sessions_stored']}, "
        f"facts {report['facts_acknowledged']}/{report['facts_stored']}, turns missing {report['turns_missing']}, "
        f"ended not extracted {report['ended_sessions_not_extracted']} -> lost {report['lost']}"
    )
    c = report["connections"]
    out(
        f"  PostgreSQL: peak {c['peak_client_connections']} client connections of {c['max_connections']} "
        f"({c['peak_connections_to_this_database']} to this database); "
        f"'too many clients' in the server log: {report['too_many_clients_in_log']}"
    )
    out(f"  targets: {report['targets']} -> {'OK' if report['ok'] else 'MISSED'}")

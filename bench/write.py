"""The write-path benchmark: sessions through a real Celery worker, and store_fact's own cost."""

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis
from django.contrib.auth import get_user_model
from django.db import connection
from kombu import pools

from bench import common as benchmarks
from memoryapp import backends, db, embeddings, sessions, writing
from memoryapp.celery import app
from memoryapp.models import AgentSession, FactEvent, MemoryFact, Organization

CITIES = "Lisbon Porto Berlin Madrid Oslo Dublin Toronto Austin Denver Kyoto Nairobi Lyon".split()
EDITORS = ["Neovim", "VS Code", "Emacs", "Helix", "Sublime Text", "IntelliJ IDEA", "Zed"]
JOBS = ["nurse", "data engineer", "teacher", "backend developer", "product designer", "pharmacist", "pilot"]
LANGUAGES = ["Go", "Python", "Rust", "TypeScript", "Kotlin", "Elixir", "Ruby"]
STYLES = [
    "short answers with code first",
    "detailed explanations",
    "British spelling",
    "answers without emoji",
    "examples in tables",
]
GOALS = ["learning Rust", "learning Spanish", "trying to run a marathon", "trying to get promoted", "learning piano"]
DATABASES = ["Postgres", "MySQL", "SQLite", "MongoDB", "Redis"]
CHATTER = [
    "Can you look at this stack trace for me?",
    "Thanks, that fixed it.",
    "What does this regex do?",
    "Hmm, not quite, try again.",
    "Could you shorten that paragraph?",
]
ASSISTANT = ["Sure, here is a version.", "I think you also love Kubernetes.", "Done. Anything else?"]


def user_turns(rng):
    """Three user turns: two durable first-person statements and some chatter, like a real session."""
    statements = [
        f"I live in {rng.choice(CITIES)}.",
        f"My editor is {rng.choice(EDITORS)}.",
        f"I work as a {rng.choice(JOBS)}.",
        f"My favourite language is {rng.choice(LANGUAGES)}.",
        f"I prefer {rng.choice(STYLES)}.",
        f"I'm {rng.choice(GOALS)}.",
        f"We use {rng.choice(DATABASES)} for everything.",
    ]
    picked = rng.sample(statements, 2)
    return [
        ("user", f"{rng.choice(CHATTER)} {picked[0]}"),
        ("assistant", rng.choice(ASSISTANT)),
        ("user", picked[1]),
        ("assistant", rng.choice(ASSISTANT)),
        ("user", rng.choice(CHATTER)),
    ]


def database_url():
    """A DATABASE_URL for the database this process is connected to (for worker subprocesses)."""
    return db.connection_url(connection)


def _reset_producers(app):

    pools.reset()
    if app._pool is not None:
        app._pool.force_close_all()
    app._pool = None
    app.__dict__.pop("amqp", None)


@contextmanager
def publishing_to(broker_url, queue):
    """This process publishes tasks to `broker_url` on `queue` inside the block."""

    saved = {k: app.conf[k] for k in ("broker_url", "task_default_queue", "broker_transport_options")}
    saved_env = os.environ.get("CELERY_BROKER_URL")
    os.environ["CELERY_BROKER_URL"] = broker_url  # Celery prefers the environment over its conf
    app.conf.update(broker_url=broker_url, task_default_queue=queue, broker_transport_options={})
    _reset_producers(app)
    try:
        yield app
    finally:
        app.conf.update(saved)
        if saved_env is None:
            os.environ.pop("CELERY_BROKER_URL", None)
        else:
            os.environ["CELERY_BROKER_URL"] = saved_env
        _reset_producers(app)


@contextmanager
def celery_workers(count, broker_url, queue):
    """`count` real `celery worker` processes (solo pool, offline model) consuming `queue`.

    Their output goes to a temporary log file, named in the error if one fails to start.
    """

    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ANTHROPIC_API_KEY", "CELERY_EAGER")}
    env.update(
        DATABASE_URL=database_url(),
        CELERY_BROKER_URL=broker_url,
        CELERY_QUEUE=queue,
        EXTRACTION_BACKEND="offline",  # deterministic and instant: the model's time is not measured here
        DJANGO_SETTINGS_MODULE="memoryapp.settings",
        PYTHONPATH=str(benchmarks.BASE_DIR),
    )
    celery_bin = os.path.join(os.path.dirname(sys.executable), "celery")
    names = [f"{queue}-{i}@{socket.gethostname()}" for i in range(count)]
    procs = []
    log = tempfile.NamedTemporaryFile("w", prefix=f"{queue}-", suffix=".log", delete=False)  # noqa: SIM115 - closed in finally
    try:
        for name in names:
            cmd = [celery_bin, "-A", "memoryapp", "worker", "-Q", queue, "--pool=solo", "-l", "WARNING", "-n", name]
            cmd += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
            procs.append(subprocess.Popen(cmd, cwd=benchmarks.BASE_DIR, env=env, stdout=log, stderr=log))
        deadline = time.monotonic() + 120
        while len(app.control.ping(names, timeout=0.5)) < count:
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a Celery worker exited during start-up; see {log.name}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Celery workers did not answer a ping within 120 s; see {log.name}")
        yield procs
    finally:
        benchmarks.stop_processes(procs)
        log.close()
        with contextlib.suppress(Exception):  # cleanup of a scratch queue must not hide the results
            redis.Redis.from_url(broker_url).delete(queue)


@dataclass
class BenchOrg:
    org: Organization
    users: list = field(default_factory=list)

    def cleanup(self):
        """Remove every row the benchmark made (users cascade to sessions, turns, runs, facts, events)."""
        get_user_model().objects.filter(id__in=[u.id for u in self.users]).delete()
        self.org.delete()


def make_org(prefix, n_users):
    """A dedicated organisation with `n_users` API-side users."""
    org = Organization.objects.create(slug=f"{prefix}-{uuid.uuid4().hex[:8]}", name=f"Benchmark {prefix}")
    bench = BenchOrg(org)
    for i in range(n_users):
        bench.users.append(sessions.get_or_create_user(org, f"bench-{i}"))
    return bench


def prepare_sessions(bench, n, rng, progress=None):
    """Open `n` sessions round-robin over the users, each with five turns, not yet ended."""
    out = []
    for i in range(n):
        user = bench.users[i % len(bench.users)]
        s = sessions.open_session(bench.org, user)
        sessions.add_turns(s, user_turns(rng))
        out.append(s)
        if progress:
            progress.advance()
    return out


FINISHED = ("done", "failed", "skipped")


def wait_visible(ids, started, timeout=600, interval=0.002):
    """Poll until each session's extraction has committed; {id: seconds from `started[id]`}."""
    pending, seen = set(ids), {}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        done = AgentSession.objects.filter(id__in=pending, extraction_status__in=FINISHED).values_list("id", flat=True)
        now = time.monotonic()
        for sid in done:
            seen[sid] = now - started[sid]
            pending.discard(sid)
        if pending:
            time.sleep(interval)
    if pending:
        raise RuntimeError(f"{len(pending)} sessions were not extracted within {timeout} s")
    return seen


def outcome_counts(ids):
    """What the extractions wrote: created facts, confirmations, supersessions, failed runs."""
    events = Counter(FactEvent.objects.filter(session_id__in=ids).values_list("action", flat=True))
    statuses = Counter(AgentSession.objects.filter(id__in=ids).values_list("extraction_status", flat=True))
    return {
        "facts_created": MemoryFact.objects.filter(source_session_id__in=ids).count(),
        "confirmed": events.get("confirmed", 0),
        "superseded": events.get("superseded", 0),
        "sessions_done": statuses.get("done", 0),
        "sessions_failed": statuses.get("failed", 0),
    }


def run_latency(bench, n, rng, progress=None):
    """End sessions one at a time and time end -> facts visible (an idle worker, no queue)."""
    prepared = prepare_sessions(bench, n, rng)
    latencies = []
    for s in prepared:
        started = {s.id: time.monotonic()}
        sessions.end_session(s)  # autocommit: the task is published right here
        latencies.append(wait_visible([s.id], started)[s.id])
        if progress:
            progress.advance()
    return latencies, [s.id for s in prepared]


def run_burst(bench, n, rng, progress=None):
    """End `n` sessions back to back and wait for all: throughput, and latency including the queue."""
    prepared = prepare_sessions(bench, n, rng, progress)
    started = {}
    t0 = time.monotonic()
    for s in prepared:
        started[s.id] = time.monotonic()
        sessions.end_session(s)
    seen = wait_visible([s.id for s in prepared], started)
    elapsed = max(started[sid] + v for sid, v in seen.items()) - t0
    return elapsed, list(seen.values()), [s.id for s in prepared]


# --- store_fact alone -----------------------------------------------------------------


class SqlTimer:
    """connection.execute_wrapper that adds each statement's time to a bucket named by what it does."""

    def __init__(self):
        self.buckets = Counter()

    @staticmethod
    def bucket(sql):
        s = sql.lstrip().upper()
        if "PG_ADVISORY_XACT_LOCK" in s:
            return "lock"
        if "<=>" in sql:
            return "neighbours"
        if "MEMORYAPP_FACTEVENT" in s and s.startswith("INSERT"):
            return "events"
        if s.startswith(("INSERT", "UPDATE", "DELETE")):
            return "writes"
        if s.startswith(("SAVEPOINT", "RELEASE", "ROLLBACK", "COMMIT", "BEGIN")):
            return "transaction"
        return "other_reads"

    def __call__(self, execute, sql, params, many, context):
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.buckets[self.bucket(sql)] += time.perf_counter() - t


def store_fact_texts(rng, n):
    """Fact texts in the stored style, with repeats and changed values so verdicts happen."""
    makers = [
        lambda: f"The user lives in {rng.choice(CITIES)}.",
        lambda: f"The user's code editor is {rng.choice(EDITORS)}.",
        lambda: f"The user works as a {rng.choice(JOBS)}.",
        lambda: f"The user's favourite language is {rng.choice(LANGUAGES)}.",
        lambda: f"The user prefers {rng.choice(STYLES)}.",
        lambda: f"The user is {rng.choice(GOALS)}.",
        lambda: f"The user's team uses {rng.choice(DATABASES)} for everything.",
        lambda: f"The user enjoys {rng.choice(['hiking', 'chess', 'baking', 'cycling', 'jazz'])} at weekends.",
    ]
    kinds = ["profile", "profile", "profile", "preference", "preference", "goal", "profile", "preference"]
    out = []
    for _ in range(n):
        i = rng.randrange(len(makers))
        out.append((makers[i](), kinds[i]))
    return out


def run_store_fact(bench, n, rng, progress=None):
    """Time store_fact per fact with the model's time taken out; count model calls per fact."""

    offline = backends.OfflineBackend()
    calls = {"n": 0, "seconds": 0.0}

    def judge(new_text, old_texts):
        t = time.perf_counter()
        try:
            return offline.verdicts(new_text, old_texts)
        finally:
            calls["n"] += 1
            calls["seconds"] += time.perf_counter() - t

    rows = []
    timer = SqlTimer()
    texts = store_fact_texts(rng, n)
    with connection.execute_wrapper(timer):
        for i, (text, kind) in enumerate(texts):
            user = bench.users[i % len(bench.users)]
            t0 = time.perf_counter()
            vector = embeddings.embed(text)
            t1 = time.perf_counter()
            before_calls, before_model, before_sql = calls["n"], calls["seconds"], dict(timer.buckets)
            result = writing.store(user, text, kind, judge=judge, vectors=(vector, None))
            t2 = time.perf_counter()
            model = calls["seconds"] - before_model
            rows.append(
                {
                    "embed": t1 - t0,
                    "store": (t2 - t1) - model,
                    "model_calls": calls["n"] - before_calls,
                    "neighbours": len(result.verdicts),
                    "outcome": result.outcome,
                    "sql": {k: timer.buckets[k] - before_sql.get(k, 0.0) for k in timer.buckets},
                }
            )
            if progress:
                progress.advance()
    return rows


def summarise_store_fact(rows):
    """Percentiles, mean SQL time per part, outcomes and model calls per fact."""
    n = len(rows)
    parts = Counter()
    for r in rows:
        parts.update(r["sql"])
    no_neighbour = [r for r in rows if r["neighbours"] == 0]
    with_neighbour = [r for r in rows if r["neighbours"] > 0]
    return {
        "facts": n,
        "embed": benchmarks.percentiles(r["embed"] for r in rows),
        "store_fact_without_model": benchmarks.percentiles(r["store"] for r in rows),
        "store_fact_plus_embed": benchmarks.percentiles(r["store"] + r["embed"] for r in rows),
        "sql_mean_ms": {k: round(v / n * 1000, 3) for k, v in sorted(parts.items())},
        "outcomes": dict(Counter(r["outcome"] for r in rows)),
        "model_calls_per_fact": round(sum(r["model_calls"] for r in rows) / n, 3) if n else None,
        "max_model_calls_for_one_fact": max((r["model_calls"] for r in rows), default=0),
        "facts_without_neighbour": len(no_neighbour),
        "model_calls_when_no_neighbour": sum(r["model_calls"] for r in no_neighbour),
        "facts_with_neighbour": len(with_neighbour),
        "model_calls_when_neighbour": sum(r["model_calls"] for r in with_neighbour),
    }

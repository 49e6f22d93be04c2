"""SIGTERM stops the Celery worker, started the way `make run` starts it, within 10 s."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import BASE_DIR, wait_for, worker_database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_worker_stops_within_ten_seconds_of_sigterm(tmp_path):
    # A fresh clone's broker: no REDIS_URL, so kombu's filesystem transport under the data folder.
    dropped = ("CELERY_BROKER_URL", "REDIS_URL", "ANTHROPIC_API_KEY", "CELERY_EAGER")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(DATABASE_URL=worker_database_url(), MEMORYAPP_DATA_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    celery = os.path.join(os.path.dirname(sys.executable), "celery")
    log = tmp_path / "worker.log"
    # The command scripts/run uses (log level info here, to see "ready").
    cmd = [celery, "-A", "memoryapp", "worker", "--loglevel=info", "--concurrency=2", "-Q", "shutdown-test"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=BASE_DIR, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: b"ready." in log.read_bytes() or proc.poll() is not None, timeout=120, message="worker ready")
        assert proc.poll() is None, log.read_text()
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < 10, f"the worker took {took:.1f}s to stop after SIGTERM"
    assert "Warm shutdown" in log.read_text()

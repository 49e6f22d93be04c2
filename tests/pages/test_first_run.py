"""The first run is the product: `scripts/run` (what `make run` runs) serves styled pages and the API
docs with DEBUG off, seeds the demo idempotently, and stops everything on Ctrl-C within 10 s."""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from memoryapp import embeddings
from memoryapp.models import ApiKey
from tests.conftest import BASE_DIR, wait_for, worker_database_url

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUN = os.path.join(BASE_DIR, "scripts", "run")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def app_env(tmp_path, port):
    """The environment of a fresh clone (no DEBUG, no broker, no overrides), on the test database."""
    dropped = ("DEBUG", "STATIC_MANIFEST", "PYTEST_VERSION", "CELERY_BROKER_URL", "REDIS_URL")
    dropped += ("ANTHROPIC_API_KEY", "CELERY_EAGER")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        DATABASE_URL=worker_database_url(),
        MEMORYAPP_DATA_DIR=str(tmp_path / "data"),
        BIN=os.path.dirname(sys.executable),
        PORT=str(port),
        CELERY_QUEUE=f"first-run-{port}",
        PYTHONUNBUFFERED="1",
    )
    return env


def healthy(url):
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def running_app(tmp_path):
    """`scripts/run` in its own process group (as a terminal runs it); yields (url, log path, process)."""
    port = free_port()
    log = tmp_path / "run.log"
    # The quantized embedding model is built once per test run (test_foundation tests the build); a fresh
    # clone's first run would build it here too, in seconds of CPU the test does not need to spend again.
    shutil.copytree(embeddings.quantized_model_file().parent, tmp_path / "data" / "models")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [RUN],
            cwd=BASE_DIR,
            env=app_env(tmp_path, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: healthy(url) or (proc.poll() is not None and pytest.fail(log.read_text())),
            timeout=240,
            message="scripts/run to serve /healthz",
        )
        yield url, log, proc
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_a_taken_port_is_said_before_anything_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run(
            [RUN], cwd=BASE_DIR, env=app_env(tmp_path, port), capture_output=True, text=True, timeout=60
        )

    assert done.returncode != 0
    assert time.monotonic() - started < 10
    said = done.stdout + done.stderr
    assert f"Port {port} is in use." in said
    assert re.search(r"`PORT=\d+ make run`", said), said
    # Nothing started: no data folder, no migration, no demo, no Celery.
    assert not (tmp_path / "data").exists()
    assert "Demo data" not in said and "celery" not in said.lower()


def test_make_run_serves_the_styled_product_and_stops_on_ctrl_c(running_app, browser, tmp_path):
    url, log, proc = running_app
    wait_for(lambda: "memoryapp is running at" in log.read_text(), timeout=30, message="the sign-ins box")
    printed = log.read_text()
    # The sign-ins come last, in a box, after the server is up; the worker and beat print no banner.
    lines = printed.strip().splitlines()
    borders = [i for i, line in enumerate(lines) if re.fullmatch(r"\+-+\+", line)]
    assert len(borders) >= 2 and borders[-1] == len(lines) - 1, printed
    box = lines[borders[-2] : borders[-1] + 1]
    assert any("demo / " in line for line in box) and any("mem_" in line for line in box)
    assert "is running at" in box[-2]
    assert "celery@" not in printed and "[config]" not in printed and "[queues]" not in printed
    key = re.search(r"(mem_[A-Za-z0-9_-]{20,})", printed).group(1)

    context = browser.new_context(base_url=url, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto("/login/")
    page.fill("#id_username", "demo")
    page.fill("#id_password", re.search(r"demo / (\S+)", printed).group(1))
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/me/"))
    # The stylesheet loaded from a hashed, compressed file: the page uses its font and header colours.
    href = page.locator("link[rel=stylesheet]").first.get_attribute("href")
    assert re.search(r"/static/app\.[0-9a-f]{12}\.css$", href), href
    font = page.evaluate("getComputedStyle(document.documentElement).fontFamily")
    assert "system-ui" in font
    header_border = page.evaluate("getComputedStyle(document.querySelector('header.top')).borderBottomStyle")
    assert header_border == "solid"
    # htmx loaded (from our own static files) and is active on the page.
    assert page.evaluate("typeof window.htmx") == "object"
    # The demo has something real on the first page.
    assert page.locator(".fact").count() >= 3

    # DEBUG is off: an unknown page is the site's own 404, not Django's yellow debug page.
    response = page.goto("/no-such-page/")
    assert response.status == 404
    assert page.locator("header.top").count() == 1
    assert "Page not found" in page.content()

    # The API docs render (Swagger UI draws the spec's title from local assets, no CDN).
    page.goto("/api/docs")
    page.wait_for_selector(".swagger-ui .info .title", timeout=30_000)
    assert "memoryapp agent API" in page.locator(".swagger-ui .info .title").inner_text()
    context.close()

    # The printed key works for the agent API.
    request = urllib.request.Request(url + "/api/v1/users/demo-user/export", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200
        assert b"Valkey" in r.read()

    # Ctrl-C (SIGINT to the whole foreground process group) stops web, worker and beat within 10 s.
    started = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    while time.monotonic() - started < 15:
        proc.poll()  # reap the script itself, so a finished script is not counted as a live zombie
        if not group_alive(proc.pid):
            break
        time.sleep(0.1)
    took = time.monotonic() - started
    left = subprocess.run(["ps", "-o", "pid,ppid,cmd", "-g", str(proc.pid)], capture_output=True, text=True).stdout
    assert not group_alive(proc.pid), f"still running {took:.1f}s after Ctrl-C:\n{left}\n{log.read_text()[-1500:]}"
    assert took < 10, f"Ctrl-C took {took:.1f}s"
    assert "Stopped web, worker and beat." in log.read_text()

    # A second run reuses the demo key instead of minting another one.
    active_before = ApiKey.objects.active().count()
    rerun = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "python"), "manage.py", "seed_demo"],
        cwd=BASE_DIR,
        env=app_env(tmp_path, 0),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert key in rerun.stdout
    assert ApiKey.objects.active().count() == active_before == 1

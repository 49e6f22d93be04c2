"""Issue 42 part 5: a request's body is refused before it is read (413), and a request whose headers or
body stall is answered 408 and closed. The ASGI wrapper in memoryapp/asgi.py covers the API, the pages
and /mcp/; the header timeout is uvicorn's protocol class from memoryapp/request_limits.py."""

import asyncio
import json
import os
import socket
import time

import pytest

from bench.common import stop_processes
from memoryapp import sessions
from tests.conftest import call_asgi, start_uvicorn, worker_database_url

LIMIT = 1_048_576  # settings.DATA_UPLOAD_MAX_MEMORY_SIZE (MAX_REQUEST_BYTES)
PATHS = ("/api/v1/sessions", "/mcp/", "/login/")


def _call(path, headers, receive):
    """POST through the ASGI application; returns (status, headers, JSON body)."""
    status, response_headers, body = call_asgi("POST", path, headers, receive)
    return status, response_headers, json.loads(body)


@pytest.fixture
def no_key_lookups(monkeypatch):
    def looked_up(token):
        raise AssertionError("a key was looked up in the database before the body was refused")

    monkeypatch.setattr(sessions, "authenticate_key", looked_up)


@pytest.mark.parametrize("path", PATHS)
def test_a_declared_30_mb_body_is_refused_before_a_byte_is_read_or_a_key_looked_up(path, no_key_lookups):
    reads = []

    async def receive():
        reads.append(1)
        return {"type": "http.request", "body": b"x" * 65536, "more_body": True}

    headers = [(b"content-length", b"31457280"), (b"authorization", b"Bearer mem_madeup")]
    status, response_headers, body = _call(path, headers, receive)
    assert status == 413 and body["error"]["code"] == "body_too_large" and str(LIMIT) in body["error"]["message"]
    assert response_headers[b"connection"] == b"close"
    assert reads == []


@pytest.mark.parametrize("path", ("/api/v1/sessions", "/login/"))
def test_a_chunked_body_is_cut_off_once_it_grows_past_the_limit(path, no_key_lookups):
    reads = []

    async def receive():  # a client streaming forever, without a Content-Length
        reads.append(1)
        return {"type": "http.request", "body": b"x" * 65536, "more_body": True}

    status, _, body = _call(path, [(b"authorization", b"Bearer mem_madeup")], receive)
    assert status == 413 and body["error"]["code"] == "body_too_large"
    assert len(reads) == LIMIT // 65536 + 1  # the chunk that crossed the limit was the last one read


def test_a_body_of_exactly_the_limit_is_read_whole_and_reaches_django():
    chunks = [b"x" * (LIMIT // 16)] * 16
    reads = []

    async def receive():
        if len(reads) == len(chunks):  # the body is complete; the client stays connected meanwhile
            await asyncio.Event().wait()
        reads.append(1)
        return {"type": "http.request", "body": chunks[len(reads) - 1], "more_body": len(reads) < len(chunks)}

    status, _, body = _call("/api/v1/no-such-route", [(b"content-length", str(LIMIT).encode())], receive)
    assert status == 404 and body["error"]["code"] == "not_found"  # Django's answer, after the whole body
    assert len(reads) == 16


# --- a real uvicorn, raw sockets on loopback -------------------------------------------------


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker):
    """One server for the module's tests (it takes seconds to start); none of them writes to the database."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    with django_db_blocker.unblock():
        url = worker_database_url()
    env.update(
        DATABASE_URL=url,
        CELERY_BROKER_URL="memory://",
        EXTRACTION_BACKEND="offline",
        REQUEST_HEADER_TIMEOUT="1",
        REQUEST_BODY_TIMEOUT="1",
    )
    proc, base = start_uvicorn(
        env, "--http", "memoryapp.request_limits:HeaderTimeoutHttpToolsProtocol", "--loop", "uvloop"
    )
    yield int(base.rsplit(":", 1)[1])
    stop_processes([proc], timeout=10)


def _exchange(port, data, wait=10):
    """Send `data`, then read until the server closes (or `wait` s pass); returns (bytes, seconds)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        sock.sendall(data)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except TimeoutError:
            got += b"<still open>"
    return got, time.monotonic() - started


def test_stalled_headers_are_answered_408_and_closed(server):
    got, seconds = _exchange(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    assert got.startswith(b"HTTP/1.1 408") and b"request_timeout" in got and not got.endswith(b"<still open>")
    assert seconds < 5
    idle, seconds = _exchange(server, b"")  # a connection that never says anything is closed as well
    assert not idle.endswith(b"<still open>") and seconds < 5


def test_a_stalled_body_is_answered_408_and_closed(server):
    head = b"POST /api/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    got, seconds = _exchange(server, head + b'Content-Length: 100\r\n\r\n{"user": ')
    assert got.startswith(b"HTTP/1.1 408") and b"request_timeout" in got and not got.endswith(b"<still open>")
    assert seconds < 5


def test_a_declared_30_mb_body_is_refused_at_once_over_the_wire(server):
    head = b"POST /api/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer mem_madeup\r\n"
    got, seconds = _exchange(server, head + b"Content-Length: 31457280\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 413") and b"body_too_large" in got and not got.endswith(b"<still open>")
    assert seconds < 2


def test_a_body_still_arriving_never_reaches_django_so_no_thread_waits_on_the_client(settings):
    """Django's views run in a fixed pool of threads: the body is read whole first, on the event loop."""
    from django.core.signals import request_started

    settings.REQUEST_BODY_TIMEOUT = 0.5
    started = []
    reads = []

    def seen(**kwargs):
        started.append(1)

    async def receive():  # one chunk, then a client that stops sending
        reads.append(1)
        if len(reads) > 1:
            await asyncio.Event().wait()
        return {"type": "http.request", "body": b'{"user": ', "more_body": True}

    request_started.connect(seen)
    try:
        status, _, body = _call("/api/v1/sessions", [(b"content-length", b"100")], receive)
    finally:
        request_started.disconnect(seen)
    assert status == 408 and body["error"]["code"] == "request_timeout"
    assert started == []  # no view, middleware or thread of Django's ever saw the request

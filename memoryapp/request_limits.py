"""Limits on what one HTTP request may cost before the app looks at it: body size, body time, header time.

`guard_body` wraps the whole ASGI app (API, pages and /mcp/): a declared `Content-Length` over
DATA_UPLOAD_MAX_MEMORY_SIZE is refused with 413 before a byte of the body is read and before any
key check; a body sent without a length (chunked) is cut off with 413 as soon as it grows past the
limit; and a body that stops arriving gets 408 after REQUEST_BODY_TIMEOUT seconds. The refusals
close the connection.

uvicorn has no timeout for a request's headers (its keep-alive timeout starts only after a
response): `HeaderTimeoutHttpToolsProtocol` closes a connection whose headers are not complete after
REQUEST_HEADER_TIMEOUT seconds. Run uvicorn with `--http memoryapp.request_limits:HeaderTimeoutHttpToolsProtocol`
(scripts/run does).
"""

import asyncio
import json
import socket
import time

from django.conf import settings
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

DISCONNECT = {"type": "http.disconnect"}


def _error_body(code, message):
    # The agent API's error shape, so an API client reads every refusal the same way.
    return json.dumps({"error": {"code": code, "message": message, "field": None}}).encode()


def _declared_length(scope):
    """The request's Content-Length as an int, None when absent, -1 when unreadable."""
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return -1
    return None


class _Refusal:
    """Sends one error response in place of the app's, and swallows whatever the app sends after it."""

    def __init__(self, send):
        self.send = send
        self.started = False  # the app (or we) began a response
        self.refused = False

    async def app_send(self, message):
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)

    async def refuse(self, status, code, message):
        if self.started:
            return
        self.started = self.refused = True
        headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": _error_body(code, message)})


def guard_body(app):
    """The ASGI app `app` behind the body limits (size and time) of every HTTP request."""

    async def guarded(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        refusal = _Refusal(send)
        length = _declared_length(scope)
        if length is not None and (length < 0 or length > limit):
            # Decided on the header alone: nothing read, nothing spooled, no key looked up.
            if length < 0:
                return await refusal.refuse(400, "bad_request", "The Content-Length header is not a number.")
            return await refusal.refuse(413, "body_too_large", f"The request body is limited to {limit} bytes.")
        deadline = time.monotonic() + settings.REQUEST_BODY_TIMEOUT
        state = {"received": 0, "complete": False}

        async def bounded_receive():
            if state["complete"]:
                # After the body only a disconnect can come; the app may wait for it as long as it runs.
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                await refusal.refuse(408, "request_timeout", "The request body did not arrive in time.")
                return DISCONNECT
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                state["complete"] = not message.get("more_body", False)
                if state["received"] > limit:
                    await refusal.refuse(413, "body_too_large", f"The request body is limited to {limit} bytes.")
                    return DISCONNECT  # the app stops reading as if the client had gone
            return message

        return await app(scope, bounded_receive, refusal.app_send)

    return guarded


def whole_body(app):
    """The ASGI app `app`, called only once the request's whole body has arrived, given in one message.

    Why: Django's views run in a fixed pool of threads (memoryapp/asgi.py), and a thread must never
    wait on a slow client. The body is read here on the event loop, under guard_body's size and time
    limits; when those refuse it (or the client goes), `app` is never called.
    """

    async def buffered(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None  # the client went, or guard_body has answered 408 / 413
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def replay():
            return pending.pop() if pending else await receive()

        return await app(scope, replay, send)

    return buffered


class HeaderTimeoutHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (its C parser), closing a connection whose request headers take too
    long to arrive.

    It also turns Nagle's algorithm off: with --workers, uvicorn makes its listening socket without
    naming TCP, so asyncio never sets TCP_NODELAY, and a keep-alive response waited on the client's
    delayed ACK (about 40 ms a request, measured with bench_pages at one client).
    """

    _header_timer = None

    def connection_made(self, transport):
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data):
        super().data_received(data)
        if self._awaiting_headers():
            self._arm_header_timer()  # a no-op when armed: the deadline counts from the first byte
        else:
            self._cancel_header_timer()

    def on_response_complete(self):
        # Until the next request's first byte the keep-alive timeout applies, not ours.
        self._cancel_header_timer()
        super().on_response_complete()

    def connection_lost(self, exc):
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _awaiting_headers(self):
        return self.cycle is None or self.cycle.response_complete

    def _arm_header_timer(self):
        if self._header_timer is None and not self.transport.is_closing():
            self._header_timer = self.loop.call_later(settings.REQUEST_HEADER_TIMEOUT, self._headers_too_late)

    def _cancel_header_timer(self):
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_late(self):
        self._header_timer = None
        if self._awaiting_headers() and not self.transport.is_closing():
            body = _error_body("request_timeout", "The request headers did not arrive in time.")
            head = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            self.transport.write(head + b"content-length: %d\r\n\r\n" % len(body) + body)
            self.transport.close()

"""ASGI entry point: the MCP server at /mcp/ beside Django, in one process.

Why an ASGI router and not a Django view: the official SDK's streamable-HTTP transport is an ASGI
(Starlette) app with a lifespan that runs its session manager; mounting it next to Django's own
ASGI handler uses the SDK as designed, with no re-implementation of its transport. Serve both with

    uvicorn memoryapp.asgi:application --host 127.0.0.1 --port 8000
    gunicorn memoryapp.asgi:application -k uvicorn.workers.UvicornWorker   # production

Every HTTP request first passes the body limits of memoryapp.request_limits (413 / 408 before the
app or a key check sees it); run uvicorn with `--http memoryapp.request_limits:HeaderTimeoutHttpToolsProtocol`
for the header timeout as well.

Why Django runs as WSGI in a pool of threads here, not as Django's ASGI handler: every view is
synchronous, and the ASGI handler gave each request a new thread and switched between threads and the
event loop around the middleware that can run either way. a2wsgi hands each request to one of
WEB_THREADS reused threads; the server's own CPU per /healthz fell from 1.5 to 0.5 ms
(docs/benchmarks.md, "Pages").

The WSGI entry point (memoryapp.wsgi, runserver) keeps serving everything but /mcp/.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryapp.settings")

from a2wsgi import WSGIMiddleware  # noqa: E402
from asgiref.sync import sync_to_async  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402

django_wsgi = get_wsgi_application()

from memoryapp import embeddings, judge_model  # noqa: E402

# Why load the models before the first request: a cold process loaded MiniLM and the judge inside its
# first requests, each holding a pooled connection, and a burst then waited past the pool's timeout
# (22 of 2,500 valid calls got 503 in `manage.py drill burst`).
embeddings.warm()
judge_model.model()

from memoryapp import sessions  # noqa: E402  (models load after django.setup())
from memoryapp.mcp_server import fresh_connection, http_app  # noqa: E402
from memoryapp.request_limits import guard_body, whole_body  # noqa: E402

if settings.DEBUG:
    # As runserver does: static files straight from the app when debugging.
    from django.contrib.staticfiles.handlers import StaticFilesHandler

    django_wsgi = StaticFilesHandler(django_wsgi)
django_app = whole_body(WSGIMiddleware(django_wsgi, workers=settings.WEB_THREADS))

mcp_app = http_app()
UNAUTHORIZED = (
    b'{"error": {"code": "unauthorized", "message": '
    b'"Send a valid, unrevoked API key as \'Authorization: Bearer <key>\'.", "field": null}}'
)


def _bearer(scope):
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            kind, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if kind.lower() == "bearer" else ""
    return ""


async def _unauthorized(send):
    headers = [(b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="memoryapp"')]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": UNAUTHORIZED})


async def route(scope, receive, send):
    """/mcp and /mcp/… go to the MCP app (after a key check), the lifespan to it too, the rest to Django."""
    if scope["type"] == "lifespan":
        return await mcp_app(scope, receive, send)
    path = scope.get("path", "")
    if scope["type"] == "http" and (path == "/mcp" or path.startswith("/mcp/")):
        # A request without a live key stops here with the API's 401; each tool checks the key again
        # (scopes, rate limit), so a key revoked mid-session stops at its next call.
        # fresh_connection hands the thread's pooled connection back when the check is done.
        if await sync_to_async(fresh_connection(sessions.authenticate_key))(_bearer(scope)) is None:
            return await _unauthorized(send)
        return await mcp_app({**scope, "path": "/mcp/", "raw_path": b"/mcp/"}, receive, send)
    return await django_app(scope, receive, send)


application = guard_body(route)

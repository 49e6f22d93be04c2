"""The agent API (django-ninja): the API object, key auth and error handlers. OpenAPI at /api/docs.

One module per resource registers its routes on a router; they are mounted at the bottom.
"""

import logging

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from memoryapp.api import facts, recall, sessions, users
from memoryapp.api.auth import ApiKeyAuth
from memoryapp.api.errors import ApiError

log = logging.getLogger(__name__)


DESCRIPTION = """Long-term memory for LLM agents. An agent opens a session for a person (its own id for
them, `user`), appends the turns, and ends it; memoryapp extracts a few durable facts from it. At the next
session `POST /v1/prompt` (or `/v1/recall`) returns the system prompt with a small memory block. Facts can
also be listed, written, corrected and forgotten directly.

**Authentication.** Every call sends an organisation's API key: `Authorization: Bearer mem_…` (keys are made
on the organisation's *API keys* page or with `manage.py create_api_key`). A key reaches only the people its
organisation's agents remember.

**Scopes.** Each key carries some of `read` (recall, prompt, list and read facts, export), `write` (sessions,
turns, remember, correct, forget), `erase` (delete a person) and `portal` (send a person a link to their
memory). A route's description names its scope; a key without it gets 403 `forbidden`.

**Errors** are always JSON with a 4xx or 5xx status: `{"error": {"code": "not_found", "message": "…",
"field": null}}`; `field` names the offending input on 422 `invalid`. A 429 or 503 carries `Retry-After`.
"""


class MemoryApi(NinjaAPI):
    """The agent API, its OpenAPI schema built once per set of arguments (one, for /api/openapi.json)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._schemas = {}

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        # Building it walks every pydantic model (123 ms of CPU a request on E3; 1 ms served built), and the
        # routes never change once the URLconf is loaded: /api/openapi.json was the cheapest request to flood.
        key = (path_prefix, tuple(sorted((path_params or {}).items())))
        if key not in self._schemas:
            self._schemas[key] = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        return self._schemas[key]


api = MemoryApi(
    title="memoryapp agent API",
    version="1",
    description=DESCRIPTION,
    urls_namespace="api",
    auth=ApiKeyAuth(),
    docs_url="/docs",
)


def error_response(request, status, code, message, field=None, headers=None):
    response = api.create_response(
        request, {"error": {"code": code, "message": message, "field": field}}, status=status
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


@api.exception_handler(ApiError)
def _api_error(request, exc):
    return error_response(request, exc.status, exc.code, exc.message, exc.field, exc.headers)


@api.exception_handler(AuthenticationError)
def _auth_error(request, exc):
    return error_response(
        request, 401, "unauthorized", "Send a valid, unrevoked API key as 'Authorization: Bearer <key>'."
    )


# What a field's pattern allows, in words (the API docs show the pattern itself).
PATTERN_WORDS = {
    "user": "an id is 1 to 128 characters, without control or invisible characters or '/', and not '.' or '..'",
    "q": "NUL characters are not allowed",
}


@api.exception_handler(ValidationError)
def _validation_error(request, exc):
    first = exc.errors[0] if exc.errors else {}
    loc = [str(p) for p in first.get("loc", []) if p not in ("body", "payload", "query", "path")]
    message = first.get("msg", "invalid input")
    if first.get("type") == "json_invalid" or "JSON" in message:
        return error_response(request, 400, "malformed_json", "The request body is not valid JSON.")
    field = ".".join(loc) or None
    if first.get("type") == "extra_forbidden":
        message = "not a field of this request: check its spelling (field names are case-sensitive)"
    elif first.get("type") == "string_pattern_mismatch":  # pydantic's words quote the whole pattern
        message = PATTERN_WORDS.get(field, "not in the form this field takes (see the API docs)")
    return error_response(request, 422, "invalid", f"{field}: {message}" if field else message, field)


@api.exception_handler(HttpError)
def _http_error(request, exc):
    if exc.status_code == 400 and str(exc).startswith("Cannot parse request body"):
        return error_response(request, 400, "malformed_json", "The request body is not valid JSON.")
    code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}.get(
        exc.status_code, "error"
    )
    return error_response(request, exc.status_code, code, str(exc))


@api.exception_handler(RequestDataTooBig)
def _body_too_big(request, exc):
    # Django raises this when ninja first reads request.body; left alone it becomes an HTML 400.
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return error_response(request, 413, "body_too_large", f"The request body is limited to {limit} bytes.")


@api.exception_handler(Http404)
def _not_found(request, exc):
    return error_response(request, 404, "not_found", "Not found.")


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _database_unavailable(request, exc):
    # The database went away (restart, failover, dropped connection). Each write is one transaction,
    # so nothing was half-stored; the caller can safely retry the same request.
    log.warning("database unavailable for %s %s: %s", request.method, request.path, exc)
    return error_response(
        request,
        503,
        "unavailable",
        "The database is unavailable; nothing from this request was stored. Retry shortly.",
        headers={"Retry-After": "5"},
    )


@api.exception_handler(Exception)
def _unexpected(request, exc):
    log.exception("unhandled error in the agent API: %s %s", request.method, request.path)
    return error_response(request, 500, "internal_error", "Something went wrong on our side; nothing was stored.")


api.add_router("/v1/sessions", sessions.router)
api.add_router("/v1", recall.router)
api.add_router("/v1/users", users.router)
api.add_router("/v1", facts.router)

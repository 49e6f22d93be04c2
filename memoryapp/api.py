"""The agent API (django-ninja): sessions, turns, recall and prompt assembly. OpenAPI at /api/docs."""

import logging
import uuid
from datetime import datetime
from typing import Literal

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest
from ninja import Field, NinjaAPI, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from memoryapp import ratelimit, sessions
from memoryapp import recall as recalling
from memoryapp.models import AgentSession, FactEvent, RecallLog

log = logging.getLogger(__name__)


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request, token):
        api_key = sessions.authenticate_key(token)
        if api_key is not None:
            allowed, retry_after = ratelimit.hit(f"api-key:{api_key.id}", settings.MEMORY["API_RATE_PER_MINUTE"])
            if not allowed:
                raise ApiError(
                    429,
                    "rate_limited",
                    f"Too many requests for this API key; retry in {retry_after} s.",
                    headers={"Retry-After": str(retry_after)},
                )
            request.api_key = api_key
            request.org = api_key.org
        return api_key


api = NinjaAPI(
    title="memoryapp agent API",
    version="1",
    urls_namespace="api",
    auth=ApiKeyAuth(),
    docs_url="/docs",
)


class ApiError(Exception):
    def __init__(self, status, code, message, field=None, headers=None):
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field
        self.headers = headers or {}


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


@api.exception_handler(ValidationError)
def _validation_error(request, exc):
    first = exc.errors[0] if exc.errors else {}
    loc = [str(p) for p in first.get("loc", []) if p not in ("body", "payload", "query", "path")]
    message = first.get("msg", "invalid input")
    if first.get("type") == "json_invalid" or "JSON" in message:
        return error_response(request, 400, "malformed_json", "The request body is not valid JSON.")
    field = ".".join(loc) or None
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


# --- schemas ----------------------------------------------------------------

ExternalUser = Field(..., min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")


class ErrorBody(Schema):
    code: str
    message: str
    field: str | None = None


class ErrorOut(Schema):
    error: ErrorBody


class SessionIn(Schema):
    user: str = ExternalUser
    memory: Literal["on", "off"] = "on"


class SessionOut(Schema):
    id: uuid.UUID
    user: str
    memory: Literal["on", "off"]
    started_at: datetime


class TurnIn(Schema):
    role: Literal["user", "assistant", "tool"]
    # Enforced by _clean_content (for its clearer errors); declared here so the spec says so too.
    content: str = Field(
        ...,
        description="Not blank, no NUL characters, at most MEMORY_MAX_TURN_BYTES of UTF-8 (32 KiB by default).",
        json_schema_extra={"pattern": r"^[^\u0000]*\S[^\u0000]*$"},
    )


class TurnsIn(Schema):
    turns: list[TurnIn] = Field(
        ..., description="1 to MEMORY_MAX_TURNS_PER_CALL turns (100 by default).", json_schema_extra={"minItems": 1}
    )


class AcceptedOut(Schema):
    accepted: int


class QueuedOut(Schema):
    status: str


class SessionStatusOut(Schema):
    id: uuid.UUID
    user: str
    memory: Literal["on", "off"]
    started_at: datetime
    last_activity_at: datetime
    ended: bool
    ended_at: datetime | None
    end_reason: str | None
    extraction_status: str
    turns: int
    facts_written: list[uuid.UUID]
    facts_confirmed: list[uuid.UUID]
    facts_superseded: list[uuid.UUID]


class RecallIn(Schema):
    session: uuid.UUID
    message: str = Field("", max_length=32 * 1024)
    refresh: bool = Field(False, strict=True)


class RecalledFact(Schema):
    id: uuid.UUID
    text: str
    kind: str
    scope: str
    tier: str
    score: float | None


class RecallOut(Schema):
    block: str
    facts: list[RecalledFact]
    cached: bool


class PromptIn(Schema):
    session: uuid.UUID
    message: str = Field("", max_length=32 * 1024)
    instructions: str = Field("", max_length=200_000)
    tool_guidance: str = Field("", max_length=200_000)
    refresh: bool = Field(False, strict=True)


class CacheControl(Schema):
    type: Literal["ephemeral"]


class SystemBlock(Schema):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None  # only on the last stable block


class PromptOut(Schema):
    system: list[SystemBlock]


class InjectedOut(Schema):
    fact: uuid.UUID
    text: str
    kind: str
    scope: str
    tier: str
    score: float | None
    recalled_at: datetime
    in_current_block: bool  # False for what an earlier block held before a refresh


class SessionRecallOut(Schema):
    session: uuid.UUID
    memory: Literal["on", "off"]
    block: str | None
    block_at: datetime | None
    injected: list[InjectedOut]


# --- helpers ----------------------------------------------------------------


def get_session(request, session_id):
    """The session if it belongs to the key's organisation; 404 for anything else."""
    session = (
        AgentSession.objects.select_related("user__memory_settings", "org")
        .filter(id=session_id, org=request.org)
        .first()
    )
    if session is None:
        raise ApiError(404, "not_found", "No such session for this API key.")
    return session


def _external(session):
    return sessions.external_id_of(session.user, session.org) or ""


def _clean_content(content, index):
    field = f"turns.{index}.content"
    if "\x00" in content:
        raise ApiError(422, "invalid", f"{field}: NUL characters are not allowed", field)
    if not content.strip():
        raise ApiError(422, "empty_turn", f"{field}: a turn cannot be empty", field)
    limit = settings.MEMORY["MAX_TURN_BYTES"]
    if len(content.encode()) > limit:
        raise ApiError(413, "turn_too_large", f"{field}: a turn is limited to {limit} bytes (UTF-8)", field)
    return content


# --- sessions -----------------------------------------------------------------

ERRORS = {
    **{code: ErrorOut for code in (400, 401, 404, 409, 413, 422, 429)},
    503: ErrorOut,  # the database is unavailable: nothing was stored, retry
}


@api.post("/v1/sessions", response={201: SessionOut, **ERRORS}, tags=["sessions"])
def create_session(request: HttpRequest, payload: SessionIn):
    """Open a session for the agent's user (created on first use)."""
    user = sessions.get_or_create_user(request.org, payload.user)
    session = sessions.open_session(request.org, user, payload.memory)
    return Status(
        201, {"id": session.id, "user": payload.user, "memory": session.memory, "started_at": session.started_at}
    )


@api.post("/v1/sessions/{session_id}/turns", response={202: AcceptedOut, **ERRORS}, tags=["sessions"])
def add_turns(request: HttpRequest, session_id: uuid.UUID, payload: TurnsIn):
    """Append turns; the batch is stored whole or not at all."""
    session = get_session(request, session_id)
    limit = settings.MEMORY["MAX_TURNS_PER_CALL"]
    if not payload.turns:
        raise ApiError(422, "invalid", "turns: send at least one turn", "turns")
    if len(payload.turns) > limit:
        raise ApiError(413, "too_many_turns", f"turns: at most {limit} turns per call", "turns")
    # Every turn is checked before any is stored, so a bad batch leaves nothing behind.
    turns = [(t.role, _clean_content(t.content, i)) for i, t in enumerate(payload.turns)]
    try:
        accepted = sessions.add_turns(session, turns)
    except sessions.SessionEnded:
        raise ApiError(409, "session_ended", "This session has ended; open a new one.") from None
    except sessions.TooManyTurns as exc:
        raise ApiError(413, "too_many_turns", f"turns: a session holds at most {exc.args[0]} turns", "turns") from None
    return Status(202, {"accepted": accepted})


@api.post("/v1/sessions/{session_id}/end", response={202: QueuedOut, **ERRORS}, tags=["sessions"])
def end_session(request: HttpRequest, session_id: uuid.UUID):
    """End the session; extraction runs on a worker. Calling it again is harmless."""
    session = get_session(request, session_id)
    sessions.end_session(session)
    session.refresh_from_db()
    status = "queued" if session.extraction_status in ("queued", "running", "pending") else session.extraction_status
    return Status(202, {"status": status})


@api.get("/v1/sessions/{session_id}", response={200: SessionStatusOut, **ERRORS}, tags=["sessions"])
def session_status(request: HttpRequest, session_id: uuid.UUID):
    """Memory mode, end, extraction status, and the facts the session wrote, confirmed and superseded."""
    session = get_session(request, session_id)
    events = FactEvent.objects.filter(session=session, user=session.user).values_list("action", "fact_id")
    by_action = {"created": [], "confirmed": [], "superseded": []}
    for action, fact_id in events:
        if action in by_action and fact_id not in by_action[action]:
            by_action[action].append(fact_id)
    return Status(
        200,
        {
            "id": session.id,
            "user": _external(session),
            "memory": session.memory,
            "started_at": session.started_at,
            "last_activity_at": session.last_activity_at,
            "ended": session.ended_at is not None,
            "ended_at": session.ended_at,
            "end_reason": session.end_reason or None,
            "extraction_status": session.extraction_status,
            "turns": session.turn_count,
            "facts_written": by_action["created"],
            "facts_confirmed": by_action["confirmed"],
            "facts_superseded": by_action["superseded"],
        },
    )


# --- recall -------------------------------------------------------------------


def _fact_out(selected):
    f = selected.fact
    return {
        "id": f.id,
        "text": f.text,
        "kind": f.kind,
        "scope": f.scope,
        "tier": selected.tier,
        "score": selected.score,
    }


@api.post("/v1/recall", response={200: RecallOut, **ERRORS}, tags=["recall"])
def recall(request: HttpRequest, payload: RecallIn):
    """The session's memory block: computed once per session unless `refresh` is true."""
    session = get_session(request, payload.session)
    result = recalling.recall(session, payload.message, refresh=payload.refresh)
    return Status(200, {"block": result.block, "facts": [_fact_out(s) for s in result.facts], "cached": result.cached})


# exclude_none: a block without a breakpoint must not carry "cache_control": null on the wire.
@api.post("/v1/prompt", response={200: PromptOut, **ERRORS}, tags=["recall"], exclude_none=True)
def prompt(request: HttpRequest, payload: PromptIn):
    """Anthropic system blocks: stable instructions (cache breakpoint on the last), memory last."""
    session = get_session(request, payload.session)
    result = recalling.recall(session, payload.message, refresh=payload.refresh)
    return Status(200, {"system": recalling.assemble_system(payload.instructions, payload.tool_guidance, result.block)})


@api.get("/v1/sessions/{session_id}/recall", response={200: SessionRecallOut, **ERRORS}, tags=["recall"])
def session_recall(request: HttpRequest, session_id: uuid.UUID):
    """What was injected into this session's memory block, and why (tier, score)."""
    session = get_session(request, session_id)
    logs = (
        RecallLog.objects.filter(session=session)
        .select_related("fact")
        .defer("fact__embedding")
        .order_by("created_at", "position")
    )
    return Status(
        200,
        {
            "session": session.id,
            "memory": session.memory,
            "block": session.memory_block,
            "block_at": session.memory_block_at,
            "injected": [
                {
                    "fact": log.fact_id,
                    "text": log.fact.text,
                    "kind": log.fact.kind,
                    "scope": log.fact.scope,
                    "tier": log.tier,
                    "score": log.score,
                    "recalled_at": log.created_at,
                    "in_current_block": log.created_at == session.memory_block_at,
                }
                for log in logs
            ],
        },
    )


from memoryapp.api_users import router as users_router  # noqa: E402  (routes register on import)

api.add_router("/v1/users", users_router)

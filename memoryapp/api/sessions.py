"""Agent API: open a session, append turns, end it, read its status."""

import re
import uuid

from django.conf import settings
from django.http import HttpRequest
from ninja import Header, Router, Status

from memoryapp import sessions
from memoryapp.api.auth import requires
from memoryapp.api.errors import ERRORS, ApiError
from memoryapp.api.schemas import NOT_BLANK, AcceptedOut, QueuedOut, SessionIn, SessionOut, SessionStatusOut, TurnsIn
from memoryapp.models import AgentSession, FactCandidate, FactEvent

router = Router(tags=["sessions"])


def get_session(request, session_id):
    """The session if it belongs to the key's organisation and a person it still knows; 404 for anything else.

    A session names its person, not the id: once its person unlinks that id, the org's old sessions
    would otherwise go on reading the account's memory.
    """
    session = (
        AgentSession.objects.known_to(request.org)
        .select_related("user__memory_settings", "org")
        .filter(id=session_id)
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
    if not re.fullmatch(NOT_BLANK, content):
        raise ApiError(422, "empty_turn", f"{field}: a turn cannot be empty", field)
    try:
        size = len(content.encode())
    except UnicodeEncodeError:  # a lone UTF-16 surrogate such as "\ud800" decodes from JSON but is not text
        raise ApiError(422, "invalid", f"{field}: not valid Unicode text (a lone surrogate)", field) from None
    limit = settings.MEMORY["MAX_TURN_BYTES"]
    if size > limit:
        raise ApiError(413, "turn_too_large", f"{field}: a turn is limited to {limit} bytes (UTF-8)", field)
    return content


@router.post("", response={201: SessionOut, **ERRORS})
@requires("write")
def create_session(request: HttpRequest, payload: SessionIn):
    """Open a session for the agent's user (created on first use)."""
    user = sessions.get_or_create_user(request.org, payload.user)
    session = sessions.open_session(request.org, user, payload.memory)
    return Status(
        201, {"id": session.id, "user": payload.user, "memory": session.memory, "started_at": session.started_at}
    )


@router.post("/{session_id}/turns", response={202: AcceptedOut, **ERRORS})
@requires("write")
def add_turns(
    request: HttpRequest,
    session_id: uuid.UUID,
    payload: TurnsIn,
    idempotency_key: str = Header(
        "",
        alias="Idempotency-Key",
        max_length=255,
        pattern=r"^[\x21-\x7e]*$",
        description=f"Any id of this batch (a UUID, say). A retry of one of the session's last {sessions.KEPT_BATCHES} "
        "batches with the same key and turns stores nothing twice and answers `replayed: true`; the same key with "
        "other turns is a 422.",
    ),
):
    """Append turns; the batch is stored whole or not at all. Send an Idempotency-Key to retry it safely."""
    session = get_session(request, session_id)
    limit = settings.MEMORY["MAX_TURNS_PER_CALL"]
    if not payload.turns:
        raise ApiError(422, "invalid", "turns: send at least one turn", "turns")
    if len(payload.turns) > limit:
        raise ApiError(413, "too_many_turns", f"turns: at most {limit} turns per call", "turns")
    # Every turn is checked before any is stored, so a bad batch leaves nothing behind.
    turns = [(t.role, _clean_content(t.content, i)) for i, t in enumerate(payload.turns)]
    try:
        appended = sessions.add_turns(session, turns, key=idempotency_key)
    except sessions.KeyReused:
        raise ApiError(
            422, "idempotency_key_reused", "Idempotency-Key: already used for other turns; send a new key."
        ) from None
    except sessions.SessionEnded:
        raise ApiError(409, "session_ended", "This session has ended; open a new one.") from None
    except sessions.SessionGone:
        raise ApiError(404, "not_found", "No such session for this user and API key.") from None
    except sessions.TooManyTurns as exc:
        raise ApiError(413, "too_many_turns", f"turns: a session holds at most {exc.args[0]} turns", "turns") from None
    return Status(202, appended._asdict())


@router.post("/{session_id}/end", response={202: QueuedOut, **ERRORS})
@requires("write")
def end_session(request: HttpRequest, session_id: uuid.UUID):
    """End the session; extraction runs on a worker. Calling it again is harmless."""
    session = get_session(request, session_id)
    sessions.end_session(session)
    session.refresh_from_db()
    status = "queued" if session.extraction_status in ("queued", "running", "pending") else session.extraction_status
    return Status(202, {"status": status})


@router.get("/{session_id}", response={200: SessionStatusOut, **ERRORS})
@requires("read")
def session_status(request: HttpRequest, session_id: uuid.UUID):
    """Memory mode, end, extraction status, and the facts the session wrote, confirmed and superseded, and
    those waiting for the person's word."""
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
            "facts_pending": list(
                FactCandidate.objects.pending()
                .filter(user=session.user, source_session=session)
                .order_by("created_at", "id")
                .values_list("id", flat=True)
            ),
        },
    )

"""Agent API: a person's facts — list, read with provenance, remember, correct, forget.

Every write goes through the same domain functions as extraction and the person's own pages
(`memoryapp.facts` over `memoryapp.writing`), labelled with origin `agent` and the key's name.
"""

import uuid
from datetime import datetime
from typing import Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status

from memoryapp import backends, facts, sessions, writing
from memoryapp.api.auth import requires
from memoryapp.api.errors import ERRORS, ApiError
from memoryapp.api.schemas import BodyIn
from memoryapp.vocabulary import FACT_INPUT_MAX_CHARS, KindName

router = Router(tags=["facts"])

State = Literal["live", "superseded", "expired", "all"]


class ProvenanceOut(Schema):
    origin: str = Field(..., description="extracted | user | staff | org_admin | agent | mcp")
    source_session: uuid.UUID | None
    source_turns: list[int]
    extraction_run: int | None = Field(None, description="The extraction run that wrote it, for extracted facts")
    backend: str | None = Field(None, description="The extraction backend, for extracted facts")
    created_at: datetime
    last_confirmed_at: datetime
    confirmation_count: int


class FactOut(Schema):
    id: uuid.UUID
    text: str
    kind: str
    state: Literal["live", "superseded", "expired"]
    created_at: datetime
    last_recalled_at: datetime | None
    superseded_at: datetime | None
    superseded_by: uuid.UUID | None
    supersede_reason: str | None
    expired_at: datetime | None
    expired_rule: str | None = Field(None, description="Why forgetting expired it: stale_goal | never_recalled")
    provenance: ProvenanceOut


class FactPageOut(Schema):
    facts: list[FactOut]
    next_cursor: str | None = Field(..., description="Pass as `cursor` for the next page; null on the last")


class EventOut(Schema):
    action: str
    actor: str
    reason: str
    session: uuid.UUID | None
    related_fact: uuid.UUID | None
    created_at: datetime


class RecalledInOut(Schema):
    session: uuid.UUID
    tier: str
    score: float | None
    recalled_at: datetime


class FactDetailOut(FactOut):
    chain: list[FactOut] = Field(..., description="The supersession chain through this fact, oldest first")
    events: list[EventOut]
    recalls: list[RecalledInOut] = Field(..., description="The latest 100 memory blocks it was injected into")
    recall_count: int


class FactIn(BodyIn):
    model_config = {"json_schema_extra": {"examples": [{"text": "The user is vegan.", "kind": "constraint"}]}}

    text: str = Field(
        ..., max_length=FACT_INPUT_MAX_CHARS, description="One sentence about the person, at most 200 characters"
    )
    kind: KindName


class CorrectIn(FactIn):
    model_config = {"json_schema_extra": {"examples": [{"text": "The user is vegan."}]}}

    kind: KindName | None = Field(None, description="Left out: the fact keeps its kind")


class RememberIn(FactIn):
    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "text": "The user is vegetarian.",
                    "kind": "constraint",
                    "session": "3f2b8c1e-9d4a-4c7b-8e2f-1a6d5b9c0e47",
                }
            ]
        }
    }

    session: uuid.UUID | None = Field(None, description="The session it was said in; a memory-off one refuses")


class PendingOut(Schema):
    id: uuid.UUID
    text: str
    kind: str
    reason: str = Field(..., description="Why it waits: it may claim authority, a permission or an instruction")


class PendingPageOut(Schema):
    pending: list[PendingOut]
    next_cursor: str | None = Field(..., description="Pass as `cursor` for the next page; null on the last")


class RememberOut(Schema):
    outcome: Literal["created", "confirmed", "superseded", "held", "pending"] = Field(
        ...,
        description="created: new fact; confirmed: a duplicate was confirmed; superseded: new fact that "
        "replaced `superseded`; held: it contradicts the person's own correction, which stands (`fact`, "
        "given to a key with `read`; a confirmed duplicate likewise); "
        "pending: it may claim authority, so it waits for the person to keep it on their memory page "
        "(`pending`; never recalled until then)",
    )
    fact: FactOut | None
    superseded: list[uuid.UUID]
    pending: PendingOut | None = None


class CorrectedOut(Schema):
    changed: bool = Field(..., description="false when the text and kind were already the same")
    fact: FactOut | None = Field(..., description="The current version (null in a 202 to a key without `read`)")
    replaced: uuid.UUID | None = Field(..., description="The version the correction replaced (kept, linked)")
    pending: PendingOut | None = Field(
        None, description="202: the correction may claim authority and waits for the person to keep it"
    )


class DeletedOut(Schema):
    deleted: int = Field(..., description="Rows removed: the fact and its earlier versions")


fact_out = facts.fact_json


def _person(request, external_id):
    """The person the key's organisation calls `external_id`; 404 for anyone else."""
    person = sessions.find_user(request.org, external_id)
    if person is None:
        raise ApiError(404, "not_found", "No such user for this API key.")
    return person


def _fact(request, fact_id):
    """A fact of someone the key's organisation knows; 404 for any other."""
    fact = facts.fact_for_org(request.org, fact_id)
    if fact is None:
        raise ApiError(404, "not_found", "No such fact for this API key.")
    return fact


MEMORY_OFF = "Memory is switched off for this person or this session, so nothing can be written."
MEMORY_OFF_READ = "Memory is switched off for this person: the assistant reads none of it (their export still works)."


def readable(person):
    """The person, unless they switched memory off (409): an agent lists, searches and reads none of it then."""
    try:
        return facts.for_the_assistant(person)
    except facts.MemoryOff:
        raise ApiError(409, "memory_off", MEMORY_OFF_READ) from None


class ListQuery(Schema):
    state: State = Field("live", description="live (default), superseded, expired or all")
    kind: KindName | None = None
    # No NUL: it would be dropped before searching, and the empty search then listed everything.
    q: str | None = Field(
        None, max_length=200, pattern=r"^[^\x00]*$", description="Words or a phrase in the fact's text"
    )
    cursor: str | None = Field(None, max_length=200, description="`next_cursor` of the previous page")
    limit: int = Field(facts.PAGE_SIZE, ge=1, le=100)


def _one_page(list_page, person, filters):
    """`list_page(person, **filters)`; a cursor this API never handed out is 422."""
    try:
        return list_page(person, **filters.dict())
    except facts.BadCursor as exc:
        raise ApiError(422, "invalid", str(exc), "cursor") from None


def _known_params_only(request, query):
    """An unknown query parameter is 422, so a misspelt filter never silently lists everything."""
    unknown = sorted(set(request.GET) - set(query.model_fields))
    if unknown:
        raise ApiError(422, "invalid", f"{unknown[0]}: unknown query parameter", unknown[0])


@router.get("/users/{user}/facts", response={200: FactPageOut, **ERRORS})
@requires("read")
def list_facts(request: HttpRequest, user: str, filters: Query[ListQuery]):
    """The person's facts, newest first, with provenance summaries, a page at a time (keyset cursor).

    An unknown query parameter is 422, so a misspelt filter never silently lists everything.
    """
    _known_params_only(request, ListQuery)
    page = _one_page(facts.list_facts, readable(_person(request, user)), filters)
    return Status(200, {"facts": [fact_out(f) for f in page.facts], "next_cursor": page.next_cursor})


class PendingQuery(Schema):
    cursor: str | None = Field(None, max_length=200, description="`next_cursor` of the previous page")
    limit: int = Field(facts.PAGE_SIZE, ge=1, le=100)


@router.get("/users/{user}/pending", response={200: PendingPageOut, **ERRORS})
@requires("read")
def list_pending(request: HttpRequest, user: str, filters: Query[PendingQuery]):
    """What waits for the person's word, newest first: candidates that may claim authority, a permission or
    an instruction. None is recalled until the person keeps it on their memory page; each lapses after 30 days.
    """
    _known_params_only(request, PendingQuery)
    page = _one_page(facts.list_pending, readable(_person(request, user)), filters)
    return Status(200, {"pending": [facts.pending_json(c) for c in page.rows], "next_cursor": page.next_cursor})


@router.post("/users/{user}/facts", response={200: RememberOut, 201: RememberOut, 202: RememberOut, **ERRORS})
@requires("write")
def remember(request: HttpRequest, user: str, payload: RememberIn):
    """Remember this: stored like an extracted fact (validation, poisoning filter, supersession).

    201 when a new fact was written (`created`, `superseded`), 200 when nothing new was (`confirmed`,
    `held`), 202 when it waits for the person's word (`pending`: it may claim authority). A text that can
    never be a fact (markup, a breakout, words to the assistant) is 422 `fact_rejected` with the reason;
    memory off is 409. Nothing is created for a person when the text is refused.
    """
    if not sessions.EXTERNAL_ID.match(user):
        # As on every other user route: no one can have this id (1-128 characters, no control characters, no "/").
        raise ApiError(
            404, "not_found", "No such user: an id is 1 to 128 characters without control characters or '/'."
        )
    try:
        result = facts.remember(
            request.org, user, payload.text, payload.kind, api_key=request.api_key, session_id=payload.session
        )
    except writing.Gone as exc:
        raise ApiError(404, "not_found", f"Not stored: {exc}.") from None
    except writing.FactRejected as exc:
        raise ApiError(422, "fact_rejected", f"Not stored: {exc}.", "text") from None
    except facts.UnknownSession:
        raise ApiError(404, "not_found", "No such session for this user and API key.", "session") from None
    except backends.ModelUnavailable:  # MODEL_STRICT: no offline verdicts for this deployment
        raise ApiError(
            503,
            "model_unavailable",
            "The verdict model did not answer; nothing was stored. Retry shortly.",
            headers={"Retry-After": "30"},
        ) from None
    except facts.MemoryOff:
        raise ApiError(409, "memory_off", MEMORY_OFF) from None
    if result.outcome == "at_limit":
        raise ApiError(409, "memory_full", "This person has as many live facts as allowed; correct or delete some.")
    if result.outcome == "pending":
        c = result.pending
        pending = facts.pending_json(c)
        return Status(202, {"outcome": "pending", "fact": None, "superseded": [], "pending": pending})
    status = 201 if result.outcome in ("created", "superseded") else 200
    fact = fact_out(result.fact) if result.fact is not None else None  # None: a key without `read`
    return Status(status, {"outcome": result.outcome, "fact": fact, "superseded": result.superseded})


@router.get("/facts/{fact_id}", response={200: FactDetailOut, **ERRORS})
@requires("read")
def get_fact(request: HttpRequest, fact_id: uuid.UUID):
    """One fact with its supersession chain, its audit trail and the sessions it was recalled in."""
    fact = _fact(request, fact_id)
    readable(fact.user)
    d = facts.detail(fact)
    return Status(
        200,
        {
            **fact_out(d.fact),
            "chain": [fact_out(f) for f in d.chain],
            "events": [
                {
                    "action": e.action,
                    "actor": e.actor,
                    "reason": e.reason,
                    "session": e.session_id,
                    "related_fact": e.related_fact_id,
                    "created_at": e.created_at,
                }
                for e in d.events
            ],
            "recalls": [
                {"session": r.session_id, "tier": r.tier, "score": r.score, "recalled_at": r.created_at}
                for r in d.recalls
            ],
            "recall_count": d.recall_count,
        },
    )


@router.patch("/facts/{fact_id}", response={200: CorrectedOut, 202: CorrectedOut, **ERRORS})
@requires("write")
def correct_fact(request: HttpRequest, fact_id: uuid.UUID, payload: CorrectIn):
    """Correct a fact as the person's own page does: a new version replaces it; the old one is kept and linked.

    A replaced version is 409 (correct the current one); a text that is not a storable fact is 422; a fact
    the person corrected themselves (or an earlier version of it) is 409 `corrected_by_person`, with their
    version in the message.
    """
    fact = _fact(request, fact_id)
    try:
        new = facts.correct(fact, payload.text, payload.kind or fact.kind, api_key=request.api_key)
    except writing.Gone as exc:
        raise ApiError(404, "not_found", f"Not stored: {exc}.") from None
    except writing.FactRejected as exc:
        raise ApiError(422, "fact_rejected", f"Not stored: {exc}.", "text") from None
    except facts.MemoryOff:
        raise ApiError(409, "memory_off", MEMORY_OFF) from None
    except facts.NotCurrent as exc:
        raise ApiError(409, "superseded", str(exc)) from None
    except facts.Held as held:
        pending = facts.pending_json(held.candidate)
        unchanged = fact_out(fact) if facts.shown_to(request.api_key, fact) else None
        return Status(202, {"changed": False, "fact": unchanged, "replaced": None, "pending": pending})
    except facts.CorrectedByPerson as exc:
        raise _corrected_by_person(request, exc) from None
    changed = new.id != fact.id
    return Status(200, {"changed": changed, "fact": fact_out(new), "replaced": fact.id if changed else None})


@router.delete("/facts/{fact_id}", response={200: DeletedOut, **ERRORS})
@requires("write")
def delete_fact(request: HttpRequest, fact_id: uuid.UUID):
    """Delete a fact for real, with its earlier versions, as the person's own page does (copies scrubbed).

    A fact the person corrected themselves (or an earlier version of it) is 409 `corrected_by_person`.
    """
    try:
        deleted = facts.forget(_fact(request, fact_id), api_key=request.api_key)
    except facts.CorrectedByPerson as exc:
        raise _corrected_by_person(request, exc) from None
    except facts.NotCurrent as exc:
        raise ApiError(409, "superseded", str(exc)) from None
    return Status(200, {"deleted": deleted})


def _corrected_by_person(request, exc):
    return ApiError(409, "corrected_by_person", exc.said_to(request.api_key))

"""Agent API: a person's facts — list, read with provenance, remember, correct, forget.

Every write goes through the same domain functions as extraction and the person's own pages
(`memoryapp.facts` over `memoryapp.writing`), labelled with origin `agent` and the key's name.
"""

import uuid
from datetime import datetime
from typing import Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status

from memoryapp import facts, sessions, writing
from memoryapp.api.auth import requires
from memoryapp.api.errors import ERRORS, ApiError

router = Router(tags=["facts"])

KindName = Literal["preference", "constraint", "profile", "goal"]
State = Literal["live", "superseded", "expired", "all"]


class ProvenanceOut(Schema):
    origin: str = Field(..., description="extracted | user | staff | org_admin | agent | mcp")
    source_session: uuid.UUID | None
    source_turns: list[int]
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


class FactIn(Schema):
    text: str = Field(..., max_length=2000, description="One sentence about the person, at most 200 characters")
    kind: KindName


class RememberIn(FactIn):
    session: uuid.UUID | None = Field(None, description="The session it was said in; a memory-off one refuses")


class RememberOut(Schema):
    outcome: Literal["created", "confirmed", "superseded", "held"] = Field(
        ...,
        description="created: new fact; confirmed: a duplicate was confirmed; superseded: new fact that "
        "replaced `superseded`; held: it contradicts the person's own correction, which stands (`fact`)",
    )
    fact: FactOut
    superseded: list[uuid.UUID]


class CorrectedOut(Schema):
    changed: bool = Field(..., description="false when the text and kind were already the same")
    fact: FactOut = Field(..., description="The current version")
    replaced: uuid.UUID | None = Field(..., description="The version the correction replaced (kept, linked)")


class DeletedOut(Schema):
    deleted: int = Field(..., description="Rows removed: the fact and its earlier versions")


def fact_out(f):
    """A fact with its provenance summary, as the API shows it."""
    run = f.extraction_run if f.extraction_run_id else None
    return {
        "id": f.id,
        "text": f.text,
        "kind": f.kind,
        "state": f.state,
        "created_at": f.created_at,
        "last_recalled_at": f.last_recalled_at,
        "superseded_at": f.superseded_at,
        "superseded_by": f.superseded_by_id,
        "supersede_reason": f.supersede_reason or None,
        "expired_at": f.expired_at,
        "provenance": {
            "origin": f.origin,
            "source_session": f.source_session_id,
            "source_turns": list(f.source_turns or []),
            "backend": run.backend if run else None,
            "created_at": f.created_at,
            "last_confirmed_at": f.last_confirmed_at,
            "confirmation_count": f.confirmation_count,
        },
    }


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


class ListQuery(Schema):
    state: State = Field("live", description="live (default), superseded, expired or all")
    kind: KindName | None = None
    q: str | None = Field(None, max_length=200, description="Words or a phrase in the fact's text")
    cursor: str | None = Field(None, max_length=200, description="`next_cursor` of the previous page")
    limit: int = Field(facts.PAGE_SIZE, ge=1, le=100)


@router.get("/users/{user}/facts", response={200: FactPageOut, **ERRORS})
@requires("read")
def list_facts(request: HttpRequest, user: str, filters: Query[ListQuery]):
    """The person's facts, newest first, with provenance summaries, a page at a time (keyset cursor).

    An unknown query parameter is 422, so a misspelt filter never silently lists everything.
    """
    unknown = sorted(set(request.GET) - set(ListQuery.model_fields))
    if unknown:
        raise ApiError(422, "invalid", f"{unknown[0]}: unknown query parameter", unknown[0])
    person = _person(request, user)
    try:
        page = facts.list_facts(person, **filters.dict())
    except facts.BadCursor as exc:
        raise ApiError(422, "invalid", str(exc), "cursor") from None
    return Status(200, {"facts": [fact_out(f) for f in page.facts], "next_cursor": page.next_cursor})


@router.post("/users/{user}/facts", response={200: RememberOut, 201: RememberOut, **ERRORS})
@requires("write")
def remember(request: HttpRequest, user: str, payload: RememberIn):
    """Remember this: stored like an extracted fact (validation, poisoning filter, supersession).

    201 when a new fact was written (`created`, `superseded`), 200 when nothing new was (`confirmed`,
    `held`). A text that is not a storable fact is 422 `fact_rejected` with the reason; memory off is 409.
    """
    if not sessions.EXTERNAL_ID.match(user):
        # As on every other user route: no one can have this id (1-128 characters, no control characters).
        raise ApiError(404, "not_found", "No such user: an id is 1 to 128 characters without control characters.")
    person = sessions.get_or_create_user(request.org, user)
    session = None
    if payload.session is not None:
        session = facts.session_for(request.org, person, payload.session)
        if session is None:
            raise ApiError(404, "not_found", "No such session for this user and API key.", "session")
    try:
        result = facts.remember(person, payload.text, payload.kind, api_key=request.api_key, session=session)
    except writing.FactRejected as exc:
        raise ApiError(422, "fact_rejected", f"Not stored: {exc}.", "text") from None
    except facts.MemoryOff:
        raise ApiError(409, "memory_off", MEMORY_OFF) from None
    if result.fact is None:  # at_limit
        raise ApiError(409, "memory_full", "This person has as many live facts as allowed; correct or delete some.")
    status = 201 if result.outcome in ("created", "superseded") else 200
    return Status(status, {"outcome": result.outcome, "fact": fact_out(result.fact), "superseded": result.superseded})


@router.get("/facts/{fact_id}", response={200: FactDetailOut, **ERRORS})
@requires("read")
def get_fact(request: HttpRequest, fact_id: uuid.UUID):
    """One fact with its supersession chain, its audit trail and the sessions it was recalled in."""
    d = facts.detail(_fact(request, fact_id))
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


@router.patch("/facts/{fact_id}", response={200: CorrectedOut, **ERRORS})
@requires("write")
def correct_fact(request: HttpRequest, fact_id: uuid.UUID, payload: FactIn):
    """Correct a fact as the person's own page does: a new version replaces it; the old one is kept and linked.

    A replaced version is 409 (correct the current one); a text that is not a storable fact is 422.
    """
    fact = _fact(request, fact_id)
    try:
        new = facts.correct(fact, payload.text, payload.kind, api_key=request.api_key)
    except writing.FactRejected as exc:
        raise ApiError(422, "fact_rejected", f"Not stored: {exc}.", "text") from None
    except facts.MemoryOff:
        raise ApiError(409, "memory_off", MEMORY_OFF) from None
    except facts.NotCurrent:
        raise ApiError(409, "superseded", "This version has been replaced; correct the current one.") from None
    changed = new.id != fact.id
    return Status(200, {"changed": changed, "fact": fact_out(new), "replaced": fact.id if changed else None})


@router.delete("/facts/{fact_id}", response={200: DeletedOut, **ERRORS})
@requires("write")
def delete_fact(request: HttpRequest, fact_id: uuid.UUID):
    """Delete a fact for real, with its earlier versions, as the person's own page does (copies scrubbed)."""
    return Status(200, {"deleted": facts.forget(_fact(request, fact_id), api_key=request.api_key)})

"""Facts as agents see them: listing, reading, remembering, correcting and forgetting, for one org's key.

The agent API and the MCP server both call these; the writes go through `writing` (store_fact,
correct_fact, delete_fact), so validation, the poisoning filter and supersession are the ones
extraction and the person's own pages use.
"""

import base64
import binascii
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.postgres.search import SearchQuery
from django.core.exceptions import ValidationError
from django.db.models import Q

from memoryapp import writing
from memoryapp.models import AgentSession, FactEvent, MemoryFact, RecallLog

STATES = ("live", "superseded", "expired", "all")
PAGE_SIZE = 50
RECALLS_SHOWN = 100
# How each way in labels what it wrote: the fact's origin and the audit events' actor.
VIA = {
    "api": (MemoryFact.Origin.AGENT, FactEvent.Actor.AGENT),
    "mcp": (MemoryFact.Origin.MCP, FactEvent.Actor.MCP),
}


class MemoryOff(Exception):
    """The person switched memory off, or the session is memory-off: nothing may be written."""


class NotCurrent(Exception):
    """The fact has been replaced; only the current version can be corrected."""


class BadCursor(ValueError):
    """The cursor was not one this service handed out."""


@dataclass
class Page:
    facts: list
    next_cursor: str | None


@dataclass
class Detail:
    fact: MemoryFact
    chain: list  # MemoryFact, oldest first
    events: list  # FactEvent of this fact, oldest first
    recalls: list  # RecallLog, newest first
    recall_count: int = 0


@dataclass
class Remembered:
    outcome: str  # created | confirmed | superseded | held
    fact: MemoryFact | None
    superseded: list = field(default_factory=list)


def key_note(api_key, via="api"):
    """The audit note that says which key wrote, and how."""
    return f"{'MCP' if via == 'mcp' else 'API'} key '{api_key.name}' ({api_key.prefix}…)"


# --- reading ------------------------------------------------------------------------------


def encode_cursor(fact):
    """An opaque cursor positioned just after `fact` (keyset on created_at, id)."""
    raw = f"{fact.created_at.isoformat()}|{fact.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor):
    """(created_at, id) from a cursor; BadCursor for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        when, fact_id = raw.split("|")
        return datetime.fromisoformat(when), MemoryFact._meta.pk.to_python(fact_id)
    except (ValueError, binascii.Error, ValidationError) as exc:  # UnicodeDecodeError is a ValueError
        raise BadCursor("cursor: not a cursor from a previous page") from exc


def list_facts(user, *, state="live", kind=None, q=None, cursor=None, limit=PAGE_SIZE):
    """One page of the person's facts, newest first, with the cursor of the next page (None at the end)."""
    qs = (
        MemoryFact.objects.for_user(user)
        .in_state(state)
        .with_last_recalled()
        .select_related("extraction_run")
        .defer("embedding", "extraction_run__raw_output")
    )
    if kind:
        qs = qs.filter(kind=kind)
    q = (q or "").replace("\x00", "").strip()
    if q:
        qs = qs.filter(
            Q(text__icontains=q) | Q(search_vector=SearchQuery(q, config="english", search_type="websearch"))
        )
    if cursor:
        created_at, fact_id = decode_cursor(cursor)
        qs = qs.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=fact_id))
    # Keyset order on (created_at, id): fact_user_created_idx serves user + created_at.
    rows = list(qs.order_by("-created_at", "-id")[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, encode_cursor(rows[-1]) if more and rows else None)


def fact_for_org(org, fact_id):
    """A personal fact of someone `org` knows, or None (another org's, or unknown, look the same)."""
    return (
        MemoryFact.objects.known_to(org)
        .select_related("extraction_run")
        .defer("embedding", "extraction_run__raw_output")
        .filter(id=fact_id)
        .first()
    )


def detail(fact):
    """The fact with its supersession chain, its audit trail and where it was recalled."""
    chain = [f for f in writing.chain_of(fact) if f.user_id == fact.user_id]
    events = list(FactEvent.objects.filter(fact_id=fact.id, user_id=fact.user_id).order_by("created_at", "id"))
    recalls = RecallLog.objects.filter(fact=fact, user_id=fact.user_id).order_by("-created_at", "-id")
    return Detail(fact, chain, events, list(recalls[:RECALLS_SHOWN]), recalls.count())


# --- writing ------------------------------------------------------------------------------


def session_for(org, user, session_id):
    """The person's session opened with `org`'s keys, or None."""
    return (
        AgentSession.objects.select_related("user__memory_settings").filter(id=session_id, org=org, user=user).first()
    )


def remember(user, text, kind, *, api_key, via="api", session=None):
    """An agent's explicit "remember this": validated, filtered and superseded like an extracted fact.

    Opens no transaction of its own: where the verdict call runs relative to the lock is store_fact's
    business (being restructured so the call happens before the lock), and this picks that up unchanged.
    """
    if not writing.memory_enabled(user) or (session is not None and not writing.memory_allowed(session)):
        raise MemoryOff()
    origin, _ = VIA[via]
    result = writing.store_fact(user, text, kind, session=session, origin=origin, reason=key_note(api_key, via))
    outcome = result.outcome
    if outcome == "created" and result.superseded:
        outcome = "superseded"
    return Remembered(outcome, result.fact, [f.id for f in result.superseded])


def correct(fact, text, kind, *, api_key, via="api"):
    """Correct a fact through the person's own correction path; returns the new version (or the same fact)."""
    if not writing.memory_enabled(fact.user):
        raise MemoryOff()
    if fact.superseded_at is not None:
        raise NotCurrent()
    if writing.is_unchanged(fact, text, kind):
        return fact
    origin, _ = VIA[via]
    try:
        return writing.correct_fact(fact, text, kind, actor_user=None, origin=origin, note=key_note(api_key, via))
    except writing.FactRejected:
        fact.refresh_from_db(fields=["superseded_at"])
        if fact.superseded_at is not None:  # replaced while we were embedding
            raise NotCurrent() from None
        raise


def forget(fact, *, api_key, via="api"):
    """Delete the fact and its earlier versions through the person's own deletion path; returns how many."""
    _, actor = VIA[via]
    return writing.delete_fact(fact, actor=actor, reason=f"deleted by {key_note(api_key, via)}")

"""Facts as agents see them: listing, reading, remembering, correcting and forgetting, for one org's key.

The agent API and the MCP server both call these; the writes go through `writing` (store,
correct_fact, delete_fact), so validation, the poisoning filter and supersession are the ones
extraction and the person's own pages use.
"""

from dataclasses import dataclass, field

from memoryapp import backends, paging, search, sessions, writing
from memoryapp.backends.phrasing import from_the_first_person
from memoryapp.models import AgentSession, FactCandidate, FactEvent, MemoryFact, RecallLog

STATES = ("live", "superseded", "expired", "all")
PAGE_SIZE = 50
LIST_ORDER = ("-created_at", "-id")  # newest first; fact_user_created_idx serves it
RECALLS_SHOWN = 100
# How each way in labels what it wrote: the fact's origin and the audit events' actor.
VIA = {
    "api": (MemoryFact.Origin.AGENT, FactEvent.Actor.AGENT),
    "mcp": (MemoryFact.Origin.MCP, FactEvent.Actor.MCP),
}


def iso(value):
    """A datetime as ISO 8601 text, or None."""
    return value.isoformat() if value is not None else None


def id_or_none(value):
    """An id as text, or None."""
    return str(value) if value is not None else None


def fact_json(f):
    """A fact and its provenance as JSON: the one shape of the agent API, the MCP tools and the export.

    Reads `f.extraction_run` for the backend: select_related("extraction_run") when serialising many.
    """
    run = f.extraction_run if f.extraction_run_id else None
    return {
        "id": str(f.id),
        "text": f.text,
        "kind": f.kind,
        "state": f.state,
        "created_at": iso(f.created_at),
        "last_recalled_at": iso(getattr(f, "last_recalled_at", None)),
        "superseded_at": iso(f.superseded_at),
        "superseded_by": id_or_none(f.superseded_by_id),
        "supersede_reason": f.supersede_reason or None,
        "expired_at": iso(f.expired_at),
        "expired_rule": f.expired_rule or None,
        "provenance": {
            "origin": f.origin,
            "source_session": id_or_none(f.source_session_id),
            "source_turns": list(f.source_turns or []),
            "extraction_run": f.extraction_run_id,
            "backend": run.backend if run else None,
            "created_at": iso(f.created_at),
            "last_confirmed_at": iso(f.last_confirmed_at),
            "confirmation_count": f.confirmation_count,
        },
    }


class MemoryOff(Exception):
    """The person switched memory off, or the session is memory-off: nothing may be written or read by an agent."""


def for_the_assistant(person):
    """`person`, or MemoryOff when they switched memory off: then the assistant reads none of it (export aside)."""
    if not writing.memory_enabled(person):
        raise MemoryOff()
    return person


class NotCurrent(Exception):
    """The fact has been replaced; only the current version can be corrected or deleted."""

    def __init__(self):
        super().__init__(
            "This version has been replaced by a newer one; correct or delete the current version (its id is "
            "this version's superseded_by)."
        )


BadCursor = paging.BadCursor


class CorrectedByPerson(Exception):
    """The person corrected this fact (or a later version of it) themselves: a key may not override it."""

    def __init__(self, current):
        super().__init__(
            f'The person corrected this fact themselves and their version stands: "{current.text}" '
            f"(fact {current.id}). Only the person can change it."
        )
        self.current = current  # the person's version, which stands

    def said_to(self, api_key):
        """The message for this key: the person's version is quoted only to a key that may read it."""
        if api_key.allows("read"):
            return str(self)
        return (
            f"The person corrected this fact themselves and their version stands (fact {self.current.id}). "
            "Only the person can change it."
        )


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
    outcome: str  # created | confirmed | superseded | held | pending | at_limit
    fact: MemoryFact | None
    superseded: list = field(default_factory=list)
    pending: object = None  # the FactCandidate waiting for the person's word


class Held(Exception):
    """The correction waits for the person's word (it may claim authority); the fact is unchanged."""

    def __init__(self, candidate):
        super().__init__(candidate.reason)
        self.candidate = candidate


def pending_json(c):
    """A candidate waiting for the person's word, as the API and the MCP tools show it."""
    return {"id": str(c.id), "text": c.text, "kind": c.kind, "reason": c.reason}


class UnknownSession(Exception):
    """The session named is not this person's with this org's keys."""


def key_note(api_key, via="api"):
    """The audit note that says which key wrote, and how."""
    return f"{'MCP' if via == 'mcp' else 'API'} key '{api_key.name}' ({api_key.prefix}…)"


# --- reading ------------------------------------------------------------------------------


def list_facts(user, *, state="live", kind=None, q=None, cursor=None, limit=PAGE_SIZE):
    """One page of the person's facts, newest first, with the cursor of the next page (None at the end)."""
    qs = (
        MemoryFact.objects.for_user(user)
        .in_state(state)
        .with_last_recalled()
        .select_related("extraction_run")
        .for_display()
        .defer("extraction_run__raw_output")
    )
    if kind:
        qs = qs.filter(kind=kind)
    qs = search.matching(qs, q)
    # Keyset order on (created_at, id): fact_user_created_idx serves user + created_at.
    page = paging.keyset_page(qs, LIST_ORDER, cursor, limit)
    return Page(page.rows, page.next_cursor)


PENDING_ORDER = ("-created_at", "-id")


def list_pending(user, *, cursor=None, limit=PAGE_SIZE):
    """One page of what waits for the person's word, newest first (never recalled until they keep it)."""
    waiting = FactCandidate.objects.pending().filter(user=user)
    return paging.keyset_page(waiting, PENDING_ORDER, cursor, limit)  # candidate_user_idx


def fact_for_org(org, fact_id):
    """A personal fact of someone `org` knows, or None (another org's, or unknown, look the same)."""
    return (
        MemoryFact.objects.known_to(org)
        .select_related("extraction_run")
        .for_display()
        .defer("extraction_run__raw_output")
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


def remember(org, external_id, text, kind, *, api_key, via="api", session_id=None):
    """An agent's explicit "remember this": checked, judged and superseded like an extracted fact.

    The candidate is checked before anyone is created: a refused text (FactRejected) leaves no person
    behind. Raises MemoryOff and UnknownSession too. Opens no transaction of its own: writing.store
    judges with nothing held, then writes under the person's lock.
    """
    origin, _ = VIA[via]
    note = key_note(api_key, via)
    text = from_the_first_person(text)  # "I like tea." -> "The user likes tea."
    try:
        checked = writing.check(text, kind)
    except writing.FactRejected as exc:
        if exc.judgement is not None:  # kept for the poisoning audit, under the person if they exist
            writing.record_refusal(sessions.find_user(org, external_id), org, text, kind, exc.judgement, origin, note)
        raise
    user = sessions.get_or_create_user(org, external_id)
    session = None
    if session_id is not None:
        session = session_for(org, user, session_id)
        if session is None:
            raise UnknownSession()
    if not writing.memory_enabled(user) or (session is not None and not writing.memory_allowed(session)):
        raise MemoryOff()
    write = writing.FactWrite(user, checked.text, kind, checked=checked, session=session, origin=origin, reason=note)
    result = writing.run(write, backends.request_verdicts(write.judged_offline))
    outcome = result.outcome
    if outcome == "created" and result.superseded:
        outcome = "superseded"
    # A confirmed or held write answers with the person's stored words, not the ones this key sent.
    fact = shown_to(api_key, result.fact) if outcome in ("confirmed", "held") else result.fact
    return Remembered(outcome, fact, [f.id for f in result.superseded], result.candidate)


def shown_to(api_key, fact):
    """`fact` for a key that may read it, else None: a write-only key is never told the person's words."""
    return fact if api_key.allows("read") else None


def person_version(fact):
    """The person's own version of `fact`, if the newest version in its chain is one; else None.

    The rule extraction and `remember` follow (writing.PERSON_ORIGINS): what the person, or staff or an
    org admin for them, wrote stands until the person says something newer. A key has no newer words of
    theirs, so it may neither correct nor delete such a fact, nor an older version in its chain.
    """
    current = writing.chain_of(fact)[-1]
    return current if current.origin in writing.PERSON_ORIGINS else None


def _not_the_persons(fact):
    """Raise CorrectedByPerson when `fact`'s chain ends in the person's own version."""
    # Checked before the write and outside its lock: a correction by the person landing in between
    # supersedes `fact`, so correct_fact refuses it (NotCurrent), and delete_fact removes `fact` and
    # its older versions only, never the person's newer one.
    theirs = person_version(fact)
    if theirs is not None:
        raise CorrectedByPerson(theirs)


def correct(fact, text, kind, *, api_key, via="api"):
    """Correct a fact through the person's own correction path; returns the new version (or the same fact)."""
    if not writing.memory_enabled(fact.user):
        raise MemoryOff()
    _not_the_persons(fact)
    if fact.superseded_at is not None:
        raise NotCurrent()
    text = from_the_first_person(text)  # in the voice the block speaks
    if writing.is_unchanged(fact, text, kind):
        return fact
    origin, _ = VIA[via]
    try:
        result = writing.correct_fact(fact, text, kind, actor_user=None, origin=origin, note=key_note(api_key, via))
    except writing.Gone:
        raise
    except writing.FactRejected:
        fact.refresh_from_db(fields=["superseded_at"])
        if fact.superseded_at is not None:  # replaced while we were embedding
            raise NotCurrent() from None
        raise
    if result.outcome == "pending":
        raise Held(result.candidate)
    return result.fact


def forget(fact, *, api_key, via="api"):
    """Delete the fact and its earlier versions through the person's own deletion path; returns how many.

    A replaced version raises NotCurrent: deleting it would leave its newer version remembered, while the
    answer said the fact was forgotten."""
    _not_the_persons(fact)
    if fact.superseded_at is not None:
        raise NotCurrent()
    _, actor = VIA[via]
    return writing.delete_fact(fact, actor=actor, reason=f"deleted by {key_note(api_key, via)}")

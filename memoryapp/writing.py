"""Storing facts: supersession, confirmation, corrections and deletion, one user at a time."""

import functools
import json
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Replace

from memoryapp import backends, clock, embeddings, validation
from memoryapp.backends import phrasing
from memoryapp.models import AgentSession, ExtractionRun, FactEvent, MemoryFact, MemorySettings, Turn

# Advisory-lock namespaces (first key of pg_advisory_xact_lock(int, int)).
USER_LOCK = 1001
ORG_LOCK = 1002
DELETED = "[deleted]"


class FactRejected(ValueError):
    """The text or kind is not a storable fact; the message says why."""


@dataclass
class StoreResult:
    outcome: str  # created | confirmed | held | at_limit
    fact: MemoryFact | None = None
    superseded: list = field(default_factory=list)
    verdicts: list = field(default_factory=list)  # (neighbour id, verdict, similarity)
    judge_calls: int = 0  # verdict calls made for this fact: 0, or 1 to JUDGE_ATTEMPTS when facts changed meanwhile


def lock_user(user_id):
    """Serialise writes for one user until the end of the current transaction."""
    # Why: two sessions of one user ending together must not both insert the same fact or
    # supersede each other's rows half-way; a transaction-scoped lock frees itself on commit,
    # rollback or a dropped connection, so a killed worker cannot leave it held.
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [USER_LOCK, int(user_id)])


def lock_org(org_id):
    """Serialise writes to one organisation's tier until the end of the transaction."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [ORG_LOCK, int(org_id)])


def memory_enabled(user):
    """The user's memory switch (on unless they turned it off)."""
    try:
        return user.memory_settings.memory_enabled
    except MemorySettings.DoesNotExist:
        return True


def memory_allowed(session):
    """Memory is on for this session and for its user right now."""
    return session.memory == AgentSession.Memory.ON and memory_enabled(session.user)


def _event(
    action,
    actor,
    *,
    fact_id=None,
    user_id=None,
    org_id=None,
    actor_user=None,
    session=None,
    related=None,
    reason="",
    created_at=None,
):
    return FactEvent(
        fact_id=fact_id,
        user_id=user_id,
        org_id=org_id,
        action=action,
        actor=actor,
        actor_user=actor_user,
        session=session,
        related_fact_id=related.id if related is not None else None,
        reason=reason[:300],
        created_at=created_at or clock.now(),
    )


def record_event(
    fact, action, actor, *, actor_user=None, session=None, related=None, reason="", user_id=None, org_id=None
):
    """Append one entry to the audit trail: about `fact`, or (fact None) about `user_id` / `org_id`."""
    event = _event(
        action,
        actor,
        fact_id=fact.id if fact is not None else None,
        user_id=fact.user_id if fact is not None else user_id,
        org_id=fact.org_id if fact is not None else org_id,
        actor_user=actor_user,
        session=session,
        related=related,
        reason=reason,
    )
    event.save(force_insert=True)
    return event


def record_events(rows, action, actor, *, reason="", created_at=None):
    """The same entry for many facts at once: `rows` are (fact id, user id, org id); one INSERT."""
    return FactEvent.objects.bulk_create(
        _event(action, actor, fact_id=fid, user_id=uid, org_id=oid, reason=reason, created_at=created_at)
        for fid, uid, oid in rows
    )


def _actor_for(origin):
    return {
        MemoryFact.Origin.EXTRACTED: FactEvent.Actor.EXTRACTOR,
        MemoryFact.Origin.USER: FactEvent.Actor.USER,
        MemoryFact.Origin.ORG_ADMIN: FactEvent.Actor.ORG_ADMIN,
        MemoryFact.Origin.STAFF: FactEvent.Actor.STAFF,
        MemoryFact.Origin.AGENT: FactEvent.Actor.AGENT,
        MemoryFact.Origin.MCP: FactEvent.Actor.MCP,
    }[origin]


# How many times a fact is judged when what it was judged against keeps changing before the write.
JUDGE_ATTEMPTS = 3


def neighbour_floor(text):
    """The similarity a live fact needs to be judged against `text`: lower when `text` announces a change."""
    # The value a change replaces is often worded far from it ("now uses PlanetScale" / "uses MySQL").
    return embeddings.floor("change" if phrasing.announces_change(text) else "neighbour")


def _neighbours(live, vector, floor):
    """The live facts a new fact is judged against: the nearest few above its neighbour floor."""
    limit = settings.MEMORY["NEIGHBOUR_LIMIT"]
    return list(live.nearest(vector, floor)[:limit])


def _same_neighbours(a, b):
    # Ids alone are not enough: a fact's text can be rewritten in place (scrubbed after a deletion).
    return [(n.id, n.text) for n in a] == [(n.id, n.text) for n in b]


# Facts a person wrote or approved themselves: what an extractor or an agent writes never overrides them.
PERSON_ORIGINS = (MemoryFact.Origin.USER, MemoryFact.Origin.STAFF, MemoryFact.Origin.ORG_ADMIN)


def store_fact(
    user,
    text,
    kind,
    *,
    org=None,
    session=None,
    run=None,
    source_turns=(),
    origin=MemoryFact.Origin.EXTRACTED,
    added_by=None,
    judge=None,
    usage=None,
    vectors=None,
    claim=None,
    after=None,
    reason="",
):
    """Write one fact with supersession: confirm a duplicate, supersede what it contradicts, else insert.

    Personal facts when `org` is None, otherwise a fact in that org's tier. The verdict model is
    called with no transaction open and no lock held; the result is applied in one short
    transaction under the user's (or org's) lock, after checking that the neighbours it judged are
    still the live neighbours. `claim()` runs first in that transaction (it may raise to abort the
    write); `after(result)` runs last in it. `reason` goes on the audit events it writes (for an
    agent's write: which key). Call it outside any transaction: inside one, the verdict call would
    hold that transaction (and its locks) open.
    """
    text = validation.normalise(text)
    vector, _ = validated_vectors(text, kind, vectors)
    if judge is None:
        judge = backends.active_backend().verdicts
    live = (MemoryFact.objects.for_user(user) if org is None else MemoryFact.objects.for_org(org)).live()
    floor = neighbour_floor(text)
    judge_calls = 0
    apply = functools.partial(
        _apply,
        user,
        text,
        kind,
        vector,
        live,
        org=org,
        session=session,
        run=run,
        source_turns=source_turns,
        origin=origin,
        added_by=added_by,
        after=after,
        reason=reason,
    )

    for _ in range(JUDGE_ATTEMPTS):
        # Read-only, outside any transaction: what the new fact must be compared with.
        neighbours = _neighbours(live, vector, floor)
        answer = []
        if neighbours:
            # The model call, with nothing held: a slow provider blocks no correction, deletion or erasure.
            answer, call_usage = judge(text, [n.text for n in neighbours])
            judge_calls += 1
            if usage is not None:
                usage.add(call_usage)
        with transaction.atomic():
            _begin_write(user, org, claim)
            if _same_neighbours(_neighbours(live, vector, floor), neighbours):
                return apply(list(zip(neighbours, answer, strict=True)), judge_calls)
        # Someone changed those facts while the model was thinking (a correction, a deletion, another
        # session's write): the verdict may be stale, so judge again against what is there now.

    # Still changing after every attempt: keep the new fact and supersede nothing (lose nothing).
    with transaction.atomic():
        _begin_write(user, org, claim)
        return apply([], judge_calls)


def _begin_write(user, org, claim):
    if claim is not None:
        claim()  # before the user's lock: the caller's row locks come first, as in erasure
    # Why the lock: two sessions of one user ending together must not both insert the same fact or
    # supersede each other's rows half-way. Held only for this short transaction, never over a call.
    if org is None:
        lock_user(user.id)
    else:
        lock_org(org.id)


def _apply(
    user,
    text,
    kind,
    vector,
    live,
    verdicts,
    judge_calls,
    *,
    org,
    session,
    run,
    source_turns,
    origin,
    added_by,
    after,
    reason,
):
    """Inside the write transaction, under the lock: confirm, hold, or insert and supersede."""
    now = clock.now()
    result = StoreResult(
        outcome="created", verdicts=[(n.id, v, 1 - n.distance) for n, v in verdicts], judge_calls=judge_calls
    )
    duplicate = next((n for n, v in verdicts if v == "DUPLICATE"), None)
    contradicted = [n for n, v in verdicts if v == "CONTRADICTS"]
    protected = []
    if origin not in PERSON_ORIGINS:
        protected = [n for n in contradicted if n.origin in PERSON_ORIGINS and not _newer_statement(session, n)]
    if duplicate is not None:
        # Why an UPDATE with F(): confirmations are counted exactly even under concurrent writers.
        MemoryFact.objects.filter(id=duplicate.id).update(
            last_confirmed_at=now, confirmation_count=F("confirmation_count") + 1
        )
        duplicate.refresh_from_db()
        record_event(
            duplicate,
            FactEvent.Action.CONFIRMED,
            _actor_for(origin),
            actor_user=added_by,
            session=session,
            reason=reason,
        )
        result.outcome, result.fact = "confirmed", duplicate
    elif protected:
        # A person's own correction stands until they say something newer themselves.
        result.outcome, result.fact = "held", protected[0]
    elif not contradicted and org is None and live.count() >= settings.MEMORY["MAX_FACTS_PER_USER"]:
        result.outcome = "at_limit"
    else:
        fact = MemoryFact.objects.create(
            user=user if org is None else None,
            org=org,
            scope=MemoryFact.Scope.PERSONAL if org is None else MemoryFact.Scope.ORG,
            text=text,
            kind=kind,
            embedding=vector,
            embedding_model=embeddings.model_name(),
            origin=origin,
            added_by=added_by,
            source_session=session,
            source_turns=list(source_turns),
            extraction_run=run,
            created_at=now,
            last_confirmed_at=now,
        )
        actor = _actor_for(origin)
        record_event(fact, FactEvent.Action.CREATED, actor, actor_user=added_by, session=session, reason=reason)
        for old in contradicted:
            supersede(old, fact, reason="contradicts", actor=actor, actor_user=added_by, session=session, note=reason)
        result.fact, result.superseded = fact, contradicted
    if after is not None:
        after(result)
    return result


def _newer_statement(session, fact):
    """The session's user said something after `fact` was written or corrected by a person."""
    # Why turns and not the session start: a session opened before a correction but whose user
    # restated things afterwards is newer evidence; one whose words all predate it is not.
    if session is None:
        return False
    return Turn.objects.filter(session=session, role=Turn.Role.USER, created_at__gt=fact.created_at).exists()


def supersede(old, new, *, reason, actor, actor_user=None, session=None, note=""):
    """Mark `old` as replaced by `new`; the row stays for audit (`note` adds who, e.g. which key)."""
    now = clock.now()
    updated = MemoryFact.objects.filter(id=old.id, superseded_at__isnull=True).update(
        superseded_at=now, superseded_by=new, supersede_reason=reason
    )
    if updated:
        record_event(
            old,
            FactEvent.Action.SUPERSEDED,
            actor,
            actor_user=actor_user,
            session=session,
            related=new,
            reason=f"{reason}; {note}" if note else reason,
        )
    return bool(updated)


def is_unchanged(fact, text, kind):
    """The correction would store the same text and kind again."""
    return validation.normalise(text) == fact.text and kind == fact.kind


def validated_vectors(text, kind, vectors=None):
    """(the vector to store, its MiniLM vector) of a fact the validator accepts; raises FactRejected otherwise.

    The validator's learned check reads unquantized MiniLM vectors: with that model active, one
    pass serves both. Pass `vectors` when the fact was embedded already (an extracted fact,
    embedded when its answer was read); either part may be None, and is then computed.
    """
    vector, minilm = vectors or (None, None)
    problem = validation.shape_problem(text, kind)  # nothing is embedded for what is not a sentence
    if problem is None:
        vector = embeddings.embed(text) if vector is None else vector
        if minilm is None:
            same = embeddings.model_name() == embeddings.MINILM_NAME
            minilm = vector if same else embeddings.minilm_vector(text)
        problem = validation.fact_problem(text, kind, vector=minilm)
    if problem:
        raise FactRejected(problem)
    return vector, minilm


def correct_fact(fact, text, kind, *, actor_user, origin=MemoryFact.Origin.USER, note=""):
    """A correction (by the person, or an agent for them): a new version that supersedes `fact`.

    `note` is added to the audit events (for an agent: which key).
    """
    text = validation.normalise(text)
    vector, _ = validated_vectors(text, kind)
    with transaction.atomic():
        if fact.scope == MemoryFact.Scope.ORG:
            lock_org(fact.org_id)
        else:
            lock_user(fact.user_id)
        fact = MemoryFact.objects.select_for_update().get(id=fact.id)
        if fact.superseded_at is not None:
            raise FactRejected("this fact has already been replaced; correct the current version instead")
        now = clock.now()
        new = MemoryFact.objects.create(
            user_id=fact.user_id,
            org_id=fact.org_id,
            scope=fact.scope,
            text=text,
            kind=kind,
            embedding=vector,
            embedding_model=embeddings.model_name(),
            origin=origin,
            added_by=actor_user,
            source_session=fact.source_session,
            source_turns=fact.source_turns,
            created_at=now,
            last_confirmed_at=now,
            confirmation_count=1,
        )
        actor = _actor_for(origin)
        record_event(
            new,
            FactEvent.Action.CORRECTED,
            actor,
            actor_user=actor_user,
            related=fact,
            reason=f"correction; {note}" if note else "correction",
        )
        supersede(fact, new, reason="corrected", actor=actor, actor_user=actor_user, note=note)
        return new


def chain_of(fact):
    """The supersession chain through `fact`, oldest first."""
    older = []
    frontier = [fact.id]
    while frontier:
        rows = list(MemoryFact.objects.filter(superseded_by_id__in=frontier))
        older.extend(rows)
        frontier = [r.id for r in rows]
    newer = []
    current = fact
    while current.superseded_by_id:
        current = MemoryFact.objects.get(id=current.superseded_by_id)
        newer.append(current)
    return sorted(older, key=lambda f: f.created_at) + [fact] + newer


def delete_fact(fact, *, actor, actor_user=None, reason=""):
    """Remove a fact for real, with its superseded predecessors; the trail keeps only that it happened."""
    with transaction.atomic():
        if fact.scope == MemoryFact.Scope.ORG:
            lock_org(fact.org_id)
        else:
            lock_user(fact.user_id)
        ids = [fact.id]
        frontier = [fact.id]
        while frontier:
            frontier = list(MemoryFact.objects.filter(superseded_by_id__in=frontier).values_list("id", flat=True))
            ids.extend(frontier)
        remove_facts(ids)
        record_event(fact, FactEvent.Action.DELETED, actor, actor_user=actor_user, reason=reason)
        return len(ids)


def remove_facts(ids):
    """Delete these facts for good: the rows, their audit trail and the copies of their text."""
    scrub_copies(MemoryFact.objects.filter(id__in=ids).values("text", "user_id", "extraction_run_id"))
    FactEvent.objects.filter(fact_id__in=ids).delete()
    MemoryFact.objects.filter(id__in=ids).delete()


def scrub_copies(facts):
    """Remove deleted facts' text from the places that copied it: raw model output and memory blocks."""
    for row in facts:
        text = row["text"]
        runs = ExtractionRun.objects.filter(id=row["extraction_run_id"]) if row["extraction_run_id"] else None
        if runs is not None:
            # The raw output is JSON, so the text may appear escaped; replace both spellings.
            escaped = json.dumps(text)[1:-1]
            runs.update(
                raw_output=Replace(Replace("raw_output", Value(text), Value(DELETED)), Value(escaped), Value(DELETED))
            )
        if row["user_id"]:
            AgentSession.objects.filter(user_id=row["user_id"], memory_block__contains=text).update(
                memory_block=Replace("memory_block", Value(text), Value(DELETED))
            )


def set_memory_switch(user, enabled):
    """Turn memory on or off for all future sessions, and for open ones at once when turning off."""
    with transaction.atomic():
        MemorySettings.objects.update_or_create(
            user=user, defaults={"memory_enabled": enabled, "changed_at": clock.now()}
        )
        if not enabled:
            AgentSession.objects.for_user(user).open().update(memory=AgentSession.Memory.OFF, memory_block="")


def reembed_facts(batch=256, progress=None):
    """Give every fact whose vector is of another model (or missing) a vector of the active one; returns the count."""
    model = embeddings.model_name()
    stale = MemoryFact.objects.exclude(embedding_model=model).order_by("id")
    total, done, rows = stale.count(), 0, []
    while True:
        after = stale.filter(id__gt=rows[-1][0]) if rows else stale  # keyset paging by id
        rows = list(after.values_list("id", "text")[:batch])
        if not rows:
            return done
        # Embedded outside any transaction; each row is then written only if its text is still the
        # one embedded, so a correction made meanwhile never gets the old text's vector.
        vectors = embeddings.embed_many([text for _, text in rows])
        for (fact_id, text), vector in zip(rows, vectors, strict=True):
            done += (
                MemoryFact.objects.filter(id=fact_id, text=text)
                .exclude(embedding_model=model)
                .update(embedding=vector, embedding_model=model)
            )
        if progress:
            progress(done, total)

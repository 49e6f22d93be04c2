"""Storing facts: supersession, confirmation, corrections and deletion, one user at a time."""

import json
import re
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Replace

from memoryapp import backends, clock, embeddings, validation
from memoryapp.backends import phrasing
from memoryapp.models import (
    AgentSession,
    ExtractionRun,
    FactCandidate,
    FactEvent,
    MemoryFact,
    MemorySettings,
    Organization,
    OrgFactProposal,
    Turn,
)

# Advisory-lock namespaces (first key of pg_advisory_xact_lock(int, int)).
USER_LOCK = 1001
ORG_LOCK = 1002
DELETED = "[deleted]"


class FactRejected(ValueError):
    """The text or kind is not a storable fact; the message says why."""

    def __init__(self, message, judgement=None):
        super().__init__(message)
        self.judgement = judgement  # set when the judge refused it (not for a wrong shape)


class Gone(FactRejected):
    """What the write names (the person, or the fact it corrects) was erased or deleted meanwhile."""


@dataclass(frozen=True)
class Checked:
    """A candidate fact validated, embedded and judged once: what every way in hands to FactWrite."""

    text: str
    kind: str
    vector: object  # the vector stored with it (the active embedding model's)
    judgement: validation.Judgement  # stored or pending (a refusal raises instead)

    @property
    def pending(self):
        return self.judgement.outcome == "pending"


def check(text, kind, vectors=None):
    """Validate, embed and judge a candidate once; FactRejected when it can never be a fact.

    `vectors` = (the active model's vector, the MiniLM vector), either part None, when the caller
    embedded the text already. The judge reads MiniLM vectors: with that model active one pass
    serves both.
    """
    if not isinstance(text, str):
        raise FactRejected("text and kind must be strings")
    text = validation.normalise(text)
    problem = validation.shape_problem(text, kind)  # nothing is embedded for what is not a sentence
    if problem:
        raise FactRejected(problem)
    vector, minilm = vectors or (None, None)
    vector = embeddings.embed(text) if vector is None else vector
    if minilm is None:
        minilm = vector if embeddings.model_name() == embeddings.MINILM_NAME else embeddings.minilm_vector(text)
    judgement = validation.judge(text, kind, vector=minilm)
    if judgement.outcome == "refused":
        raise FactRejected(judgement.reason, judgement)
    return Checked(text, kind, vector, judgement)


@dataclass
class StoreResult:
    outcome: str  # created | confirmed | held | at_limit | corrected | pending
    fact: MemoryFact | None = None
    candidate: FactCandidate | None = None  # the pending candidate, waiting for the person's word
    proposal: OrgFactProposal | None = None  # a pending org fact, in the admins' queue
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


# The session's row first, then the shared side of the write locks of its user and org, only if
# free. Why: erasure takes the user's session rows and then the user's lock, so a recall
# holding the row must never wait for that lock (a deadlock); it gives everything back and waits
# with nothing held (wait_for_writers). MATERIALIZED keeps the row lock ahead of the tries.
_HOLD_FOR_RECALL = """
WITH s AS MATERIALIZED (
    SELECT id FROM memoryapp_agentsession WHERE id = %(session)s AND user_id = %(user)s::int FOR NO KEY UPDATE
)
SELECT {tries} FROM s
"""


def _owner_locks(session, function, sep):
    """The SQL calling `function` on the session's user lock and, for an org session, the org's."""
    owners = [("user_lock", "user")] + ([("org_lock", "org")] if session.org_id else [])
    return sep.join(f"{function}(%({lock})s::int, %({owner})s::int)" for lock, owner in owners)


def _recall_locks(session):
    ids = {"session": session.id, "user": session.user_id, "org": session.org_id}
    return {**ids, "user_lock": USER_LOCK, "org_lock": ORG_LOCK}


def hold_for_recall(session, wait=False):
    """Inside a transaction: lock the session's row, then share its owners' write locks if no writer
    holds them (or, with `wait`, once they let go). False: give the transaction back, `wait_for_writers`.

    Why: the recall log names the facts it quoted without a foreign key (checking one locked each
    fact's row: a cold page read and a page written per fact at scale). Deleters hold the owner's
    lock exclusively, so a fact cannot be deleted, and its text scrubbed from blocks, between a
    recall choosing it and storing the block that quotes it.
    """
    with connection.prepared_cursor() as cur:  # on every recall: planned once per connection
        tries = _owner_locks(session, "pg_try_advisory_xact_lock_shared", " AND ")
        cur.execute(_HOLD_FOR_RECALL.format(tries=tries), _recall_locks(session))
        row = cur.fetchone()
        if row is None or row[0]:  # None: the session is gone, so nothing will be stored
            return True
        if not wait:
            return False
    # Rare (a writer won every try): wait holding the row; PostgreSQL breaks a deadlock, if any.
    wait_for_writers(session)
    return True


def wait_for_writers(session):
    """Wait until no writer holds the session's owners' write locks (outside hold_for_recall's transaction)."""
    with connection.cursor() as cur:
        cur.execute(f"SELECT {_owner_locks(session, 'pg_advisory_xact_lock_shared', ', ')}", _recall_locks(session))


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


# An organisation's facts reach every member's block as facts about the organisation: one about "the
# user" there would be read as true of each of them ("The user is vegetarian." for the whole company).
_ABOUT_ONE_PERSON = re.compile(r"the user\b", re.IGNORECASE)
ORG_FACT_ABOUT_A_PERSON = (
    "an organisation's memory holds facts about the organisation, read in every member's conversations; "
    "a fact about one person ('The user …') belongs in that person's own memory"
)


def about_one_person(text):
    """True for a fact whose subject is the user ('The user …', "The user's …"): never an organisation fact."""
    return bool(_ABOUT_ONE_PERSON.match(text))


# How many times a fact is judged when what it was judged against keeps changing before the write.
# A judgement goes stale only when another write landed meanwhile, so this many agents writing one
# person's memory at once all get judged; more than that, and the last ones are kept unjudged. At 6, eight
# agents writing eight favourite drinks at once left 2-3 live in 3 of 4 trials; at 12, one in 8 of 8.
JUDGE_ATTEMPTS = 12


def neighbour_floor(text):
    """The similarity a live fact needs to be judged against `text`: lower when `text` announces a change."""
    # The value a change replaces is often worded far from it ("now uses PlanetScale" / "uses MySQL"); so is
    # the home a new one replaces ("lives in Hanoi" / "lives in Cairo": 0.45 apart).
    return embeddings.floor("change" if phrasing.announces_change(text) or phrasing.home_of(text) else "neighbour")


def _same_neighbours(a, b):
    # Ids alone are not enough: a fact's text can be rewritten in place (scrubbed after a deletion).
    return [(n.id, n.text) for n in a] == [(n.id, n.text) for n in b]


# Facts a person wrote or approved themselves: what an extractor or an agent writes never overrides them.
PERSON_ORIGINS = (MemoryFact.Origin.USER, MemoryFact.Origin.STAFF, MemoryFact.Origin.ORG_ADMIN)


class FactWrite:
    """One candidate fact on its way into memory, in two steps that every caller takes in order.

        write = FactWrite(user, text, kind, ...)   # validated and embedded once; FactRejected if not a fact
        write.judge()                              # the verdict call, with nothing held
        with transaction.atomic():
            result = write.apply()                 # under the owner's lock; None: judge again

    `apply` re-reads the neighbours under the lock; when they changed while the model was thinking
    (a correction, a deletion, another session's write, forgetting) it writes nothing and returns
    None, and the caller judges again. After JUDGE_ATTEMPTS judgements the fact is kept with no
    verdicts (it supersedes nothing), so the loop always ends and nothing is lost. `store()` is the
    loop for callers with nothing of their own to do in the transaction.

    Personal facts when `org` is None, else a fact of that org's tier. A correction names the fact
    it `replaces`: it is not judged against neighbours (the person said what it replaces), and it
    supersedes that fact if it is still current. `reason` goes on the audit events (for an agent's
    write: which key).
    """

    def __init__(
        self,
        user,
        text,
        kind,
        *,
        org=None,
        replaces=None,
        session=None,
        run=None,
        source_turns=(),
        origin=MemoryFact.Origin.EXTRACTED,
        added_by=None,
        reason="",
        vectors=None,
        checked=None,
        kept=False,
    ):
        try:
            checked = checked or check(text, kind, vectors)
        except FactRejected as exc:
            if exc.judgement is not None:  # refused by the judge (not a wrong shape): kept for the audit
                record_refusal(user, org, text, kind, exc.judgement, origin, reason)
            raise
        if org is not None and about_one_person(checked.text):
            raise FactRejected(ORG_FACT_ABOUT_A_PERSON)
        self.text, self.kind, self.vector = checked.text, checked.kind, checked.vector
        self.judgement = checked.judgement
        # A candidate that may claim authority waits for the person's word, unless this is their word.
        self.held = checked.pending and not kept
        self.user, self.org, self.replaces = user, org, replaces
        self.session, self.run, self.source_turns = session, run, list(source_turns)
        self.origin, self.added_by, self.reason = origin, added_by, reason
        self.actor = _actor_for(origin)
        if replaces is not None:
            self.live = MemoryFact.objects.none()
        elif org is None:
            self.live = MemoryFact.objects.for_user(user).live()
        else:
            self.live = MemoryFact.objects.for_org(org).live()
        self.floor = neighbour_floor(self.text)
        self.neighbours, self.answer = [], []
        self.attempts = self.judge_calls = 0

    def judged_offline(self, backend_name):
        """Say in the audit trail that the offline judge gave the verdicts (the model did not answer in time)."""
        self.reason = f"{self.reason}; verdicts by the offline judge ({backend_name} unavailable)".lstrip("; ")

    def _neighbours(self):
        """The live facts the fact is judged against: the nearest few above its neighbour floor."""
        return list(self.live.nearest(self.vector, self.floor)[: settings.MEMORY["NEIGHBOUR_LIMIT"]])

    def judge(self, judge=None, usage=None):
        """Judge the fact against its live neighbours; call it with no transaction open and no lock held."""
        self.neighbours, self.answer = [], []
        self.attempts += 1
        if self.held or self.replaces is not None:
            return self  # a held candidate never confirms or supersedes anything; a correction names its fact
        if self.attempts > JUDGE_ATTEMPTS:
            # Its neighbours kept changing through every attempt: kept with no verdicts (it supersedes
            # nothing, and nothing is lost), and the audit trail says so.
            self.reason = f"{self.reason}; kept unjudged: its neighbours changed {JUDGE_ATTEMPTS} times".lstrip("; ")
            return self
        self.neighbours = self._neighbours()
        if self.neighbours:
            # The model call, with nothing held: a slow provider blocks no correction, deletion or erasure.
            judge = judge or backends.active_backend().verdicts
            self.answer, call_usage = judge(self.text, [n.text for n in self.neighbours])
            self.judge_calls += 1
            if usage is not None:
                usage.add(call_usage)
        return self

    def apply(self):
        """Write the judged fact; call it inside the caller's transaction. None when it must be judged again."""
        assert self.attempts, "judge() comes first"
        # Why the lock: two sessions of one user ending together must not both insert the same fact or
        # supersede each other's rows half-way. Held only for this short transaction, never over a call.
        _lock_owner(self.replaces or self.org or self.user)
        if self.org is None and self.replaces is None and not get_user_model().objects.filter(pk=self.user.pk).exists():
            # Erased while the fact was judged: the erasure held this lock and is committed now.
            raise Gone("this person's memory was erased meanwhile")
        if self.held:
            return self._hold()
        if self.replaces is not None:
            return self._apply_correction()
        if self.attempts <= JUDGE_ATTEMPTS and not _same_neighbours(self._neighbours(), self.neighbours):
            return None  # someone changed those facts while the model was thinking: the verdict may be stale
        return self._apply_verdicts(list(zip(self.neighbours, self.answer, strict=True)))

    def _apply_verdicts(self, verdicts):
        result = StoreResult(
            outcome="created",
            verdicts=[(n.id, v, 1 - n.distance) for n, v in verdicts],
            judge_calls=self.judge_calls,
        )
        duplicate = next((n for n, v in verdicts if v == "DUPLICATE"), None)
        contradicted = [n for n, v in verdicts if v == "CONTRADICTS"]
        protected = []
        if self.origin not in PERSON_ORIGINS:
            protected = [
                n for n in contradicted if n.origin in PERSON_ORIGINS and not _newer_statement(self.session, n)
            ]
        if duplicate is not None:
            if not self._confirm(duplicate):
                return None  # forgotten or replaced a moment ago: judge again against what is live
            result.outcome, result.fact = "confirmed", duplicate
        elif protected:
            # A person's own correction stands until they say something newer themselves.
            result.outcome, result.fact = "held", protected[0]
        elif (theirs := self._corrected_away()) is not None:
            # The very words the person corrected away: whatever the verdicts said, their version stands.
            result.outcome, result.fact = "held", theirs
        elif not contradicted and self.org is None and self.live.count() >= settings.MEMORY["MAX_FACTS_PER_USER"]:
            result.outcome = "at_limit"
        else:
            fact = self._insert()
            record_event(
                fact,
                FactEvent.Action.CREATED,
                self.actor,
                actor_user=self.added_by,
                session=self.session,
                reason=self.reason,
            )
            for old in contradicted:
                supersede(
                    old,
                    fact,
                    reason="contradicts",
                    actor=self.actor,
                    actor_user=self.added_by,
                    session=self.session,
                    note=self.reason,
                )
            result.fact, result.superseded = fact, contradicted
        return result

    def _corrected_away(self):
        """The person's live version when this text is one they corrected away themselves, else None."""
        if self.origin in PERSON_ORIGINS:
            return None
        owner = MemoryFact.objects.for_org(self.org) if self.org is not None else MemoryFact.objects.for_user(self.user)
        for old in owner.filter(superseded_at__isnull=False, text__iexact=self.text):
            current = old
            while current is not None and current.superseded_by_id is not None:
                current = MemoryFact.objects.filter(id=current.superseded_by_id).first()
            person_stands = current is not None and current.origin in PERSON_ORIGINS and current.expired_at is None
            if person_stands and not _newer_statement(self.session, current):
                return current
        return None

    def _confirm(self, duplicate):
        # Why an UPDATE with F(): confirmations are counted exactly even under concurrent writers. Why
        # the live condition: forgetting may have expired the row since it was read.
        now = clock.now()
        # One source counts once: the same conversation, or the same key with none, saying it again (a retry
        # loop) is no new evidence, and the count chooses the facts every conversation gets.
        counted = 0 if self._said_last(duplicate) else 1
        if (
            not MemoryFact.objects.live()
            .filter(id=duplicate.id)
            .update(last_confirmed_at=now, confirmation_count=F("confirmation_count") + counted)
        ):
            return False
        duplicate.refresh_from_db()
        record_event(
            duplicate,
            FactEvent.Action.CONFIRMED,
            self.actor,
            actor_user=self.added_by,
            session=self.session,
            reason=self.reason,
        )
        return True

    def _said_last(self, fact):
        """True when the fact's latest word (created or confirmed) came from this write's own source."""
        last = (
            FactEvent.objects.filter(
                fact_id=fact.id, action__in=[FactEvent.Action.CREATED, FactEvent.Action.CONFIRMED]
            )  # event_fact_idx
            .order_by("-created_at", "-id")
            .values("actor", "session_id", "reason")
            .first()
        )
        if last is None or last["actor"] != self.actor:
            return False
        if self.session is not None:
            return last["session_id"] == self.session.id
        return last["session_id"] is None and bool(self.reason) and last["reason"] == self.reason

    def _insert(self, **fields):
        now = clock.now()
        return MemoryFact.objects.create(
            user=self.user if self.org is None else None,
            org=self.org,
            scope=MemoryFact.Scope.PERSONAL if self.org is None else MemoryFact.Scope.ORG,
            text=self.text,
            kind=self.kind,
            embedding=self.vector,
            embedding_model=embeddings.model_name(),
            origin=self.origin,
            added_by=self.added_by,
            source_session=self.session,
            source_turns=self.source_turns,
            extraction_run=self.run,
            created_at=now,
            last_confirmed_at=now,
            **fields,
        )

    def _hold(self):
        """Keep the candidate out of memory until the person (an org admin, for the org tier) says so."""
        reason = self.judgement.reason or ""
        if self.org is not None:  # the org tier's word is an admin's: the proposals queue
            proposal = _queue_for_admins(self, reason)
            record_event(
                None,
                FactEvent.Action.PENDING,
                self.actor,
                actor_user=self.added_by,
                org_id=self.org.id,
                reason=f"proposal {proposal.id}: {reason}",
            )
            return StoreResult(outcome="pending", proposal=proposal)
        owner = self.replaces.user if self.replaces is not None else self.user
        candidate = FactCandidate.objects.create(
            user=owner,
            org=self.replaces.org if self.replaces is not None and owner is None else None,
            outcome=FactCandidate.Outcome.PENDING,
            text=self.text,
            kind=self.kind,
            reason=reason[:300],
            score=self.judgement.score,
            origin=self.origin,
            note=self.reason[:300],
            added_by=self.added_by,
            replaces=self.replaces,
            source_session=self.session,
            source_turns=self.source_turns,
            extraction_run=self.run,
        )
        record_event(
            None,
            FactEvent.Action.PENDING,
            self.actor,
            actor_user=self.added_by,
            session=self.session,
            user_id=candidate.user_id,
            org_id=candidate.org_id,
            reason=f"candidate {candidate.id}: {reason}",
        )
        return StoreResult(outcome="pending", candidate=candidate)

    def _apply_correction(self):
        old = MemoryFact.objects.select_for_update().filter(id=self.replaces.id).first()
        if old is None:
            raise Gone("this fact was deleted meanwhile")
        if old.superseded_at is not None:
            raise FactRejected("this fact has already been replaced; correct the current version instead")
        self.user, self.org = old.user, old.org
        self.session, self.source_turns = old.source_session, old.source_turns
        new = self._insert(confirmation_count=1)
        note = f"correction; {self.reason}" if self.reason else "correction"
        record_event(new, FactEvent.Action.CORRECTED, self.actor, actor_user=self.added_by, related=old, reason=note)
        supersede(old, new, reason="corrected", actor=self.actor, actor_user=self.added_by, note=self.reason)
        return StoreResult(outcome="corrected", fact=new, superseded=[old])


def _queue_for_admins(write, reason):
    """The held org candidate's proposal: a new one, or the one already waiting with the same text."""
    try:
        with transaction.atomic():  # a savepoint: proposal_pending_text_unique may refuse the insert
            return OrgFactProposal.objects.create(
                org=write.org,
                proposed_by=write.added_by or (write.session.user if write.session else None),
                text=write.text,
                kind=write.kind,
                source_session=write.session,
                extraction_run=write.run,
                held_reason=reason[:300],
            )
    except IntegrityError:
        waiting = OrgFactProposal.objects.filter(org=write.org, status=OrgFactProposal.Status.PENDING)
        return waiting.get(text__iexact=write.text)


def _lock_owner(owner):
    """Take the write lock of a user, an org, or the owner of a fact."""
    if isinstance(owner, MemoryFact):
        lock_org(owner.org_id) if owner.scope == MemoryFact.Scope.ORG else lock_user(owner.user_id)
    elif isinstance(owner, Organization):
        lock_org(owner.id)
    else:
        lock_user(owner.id)


def store(user, text, kind, *, judge=None, usage=None, **fields):
    """Write one fact: judged with nothing held, then applied in one short transaction.

    For callers with nothing of their own to do inside the write transaction; the others take
    FactWrite's two steps themselves. Raises FactRejected for what is not a storable fact.
    """
    return run(FactWrite(user, text, kind, **fields), judge, usage)


def run(write, judge=None, usage=None):
    """FactWrite's two steps in a loop, for a caller who built the write itself."""
    while True:
        write.judge(judge, usage)
        with transaction.atomic():
            result = write.apply()
        if result is not None:
            return result


def correct_fact(fact, text, kind, *, actor_user, origin=MemoryFact.Origin.USER, note=""):
    """A correction (by the person, an admin, or an agent for them): a new version that supersedes `fact`.

    The result's outcome is "corrected" (its fact is the new version), or "pending" when the judge holds
    the new text for the person's word (the candidate replaces `fact` once kept).
    """
    return store(fact.user, text, kind, org=fact.org, replaces=fact, origin=origin, added_by=actor_user, reason=note)


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


def record_refusal(user, org, text, kind, judgement, origin, note):
    """Keep a refused attempt for the console's poisoning audit (erased with the person)."""
    FactCandidate.objects.create(
        user=user,
        org=org if user is None else None,
        outcome=FactCandidate.Outcome.REFUSED,
        text=validation.normalise(str(text))[:2000],
        kind=str(kind)[:12],
        reason=(judgement.reason or "")[:300],
        score=judgement.score,
        origin=origin,
        note=note[:300],
    )


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
        _lock_owner(fact)
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

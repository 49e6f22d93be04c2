"""Forgetting and retention: expire facts that stopped earning their keep, purge them after a grace
period, and delete turns nobody needs for provenance."""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q

from memoryapp import clock, writing
from memoryapp.models import (
    AgentSession,
    FactEvent,
    ForgettingEntry,
    ForgettingRun,
    Membership,
    MemoryFact,
    RecallLog,
    Turn,
)
from memoryapp.vocabulary import ALWAYS_ON_KINDS, KINDS

STALE_GOAL = "stale_goal"
NEVER_RECALLED = "never_recalled"
RULE_LABELS = {
    STALE_GOAL: "not confirmed for too long",
    NEVER_RECALLED: "never recalled since it was written",
}
MODES = ("log", "enforce")
# Profile facts and constraints describe who someone is and the rules they work under: no timer.
TIMELESS_KINDS = ALWAYS_ON_KINDS
# Namespace for the session-level advisory lock that lets only one forgetting run at a time.
FORGETTING_LOCK = (1003, 1)
RETENTION_LOCK = (1003, 2)


class RestoreRefused(ValueError):
    """The fact cannot be restored (not expired, past the grace period, or not yours); the message says why."""


@dataclass(frozen=True)
class Rule:
    name: str
    condition: Q  # what a live fact must match, evaluated in SQL at the moment of expiry


def rules(now=None):
    """The forgetting rules in force, in priority order, built from MEMORY settings."""
    now = now or clock.now()
    memory = settings.MEMORY
    stale = Q(pk__in=[])
    for scope, by_kind in memory["STALE_DAYS"].items():
        for kind, days in (by_kind or {}).items():
            if days is None or kind in TIMELESS_KINDS or kind not in KINDS:
                continue
            stale |= Q(scope=scope, kind=kind, last_confirmed_at__lt=now - timedelta(days=days))
    never = Q(pk__in=[])
    for scope, days in memory["NEVER_RECALLED_DAYS"].items():
        if days is None:
            continue
        cutoff = now - timedelta(days=days)
        # The seed's rule exactly; only a restore (someone vouched for the fact) restarts its clock.
        restored = FactEvent.objects.filter(
            fact_id=OuterRef("id"), action=FactEvent.Action.RESTORED, created_at__gte=cutoff
        )
        recalled = RecallLog.objects.filter(fact_id=OuterRef("id"))  # recall_fact_idx
        never |= Q(scope=scope, created_at__lt=cutoff) & ~Exists(recalled) & ~Exists(restored)
    never &= ~Q(kind__in=TIMELESS_KINDS)
    return [Rule(STALE_GOAL, stale), Rule(NEVER_RECALLED, never)]


def _youngest_age():
    """The shortest age any rule needs: facts created more recently than this cannot match."""
    memory = settings.MEMORY
    days = [
        d for by_kind in memory["STALE_DAYS"].values() for k, d in (by_kind or {}).items() if k not in TIMELESS_KINDS
    ]
    days += list(memory["NEVER_RECALLED_DAYS"].values())
    days = [d for d in days if d is not None]
    return timedelta(days=min(days)) if days else None


def _try_lock(key):
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s, %s)", list(key))
        return cur.fetchone()[0]


def _unlock(key):
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_unlock(%s, %s)", list(key))


def run_forgetting(mode=None, batch=None, progress=None):
    """One forgetting pass over live facts in batches; returns the ForgettingRun, or None if one is already running.

    `log` records what would expire and changes nothing; `enforce` expires matching facts and
    purges facts expired longer ago than the grace period. `progress(examined, total, matched)`
    is called after each batch.
    """
    mode = mode or settings.MEMORY["FORGETTING_MODE"]
    if mode not in MODES:
        raise ValueError(f"forgetting mode must be one of {', '.join(MODES)}, not {mode!r}")
    batch = batch or settings.MEMORY["FORGETTING_BATCH"]
    # Why a session-level lock rather than a transaction one: the run commits batch by batch, and
    # a second run started meanwhile must see the first and do nothing. A dropped connection frees it.
    if not _try_lock(FORGETTING_LOCK):
        return None
    try:
        return _run(mode, batch, progress)
    finally:
        _unlock(FORGETTING_LOCK)


def _run(mode, batch, progress):
    now = clock.now()
    run = ForgettingRun.objects.create(mode=mode, started_at=now)
    youngest = _youngest_age()
    if youngest is not None:
        _expire_pass(run, mode, batch, progress, now, now - youngest)
    if mode == "enforce":
        run.removed = purge_expired(now=now, batch=batch)
    run.finished_at = clock.now()
    run.save(update_fields=["examined", "matched", "removed", "finished_at"])
    return run


def _expire_pass(run, mode, batch, progress, now, scan_cutoff):
    """Walk live facts old enough to match any rule, oldest first, by keyset over fact_live_created_idx."""
    candidates = MemoryFact.objects.live().filter(created_at__lt=scan_cutoff)
    total = candidates.count()
    active_rules = rules(now)
    for ids in _keyset_batches(candidates, batch):
        with transaction.atomic():
            run.matched += _apply_rules(run, mode, ids, active_rules, now)
        run.examined += len(ids)
        ForgettingRun.objects.filter(id=run.id).update(examined=run.examined, matched=run.matched)
        if progress is not None:
            progress(run.examined, total, run.matched)


def _keyset_batches(queryset, size):
    """Ids of `queryset` in (created_at, id) order, `size` at a time: no OFFSET, memory flat."""
    cursor = None
    while True:
        page = queryset
        if cursor is not None:
            page = page.filter(Q(created_at__gt=cursor[0]) | Q(created_at=cursor[0], id__gt=cursor[1]))
        keys = list(page.order_by("created_at", "id").values_list("created_at", "id")[:size])
        if not keys:
            return
        cursor = keys[-1]
        yield [k[1] for k in keys]
        if len(keys) < size:
            return


def _apply_rules(run, mode, ids, active_rules, now):
    """Match one batch against the rules; in enforce mode expire the matches. Returns how many matched."""
    taken = set()
    entries, expired = [], []
    for rule in active_rules:
        qs = MemoryFact.objects.filter(id__in=ids).live().filter(rule.condition).exclude(id__in=taken)
        if mode == "enforce":
            # Why skip_locked: a row locked by a writer (a confirmation in flight) is left for the
            # next run rather than expired on a stale read or deadlocked against the writer.
            qs = qs.select_for_update(skip_locked=True)
        rows = list(qs.values_list("id", "user_id", "org_id"))
        if not rows:
            continue
        matched_ids = [r[0] for r in rows]
        taken.update(matched_ids)
        if mode == "enforce":
            MemoryFact.objects.filter(id__in=matched_ids).update(expired_at=now, expired_rule=rule.name)
            expired += [(rule.name, rows)]
        entries += [
            ForgettingEntry(run=run, fact_id=fid, user_id=uid, rule=rule.name, applied=mode == "enforce")
            for fid, uid, _ in rows
        ]
    ForgettingEntry.objects.bulk_create(entries)
    for rule_name, rows in expired:
        writing.record_events(
            rows, FactEvent.Action.EXPIRED, FactEvent.Actor.FORGETTING, reason=rule_name, created_at=now
        )
    return len(entries)


def purge_expired(now=None, batch=None):
    """Delete facts expired longer ago than the grace period; only a deletion event remains. Returns the count."""
    now = now or clock.now()
    batch = batch or settings.MEMORY["FORGETTING_BATCH"]
    cutoff = now - timedelta(days=settings.MEMORY["FORGETTING_GRACE_DAYS"])
    removed = 0
    last_id = None
    while True:
        with transaction.atomic():
            qs = MemoryFact.objects.filter(expired_at__lt=cutoff)
            if last_id is not None:
                qs = qs.filter(id__gt=last_id)
            # A fact being restored right now is locked: leave it.
            rows = list(
                qs.order_by("id").select_for_update(skip_locked=True).values_list("id", "user_id", "org_id")[:batch]
            )
            if not rows:
                break
            last_id = rows[-1][0]
            ids = [r[0] for r in rows]
            writing.remove_facts(ids)
            writing.record_events(
                rows,
                FactEvent.Action.DELETED,
                FactEvent.Actor.FORGETTING,
                reason="expired and not restored within the grace period",
                created_at=now,
            )
            removed += len(rows)
        if len(rows) < batch:
            break
    return removed


def can_restore(fact, actor_user):
    """Staff, the fact's owner, or an admin of the fact's organisation may restore it."""
    if actor_user is None or not actor_user.is_authenticated:
        return False
    if actor_user.is_staff:
        return True
    if fact.scope == MemoryFact.Scope.PERSONAL:
        return fact.user_id == actor_user.id
    return Membership.objects.filter(org_id=fact.org_id, user=actor_user, role=Membership.Role.ADMIN).exists()


def restore_deadline(fact):
    """When an expired fact stops being restorable (None if it is not expired)."""
    if fact.expired_at is None:
        return None
    return fact.expired_at + timedelta(days=settings.MEMORY["FORGETTING_GRACE_DAYS"])


def restore_fact(fact, actor_user):
    """Bring an expired fact back into recall within the grace period; counts as a confirmation."""
    if not can_restore(fact, actor_user):
        raise RestoreRefused("Only the person it is about, an admin of its organisation, or staff can restore it.")
    with transaction.atomic():
        if fact.scope == MemoryFact.Scope.ORG:
            writing.lock_org(fact.org_id)
        else:
            writing.lock_user(fact.user_id)
        locked = MemoryFact.objects.select_for_update().filter(id=fact.id).first()
        if locked is None:
            raise RestoreRefused("This fact has already been removed for good.")
        if locked.expired_at is None:
            raise RestoreRefused("This fact has not expired, so there is nothing to restore.")
        if locked.superseded_at is not None:
            raise RestoreRefused("This fact has been replaced by a newer one; it cannot come back.")
        now = clock.now()
        if now > restore_deadline(locked):
            raise RestoreRefused("The grace period for restoring this fact is over.")
        rule = locked.expired_rule
        # Restoring vouches for the fact: it counts as a confirmation, and the never-recalled
        # rule skips facts restored within its window (see rules()).
        MemoryFact.objects.filter(id=locked.id).update(expired_at=None, expired_rule="", last_confirmed_at=now)
        if actor_user.is_staff and actor_user.id != locked.user_id:
            actor = FactEvent.Actor.STAFF
        elif locked.scope == MemoryFact.Scope.ORG:
            actor = FactEvent.Actor.ORG_ADMIN
        else:
            actor = FactEvent.Actor.USER
        writing.record_event(
            locked,
            FactEvent.Action.RESTORED,
            actor,
            actor_user=actor_user,
            reason=f"restored after {rule}" if rule else "restored",
        )
    fact.refresh_from_db()
    return fact


# --- retention of turns -----------------------------------------------------------

_UNNEEDED_TURNS = f"""
    SELECT t.id FROM {Turn._meta.db_table} t
    JOIN {AgentSession._meta.db_table} s ON s.id = t.session_id
    WHERE t.id = ANY(%s)
      AND s.extraction_status NOT IN ('pending', 'queued', 'running')
      AND NOT EXISTS (
        SELECT 1 FROM {MemoryFact._meta.db_table} f
        WHERE f.source_session_id = t.session_id AND t.ordinal = ANY(f.source_turns)
          AND f.superseded_at IS NULL AND f.expired_at IS NULL
      )
"""


RECALL_MESSAGE_DAYS = 31  # the recall review samples sessions recalled in the last 31 days


def apply_retention(now=None, batch=None):
    """Delete turns older than TURN_RETENTION_DAYS unless they are the source of a live fact, and
    clear the recall message kept for review once the review window has passed; returns the turn count."""
    now = now or clock.now()
    batch = batch or settings.MEMORY["FORGETTING_BATCH"]
    cutoff = now - timedelta(days=settings.MEMORY["TURN_RETENTION_DAYS"])
    if not _try_lock(RETENTION_LOCK):
        return 0
    try:
        deleted = 0
        for ids in _keyset_batches(Turn.objects.filter(created_at__lt=cutoff), batch):
            with transaction.atomic(), connection.cursor() as cur:
                # Extraction still pending for a session needs its turns; a live fact keeps its sources.
                cur.execute(_UNNEEDED_TURNS, [ids])
                doomed = [row[0] for row in cur.fetchall()]
                deleted += Turn.objects.filter(id__in=doomed).delete()[0]
        AgentSession.objects.filter(memory_block_at__lt=now - timedelta(days=RECALL_MESSAGE_DAYS)).exclude(
            memory_block_message=""
        ).update(memory_block_message="")
        return deleted
    finally:
        _unlock(RETENTION_LOCK)

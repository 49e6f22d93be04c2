"""Candidates waiting for the person's word: keep (stored through the write path), discard, or lapse.

The judge holds a candidate that might claim authority, a permission, an approval or an instruction
(memoryapp/validation.judge). A false alarm costs the person one click; a real attack never reaches
a memory block, because nothing reads FactCandidate when building one.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.db.models.functions import TruncDate

from memoryapp import clock, writing
from memoryapp.models import FactCandidate, FactEvent


class Gone(Exception):
    """The candidate was kept, discarded or lapsed meanwhile (another tab, the nightly job)."""


def waiting_for(user):
    """The person's pending candidates, oldest first."""
    return list(FactCandidate.objects.pending().filter(user=user).order_by("created_at", "id"))


def keep(candidate, person, signed_in_by=""):
    """The person keeps a pending candidate: it is stored through the write path, as their own word.

    `signed_in_by`: who asked for the sign-in link of the session it was kept in, when one did ("API key
    'desk agent'"): whoever holds that key could have opened the link, so the trail says so."""
    link = f" in a session opened by a sign-in link that {signed_in_by} asked for" if signed_in_by else ""
    write = writing.FactWrite(
        candidate.user,
        candidate.text,
        candidate.kind,
        replaces=candidate.replaces if candidate.replaces and candidate.replaces.superseded_at is None else None,
        session=candidate.source_session,
        run=candidate.extraction_run,
        source_turns=candidate.source_turns,
        origin=candidate.origin,
        added_by=candidate.added_by,
        # Written now, said then: the trail's "created" must not read as the writer acting at this moment.
        reason="; ".join(
            filter(None, [candidate.note, f"held for the person's word since {candidate.created_at:%Y-%m-%d %H:%M}"])
        ),
        kept=True,
    )
    result = None
    while result is None:
        write.judge()  # the verdict call, nothing held
        with transaction.atomic():
            # The row lock makes one of two clicks (two tabs) win; the other finds it gone.
            locked = FactCandidate.objects.pending().select_for_update().filter(id=candidate.id).first()
            if locked is None:
                raise Gone()
            result = write.apply()  # under the person's lock; None when their memory moved meanwhile
            if result is not None:
                FactCandidate.objects.filter(id=locked.id).update(decision="kept", decided_at=clock.now())
                writing.record_event(
                    result.fact,
                    FactEvent.Action.KEPT,
                    FactEvent.Actor.USER,
                    actor_user=person,
                    user_id=candidate.user_id,
                    reason=f"kept by the person{link} ({result.outcome}); held because {candidate.reason}",
                )
    return result


def discard(candidate, person):
    """The person discards a pending candidate: nothing is stored, the trail says it happened."""
    with transaction.atomic():
        decided = FactCandidate.objects.pending().filter(id=candidate.id)
        if not decided.update(decision="discarded", decided_at=clock.now()):  # one of two clicks wins
            raise Gone()
        writing.record_event(
            None,
            FactEvent.Action.DISCARDED,
            FactEvent.Actor.USER,
            actor_user=person,
            user_id=candidate.user_id,
            org_id=candidate.org_id,
            reason=f"candidate {candidate.id}",
        )


def lapse(now=None):
    """Remove what waited longer than PENDING_DAYS (pending), or was kept for the audit that long (refused, decided)."""
    cutoff = (now or clock.now()) - timedelta(days=settings.MEMORY["PENDING_DAYS"])
    old = FactCandidate.objects.filter(created_at__lt=cutoff)
    with transaction.atomic():
        rows = list(old.pending().values_list("id", "user_id", "org_id"))
        writing.record_events(
            [(None, uid, oid) for _, uid, oid in rows],
            FactEvent.Action.LAPSED,
            FactEvent.Actor.FORGETTING,
            reason=f"nobody kept it within {settings.MEMORY['PENDING_DAYS']} days",
        )
        removed, _ = old.delete()
    return removed


def audit(limit=200):
    """The newest pending and refused candidates across everyone, and their counts per day, for staff."""
    recent = list(FactCandidate.objects.select_related("user", "org").order_by("-created_at", "-id")[:limit])
    per_day = (
        FactCandidate.objects.annotate(day=TruncDate("created_at"))
        .values("day", "outcome")
        .annotate(n=Count("id"))
        .order_by("-day", "outcome")
    )
    days = {}
    for row in per_day:
        days.setdefault(row["day"], {"pending": 0, "refused": 0})[row["outcome"]] = row["n"]
    return recent, sorted(days.items(), reverse=True)

"""Erasure: the one code path that removes every trace of a person's memory."""

import hashlib
import hmac
from collections import Counter

from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.sessions.models import Session
from django.db import transaction

from memoryapp import clock, writing
from memoryapp.models import AgentSession, ErasureReceipt, MemoryFact, OrgFactProposal


def subject_ref(user_id):
    """A keyed, non-reversible reference to a user id, for receipts."""
    return hmac.new(settings.SECRET_KEY.encode(), f"user:{user_id}".encode(), hashlib.sha256).hexdigest()


def _login_sessions(user_id):
    """Django login sessions that belong to the user (their data is encoded, so decode each)."""
    ids = []
    for session in Session.objects.filter(expire_date__gt=clock.now()).iterator(chunk_size=1000):
        try:
            if str(session.get_decoded().get("_auth_user_id")) == str(user_id):
                ids.append(session.session_key)
        except Exception:  # noqa: BLE001 - an undecodable session belongs to nobody we can name
            continue
    return ids


def erase_user(user, requested_via):
    """Remove every row keyed by `user` (facts, sessions, turns, runs, events, logs, links) and the account.

    Org facts the user proposed stay in the org tier without their identity or session links;
    their pending proposals go. Returns an ErasureReceipt holding counts and a keyed reference only.
    """
    user_id = user.pk
    counts = Counter()
    with transaction.atomic():
        # Why: the lock waits for any in-flight write for this user (an extraction holding it)
        # to commit, so nothing lands after the erasure and resurrects a row.
        writing.lock_user(user_id)
        # Extraction holds the session row lock for the whole run; take them all so a running
        # extraction finishes (or we wait) before its rows are deleted.
        list(AgentSession.objects.select_for_update().filter(user_id=user_id).values_list("id", flat=True))
        counts["pending org proposals"] = OrgFactProposal.objects.filter(
            proposed_by_id=user_id, status=OrgFactProposal.Status.PENDING
        ).delete()[0]
        # Org facts stay, stripped of who proposed them and of the sessions they came from.
        MemoryFact.objects.filter(scope=MemoryFact.Scope.ORG, added_by_id=user_id).update(added_by=None)
        MemoryFact.objects.filter(scope=MemoryFact.Scope.ORG, source_session__user_id=user_id).update(
            source_session=None, source_turns=[], extraction_run=None
        )
        OrgFactProposal.objects.filter(proposed_by_id=user_id).update(proposed_by=None, source_session=None)
        counts["admin log entries"] = LogEntry.objects.filter(user_id=user_id).delete()[0]
        counts["login sessions"] = Session.objects.filter(session_key__in=_login_sessions(user_id)).delete()[0]
        # The account row cascades to every table keyed by user_id.
        _, by_model = user.delete()
        for label, n in by_model.items():
            counts[label.split(".")[-1]] += n
        receipt = ErasureReceipt.objects.create(
            subject_ref=subject_ref(user_id),
            requested_via=requested_via,
            counts={k: v for k, v in sorted(counts.items()) if v},
        )
    return receipt

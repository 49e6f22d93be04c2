"""Erasure: the one code path that removes every trace of a person's memory."""

import hashlib
import hmac
from collections import Counter
from importlib import import_module

from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth import get_user_model
from django.contrib.contenttypes.models import ContentType
from django.contrib.sessions.models import Session
from django.core.cache import caches
from django.db import transaction
from django.db.models import Q

from memoryapp import clock, people, writing
from memoryapp.models import (
    AgentSession,
    ErasureReceipt,
    ExternalIdentity,
    Membership,
    MemoryFact,
    OrgFactProposal,
    SignIn,
    SupportAccess,
)

# Stable receipt keys for the tables an erasure touches; anything added later falls back to its model name.
COUNT_KEYS = {
    "user": "account",
    "memoryfact": "facts",
    "signin": "sign_ins",
    "factcandidate": "fact_candidates",
    "agentsession": "sessions",
    "turn": "turns",
    "extractionrun": "extraction_runs",
    "factevent": "fact_events",
    "recalllog": "recall_logs",
    "recallreview": "recall_reviews",
    "portallink": "portal_links",
    "supportaccess": "support_access_logs",
    "forgettingentry": "forgetting_entries",
    "memorysettings": "memory_settings",
    "externalidentity": "external_ids",
    "membership": "memberships",
    "invitation": "invitations",
    "user_groups": "group_memberships",
    "user_user_permissions": "permissions",
}
REQUESTED_VIA = ("api", "self", "command", "org", "staff")


class ErasureRefused(ValueError):
    """This erasure is not allowed from where it was asked; the message says why."""


def subject_ref(user_id):
    """A keyed, non-reversible reference to a user id, for receipts."""
    return hmac.new(settings.SECRET_KEY.encode(), f"user:{user_id}".encode(), hashlib.sha256).hexdigest()


def _login_sessions(user_id):
    """The person's sign-in session keys, recorded at each sign-in (memoryapp.signals)."""
    return list(SignIn.objects.filter(user_id=user_id).values_list("session_key", flat=True))


def _forget_cached_sessions(session_keys):
    """Drop cached copies of these sign-in sessions, for a cache-backed SESSION_ENGINE (a no-op for db)."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    prefix = getattr(store, "cache_key_prefix", None)
    if prefix is not None and session_keys:
        caches[settings.SESSION_CACHE_ALIAS].delete_many([prefix + key for key in session_keys])


def _admin_log_about(user_id):
    """Django admin history rows that name the user or one of their facts, sessions or identities."""
    User = get_user_model()
    about = Q(content_type=ContentType.objects.get_for_model(User), object_id=str(user_id))
    keyed = {
        MemoryFact: MemoryFact.objects.filter(user_id=user_id),
        AgentSession: AgentSession.objects.filter(user_id=user_id),
        ExternalIdentity: ExternalIdentity.objects.filter(user_id=user_id),
        Membership: Membership.objects.filter(user_id=user_id),
    }
    for model, qs in keyed.items():
        ids = [str(pk) for pk in qs.values_list("pk", flat=True)]
        if ids:
            about |= Q(content_type=ContentType.objects.get_for_model(model), object_id__in=ids)
    return LogEntry.objects.filter(Q(user_id=user_id) | about)


def _count_key(label):
    model_name = label.split(".")[-1].lower()
    return COUNT_KEYS.get(model_name, model_name)


def erase_user(user, requested_via):
    """Remove every row keyed by `user` (facts, sessions, turns, runs, events, logs, links) and the account.

    Org facts the user proposed stay in the org tier without their identity or session links;
    their pending and rejected proposals go. Returns an ErasureReceipt holding counts and a keyed
    reference only.
    """
    if requested_via not in REQUESTED_VIA:
        raise ValueError(f"requested_via must be one of {', '.join(REQUESTED_VIA)}")
    User = get_user_model()
    user_id = user.pk
    if user_id is None:  # Django clears the pk of a deleted instance
        raise ErasureRefused("This account has already been erased.")
    ref = subject_ref(user_id)
    counts = Counter()
    with transaction.atomic():
        # Lock order matters (see the concurrency tests). First the user's sessions: an extraction
        # takes its session row only for its short write transactions (never across a model call),
        # so this waits at most for one of those; afterwards the extraction finds its session gone
        # and writes nothing more, and a claim that starts meanwhile waits, then matches no row.
        # NO KEY UPDATE, so foreign-key checks of other writers are not blocked and cannot
        # deadlock against us.
        list(
            AgentSession.objects.select_for_update(no_key=True)
            .filter(user_id=user_id)
            .order_by("id")
            .values_list("id", flat=True)
        )
        # Then the user's write lock (corrections, deletions from the pages).
        writing.lock_user(user_id)
        # Last the account row itself: any insert still referencing it blocks on its foreign-key
        # check until we commit and then fails, so nothing can land after the erasure.
        if not User.objects.select_for_update().filter(pk=user_id).exists():
            raise ErasureRefused("This account has already been erased.")
        _refuse_last_admin(user_id)

        # Every id an org's assistant knew the person by (their own and those they linked) goes with them.
        identities = sorted(set(ExternalIdentity.objects.filter(user_id=user_id).values_list("org__name", flat=True)))
        facts = MemoryFact.objects.filter(user_id=user_id, scope=MemoryFact.Scope.PERSONAL)
        counts["facts_live"] = facts.live().count()
        counts["facts_superseded"] = facts.filter(superseded_at__isnull=False).count()
        counts["facts_expired"] = facts.filter(superseded_at__isnull=True, expired_at__isnull=False).count()

        counts["org_proposals"] = OrgFactProposal.objects.filter(
            proposed_by_id=user_id,
            status__in=[OrgFactProposal.Status.PENDING, OrgFactProposal.Status.REJECTED],
        ).delete()[0]
        # Org facts and approved proposals stay, stripped of who proposed them and where from.
        # Only what was the person's: an org fact from their conversation keeps the admin who approved it.
        org_facts = MemoryFact.objects.filter(scope=MemoryFact.Scope.ORG)
        from_them = Q(source_session__user_id=user_id) | Q(extraction_run__user_id=user_id)
        unlinked = set(org_facts.filter(Q(added_by_id=user_id) | from_them).values_list("id", flat=True))
        org_facts.filter(added_by_id=user_id).update(added_by=None)
        org_facts.filter(from_them).update(source_session=None, source_turns=[], extraction_run=None)
        counts["org_facts_unlinked"] = len(unlinked)
        OrgFactProposal.objects.filter(
            Q(proposed_by_id=user_id) | Q(source_session__user_id=user_id) | Q(extraction_run__user_id=user_id)
        ).update(proposed_by=None, source_session=None, extraction_run=None)
        # When the person was staff: their access-log lines about others keep a receipt reference, not a name.
        SupportAccess.objects.filter(staff_id=user_id).update(staff=None, staff_name=f"erased account {ref[:12]}")
        counts["admin_log_entries"] = _admin_log_about(user_id).delete()[0]
        login_keys = _login_sessions(user_id)
        counts["login_sessions"] = Session.objects.filter(session_key__in=login_keys).delete()[0]
        _forget_cached_sessions(login_keys)
        # The account row cascades to every table keyed by user_id (sessions cascade to turns,
        # runs and recall logs; facts to their recall logs and forgetting entries).
        signs_in = people.can_sign_in(user)
        _, by_model = user.delete()
        for label, n in by_model.items():
            counts[_count_key(label)] += n
        counts.pop("sign_ins", None)  # the index of the sign-in sessions counted above, not more of them
        if not signs_in:  # a person an assistant remembered, who never had an account of their own
            counts["remembered_person"] = counts.pop("account", 0)
        receipt = ErasureReceipt.objects.create(
            subject_ref=ref,
            requested_via=requested_via,
            created_at=clock.now(),
            counts={k: v for k, v in sorted(counts.items()) if v},
            identities=identities,
        )
    return receipt


def _refuse_last_admin(user_id):
    """ErasureRefused when the user is the only admin who can sign in of an organisation (left unmanaged).

    Called inside the erasure's transaction: the organisations are row-locked (the lock
    orgs.change_role and orgs.remove_member take first), so a demotion or a second erasure
    running at the same time waits and then sees the result of this one.
    """
    for org in people.last_admin_of(user_id, lock=True):
        raise ErasureRefused(
            f"This account is the only admin of {org.name}. Make another member an admin first, "
            "or delete the organisation; then the account can be erased."
        )


OPERATOR_REFUSAL = (
    "This person operates an organisation (a member, an admin, staff, or an account with a password), "
    "so only they can erase their memory, by signing in: neither an API key nor an organisation's admin can."
)


def operator_refusal(user):
    """Why no organisation may erase `user` (they operate one and manage their memory themselves), or None."""
    return OPERATOR_REFUSAL if people.operates(user) else None


def erase_member(org, user, requested_via="org"):
    """Erase a person on behalf of an organisation whose agent knows them (its API key).

    Refused for anyone who operates an organisation (member, admin, staff, password): an API key
    acts only on the people whose memory its agent keeps. Refused too when another organisation's
    agent also knows them: one organisation cannot erase memory that another holds.
    """
    if refused := operator_refusal(user):
        raise ErasureRefused(refused)
    if not ExternalIdentity.objects.filter(org=org, user=user).exists():
        raise ErasureRefused("This person is not a member of this organisation (its agent does not know them).")
    if (
        ExternalIdentity.objects.filter(user=user).exclude(org=org).exists()
        or Membership.objects.filter(user=user).exclude(org=org).exists()
    ):
        raise ErasureRefused(
            "This person also belongs to another organisation, so only they (or staff) can erase their memory."
        )
    return erase_user(user, requested_via)


def receipt_json(receipt):
    """The receipt as shown to whoever asked: when, how, how many rows of each kind, a keyed reference."""
    return {
        "receipt": str(receipt.id),
        "created_at": receipt.created_at.isoformat(),
        "requested_via": receipt.requested_via,
        "subject_ref": receipt.subject_ref,
        "counts": dict(receipt.counts),
        "identities": list(receipt.identities),
    }

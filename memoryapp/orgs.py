"""Team accounts: the org tier of facts, the proposal queue, members and invitations, API keys, deleting an org."""

import secrets
from collections import Counter
from datetime import timedelta

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Count, F, OuterRef, Q, Subquery

from memoryapp import backends, clock, embeddings, erasure, onetime, people, portal, sessions, validation, writing
from memoryapp.models import (
    AgentSession,
    ApiKey,
    ExternalIdentity,
    FactEvent,
    Invitation,
    Membership,
    MemoryFact,
    MemorySettings,
    Organization,
    OrgFactProposal,
    Scope,
)

ORG_ADMIN = MemoryFact.Origin.ORG_ADMIN
KEY_NAME_MAX = 100
INVITATION_NOTE_MAX = 100


class OrgError(ValueError):
    """An org action that is not allowed or not possible; the message says why, for a person."""


# --- who may do what ----------------------------------------------------------------


def membership_of(user, org):
    """The user's membership of `org`, or None."""
    if user is None or not user.is_authenticated:
        return None
    return Membership.objects.filter(user=user, org=org).first()


def is_admin(user, org):
    """True when the user is an admin of `org` (memory is never consulted for this)."""
    return Membership.objects.filter(user=user, org=org, role=Membership.Role.ADMIN).exists()


def memberships_for(request):
    """The signed-in person's memberships with their organisations, by name, read once per request.

    Why once: the header lists them on every page and an org page checks one of them; two reads cost a
    query each on every org page.
    """
    if not hasattr(request, "_memberships"):
        memberships = Membership.objects.filter(user=request.user).select_related("org").order_by("org__name")
        request._memberships = list(memberships)
    return request._memberships


# --- the org tier ---------------------------------------------------------------------


KIND_HEADINGS = {"constraint": "Constraints", "profile": "Profile", "preference": "Preferences", "goal": "Goals"}


def live_facts(org):
    """The org's live facts grouped by kind: [(kind, heading, facts)], each fact with who proposed or corrected it."""
    facts = list(
        MemoryFact.objects.for_org(org).live().for_display().select_related("added_by").order_by("-created_at", "id")
    )
    proposals = _proposals_for(facts)
    corrected = set(
        MemoryFact.objects.filter(superseded_by_id__in=[f.id for f in facts], supersede_reason="corrected").values_list(
            "superseded_by_id", flat=True
        )
    )
    for fact in facts:
        fact.proposal = proposals.get(fact.id)
        fact.is_correction = fact.id in corrected
    return [
        (kind, heading, [f for f in facts if f.kind == kind])
        for kind, heading in KIND_HEADINGS.items()
        if any(f.kind == kind for f in facts)
    ]


EXPIRY_LABELS = {"stale_goal": "not confirmed for a long time", "never_recalled": "never recalled"}


def expired_facts(org):
    """Org facts the forgetting job has expired (not superseded), newest first."""
    facts = list(
        MemoryFact.objects.for_org(org)
        .for_display()
        .filter(superseded_at__isnull=True, expired_at__isnull=False)
        .order_by("-expired_at", "id")
    )
    for fact in facts:
        fact.rule_label = EXPIRY_LABELS.get(fact.expired_rule, fact.expired_rule.replace("_", " "))
    return facts


def _proposals_for(facts):
    """fact id -> the latest approved proposal that produced or confirmed it."""
    proposals = (
        OrgFactProposal.objects.filter(fact_id__in=[f.id for f in facts], status=OrgFactProposal.Status.APPROVED)
        .select_related("proposed_by")
        .order_by("decided_at")
    )
    return {p.fact_id: p for p in proposals}


def add_fact(org, admin, text, kind):
    """An admin adds a fact to the org tier; a duplicate confirms the existing one, a contradiction supersedes it."""
    write = writing.FactWrite(None, text, kind, org=org, origin=ORG_ADMIN, added_by=admin)
    return writing.run(write, backends.request_verdicts(write.judged_offline))


def correct_fact(fact, admin, text, kind):
    """An admin corrects an org fact: a new fact that supersedes it."""
    return writing.correct_fact(fact, text, kind, actor_user=admin, origin=ORG_ADMIN)


def delete_fact(fact, admin):
    """An admin deletes an org fact (and its superseded history)."""
    return writing.delete_fact(
        fact, actor=FactEvent.Actor.ORG_ADMIN, actor_user=admin, reason="deleted by an org admin"
    )


# --- proposals ------------------------------------------------------------------------


def pending_proposals(org):
    """The admin's queue, oldest first, with who proposed each one and the org facts each is close to."""
    proposals = _named(
        org,
        OrgFactProposal.objects.filter(org=org, status=OrgFactProposal.Status.PENDING)
        .select_related("proposed_by")
        .order_by("created_at", "id"),
    )
    _with_related(org, proposals)
    return proposals


def _with_related(org, proposals, limit=3):
    """Set each proposal's `related`: the live org facts its verdicts would weigh it against (the nearest above
    its neighbour floor), so an admin sees "Never deploy on Fridays." beside "The team deploys on Fridays."."""
    for proposal in proposals:
        proposal.related = []
    # One read of the tier's vectors and one batch of embeddings, not a query per proposal: a tier is small.
    facts = list(MemoryFact.objects.for_org(org).live().for_model(embeddings.model_name()).only("text", "embedding"))
    if not proposals or not facts:
        return
    tier = np.array([f.embedding for f in facts], dtype=np.float32)
    for proposal, vector in zip(proposals, embeddings.embed_many([p.text for p in proposals]), strict=True):
        scores = tier @ vector
        floor = writing.neighbour_floor(proposal.text)
        proposal.related = [facts[i] for i in np.argsort(-scores)[:limit] if scores[i] >= floor]


def recent_decisions(org, limit=10):
    """The latest approved or rejected proposals, newest first."""
    return _named(
        org,
        OrgFactProposal.objects.filter(org=org)
        .exclude(status=OrgFactProposal.Status.PENDING)
        .select_related("proposed_by", "decided_by")
        .order_by("-decided_at", "-id")[:limit],
    )


def _named(org, proposals):
    """The proposals, each with `proposer_name`: a member's name, or the org's own id for a person its agents
    remember (their internal username means nothing to an admin), or None for a former member."""
    proposals = list(proposals)
    known = dict(
        ExternalIdentity.objects.filter(org=org, user_id__in={p.proposed_by_id for p in proposals}).values_list(
            "user_id", "external_id"
        )
    )
    for p in proposals:
        person = p.proposed_by
        if person is None:
            p.proposer_name = None
        elif person.pk in known and not people.can_sign_in(person):
            p.proposer_name = f"{known[person.pk]} (a person your agents remember)"
        else:
            p.proposer_name = person.get_full_name() or person.get_username()
    return proposals


def _claim(proposal):
    """Lock a pending proposal for a decision; a second admin deciding at the same time gets an error."""
    locked = OrgFactProposal.objects.select_for_update().filter(id=proposal.id).first()
    if locked is None:
        raise OrgError("This proposal was withdrawn by the person whose conversation suggested it.")
    if locked.status != OrgFactProposal.Status.PENDING:
        raise OrgError("This proposal has already been decided.")
    return locked


def approve_proposal(proposal, admin, text=None, kind=None):
    """Publish a proposal (possibly edited) into the org tier through the supersession logic."""
    text = proposal.text if text is None else text
    kind = proposal.kind if kind is None else kind
    if proposal.status != OrgFactProposal.Status.PENDING:
        raise OrgError("This proposal has already been decided.")
    write = writing.FactWrite(
        None,
        text,
        kind,
        org=proposal.org,
        session=proposal.source_session,
        run=proposal.extraction_run,
        origin=ORG_ADMIN,
        added_by=admin,
        kept=True,  # the admin's approval is the word a held candidate waits for
    )
    result = None
    while result is None:
        write.judge()  # the verdict call, nothing held
        # The proposal and the fact in one short transaction: both happen, or neither.
        with transaction.atomic():
            locked = _claim(proposal)  # the row lock makes one of two deciding admins win
            result = write.apply()  # under the org's lock; None when the tier moved meanwhile
            if result is not None:
                _approved(locked, admin, result)
    return result


def _approved(proposal, admin, result):
    proposal.status, proposal.decided_by, proposal.decided_at, proposal.fact = (
        OrgFactProposal.Status.APPROVED,
        admin,
        clock.now(),
        result.fact,
    )
    proposal.save(update_fields=["status", "decided_by", "decided_at", "fact"])
    writing.record_event(
        result.fact,
        FactEvent.Action.APPROVED,
        FactEvent.Actor.ORG_ADMIN,
        actor_user=admin,
        reason=f"proposal {proposal.id} ({result.outcome})",
    )


def reject_proposal(proposal, admin):
    """Turn a proposal down; nothing reaches the org tier."""
    with transaction.atomic():
        locked = _claim(proposal)
        locked.status, locked.decided_by, locked.decided_at = OrgFactProposal.Status.REJECTED, admin, clock.now()
        locked.save(update_fields=["status", "decided_by", "decided_at"])
        writing.record_event(
            None,
            FactEvent.Action.REJECTED,
            FactEvent.Actor.ORG_ADMIN,
            actor_user=admin,
            org_id=locked.org_id,
            reason=f"proposal {locked.id}",
        )
    return locked


def withdraw_proposal(proposal, user):
    """The person whose conversation suggested it takes a pending proposal back; False once decided."""
    # One conditional DELETE: an admin's approval racing this either wins (row no longer pending)
    # or finds nothing to claim.
    removed, _ = OrgFactProposal.objects.filter(
        id=proposal.id, proposed_by=user, status=OrgFactProposal.Status.PENDING
    ).delete()
    return bool(removed)


# --- members --------------------------------------------------------------------------


def members(org, membership_id=None):
    """The people who joined the org by invitation (they sign in), admins first, then by name."""
    found = Membership.objects.filter(org=org)
    if membership_id is not None:
        found = found.filter(id=membership_id)
    found = list(found.select_related("user").order_by("role", "user__username"))
    for m in found:
        m.name = m.user.get_full_name() or m.user.username
        m.can_sign_in = people.can_sign_in(m.user)
    return found


def remembered(org):
    """The people the org's agents keep memory about, by the org's own id: live facts and last session each.

    Never their facts, and nothing about their account (a linked account's username, e-mail or other
    organisations stay out): only what the org's own agents already know.
    """
    live = MemoryFact.objects.live().filter(scope=MemoryFact.Scope.PERSONAL, user=OuterRef("user")).values("user")
    last = AgentSession.objects.filter(user=OuterRef("user"), org=org).order_by("-started_at").values("started_at")
    found = list(
        ExternalIdentity.objects.filter(org=org)
        .select_related("user")
        .annotate(
            live_facts=Subquery(live.annotate(n=Count("id")).values("n")[:1]),
            last_session=Subquery(last[:1]),
        )
        .order_by("external_id")
    )
    for ident in found:
        ident.live_facts = ident.live_facts or 0
        # A person who linked the id to their own account manages (and erases) it themselves.
        ident.manages_own = people.operates(ident.user)
    return found


def remembered_person(org, identity_id):
    """The org's identity with this id, or None."""
    return ExternalIdentity.objects.select_related("user", "org").filter(org=org, id=identity_id).first()


def portal_link_for(identity, base_url, admin):
    """A one-time "My memory" link for a remembered person, to pass on to them: (url, expires_at)."""
    made_by = f"{admin.get_username()}, an admin of {identity.org.name}"
    try:
        return portal.issue_link(
            identity.user, base_url=base_url, org=identity.org, made_by=made_by, made_by_user=admin
        )
    except portal.NotAllowed as exc:
        raise OrgError(str(exc)) from None


def erase_refusal(identity):
    """Why this org cannot erase the remembered person at all (they sign in and manage it themselves), or None."""
    return erasure.operator_refusal(identity.user)


def erase_remembered(identity):
    """Erase a remembered person and everything held about them, for their org (through the one erasure path)."""
    try:
        return erasure.erase_member(identity.org, identity.user, requested_via="org")
    except erasure.ErasureRefused as exc:
        raise OrgError(str(exc)) from None


# --- invitations: the only way in; nobody is attached to an org without their own consent ------

INVITATION_UNUSABLE = "This invitation can't be used: it was already used, revoked, or it expired. Ask for a new one."


_token_hash = onetime.token_hash


def invite(org, admin, role=Membership.Role.MEMBER, note=""):
    """A new one-time invitation to `org`: returns (Invitation, token); only the token's hash is stored."""
    if role not in Membership.Role.values:
        raise OrgError("Choose a role: admin or member.")
    note = " ".join((note or "").split())
    if len(note) > INVITATION_NOTE_MAX:
        raise OrgError(f"A note is at most {INVITATION_NOTE_MAX} characters.")
    token = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        org=org,
        role=role,
        note=note,
        token_hash=_token_hash(token),
        created_by=admin,
        expires_at=clock.now() + timedelta(days=settings.MEMORY["INVITATION_DAYS"]),
    )
    return invitation, token


def pending_invitations(org):
    """Invitations to `org` nobody has used yet and that still work, newest first."""
    return list(Invitation.objects.filter(org=org).pending().order_by("-created_at", "-id"))


def revoke_invitation(invitation):
    """Stop an invitation working at once."""
    Invitation.objects.filter(id=invitation.id, revoked_at__isnull=True).update(revoked_at=clock.now())


def invitation_for(token):
    """The pending invitation behind `token`, with its org; OrgError (one message for every reason) otherwise."""
    invitation = Invitation.objects.pending().select_related("org").filter(token_hash=_token_hash(token or "")).first()
    if invitation is None:
        raise OrgError(INVITATION_UNUSABLE)
    return invitation


def accept_invitation(token, user):
    """`user` accepts the invitation (their own consent): they join its org with its role, once.

    Only an account that signs in can join: a remembered person is never a member.
    """
    if not people.can_sign_in(user):
        raise OrgError("Only an account with a password can join an organisation. Sign in with one first.")
    with transaction.atomic():
        # Locked so the same link opened twice at once makes one membership, never two.
        invitation = Invitation.objects.select_for_update().filter(token_hash=_token_hash(token or "")).first()
        if invitation is None or not Invitation.objects.filter(id=invitation.id).pending().exists():
            raise OrgError(INVITATION_UNUSABLE)
        if Membership.objects.filter(org_id=invitation.org_id, user=user).exists():
            raise OrgError("You are already a member of this organisation.")
        membership = Membership.objects.create(org_id=invitation.org_id, user=user, role=invitation.role)
        Invitation.objects.filter(id=invitation.id).update(accepted_at=clock.now(), accepted_by=user)
    return membership


def join_with_new_account(token, username, password):
    """Create the invitee's own account (their username and password) and accept the invitation with it."""
    User = get_user_model()
    with transaction.atomic():
        invitation_for(token)  # a dead link creates no account
        user = User.objects.create_user(username=username, password=password)
        MemorySettings.objects.create(user=user)
        membership = accept_invitation(token, user)
    return membership


LAST_ADMIN = "An organisation needs at least one admin who can sign in: make someone else admin first."


def _lock_admins(org_id):
    """Lock the org row (then its admin memberships) and return the ids of its admins who can sign in.

    Why the org row: it is the one lock every role change, removal and erasure takes first, so two
    admins demoting each other at once queue, and the second sees the first's result.
    """
    Organization.objects.select_for_update().get(id=org_id)
    admins = Membership.objects.select_for_update().filter(org_id=org_id, role=Membership.Role.ADMIN)
    list(admins.values_list("id", flat=True))
    return set(admins.who_can_sign_in().values_list("id", flat=True))


def change_role(membership, role):
    """Make a member an admin or an admin a member; only someone who signs in may be admin, and the last one stays."""
    if role not in Membership.Role.values:
        raise OrgError("Choose a role: admin or member.")
    with transaction.atomic():
        admins = _lock_admins(membership.org_id)
        if role == Membership.Role.ADMIN and not people.can_sign_in(membership.user):
            raise OrgError("Only someone who signs in with their own account can be an admin.")
        if role == Membership.Role.MEMBER and admins == {membership.id}:
            raise OrgError(LAST_ADMIN)
        Membership.objects.filter(id=membership.id).update(role=role)
    membership.role = role
    return membership


def remove_member(membership):
    """Take someone out of the org: their personal memory stays theirs, their org-tier recall stops at once."""
    with transaction.atomic():
        admins = _lock_admins(membership.org_id)
        if admins == {membership.id}:
            raise OrgError(
                "The last admin cannot leave or be removed: make someone else admin first, or delete the organisation."
            )
        user_id, org_id = membership.user_id, membership.org_id
        Membership.objects.filter(id=membership.id).delete()
        _forget_identity(user_id, org_id)
        # Open sessions computed their block while the person was a member; recompute without the org tier.
        AgentSession.objects.filter(user_id=user_id, org_id=org_id, ended_at__isnull=True).update(
            memory_block=None, memory_block_at=None
        )


def _forget_identity(user_id, org_id):
    """Org facts and proposals stay with the org, but no longer say who proposed or added them."""
    OrgFactProposal.objects.filter(org_id=org_id, proposed_by_id=user_id).update(
        proposed_by=None, source_session=None, extraction_run=None
    )
    OrgFactProposal.objects.filter(org_id=org_id, decided_by_id=user_id).update(decided_by=None)
    org_facts = MemoryFact.objects.filter(scope=MemoryFact.Scope.ORG, org_id=org_id)
    org_facts.filter(added_by_id=user_id).update(added_by=None)
    org_facts.filter(source_session__user_id=user_id).update(source_session=None, source_turns=[], extraction_run=None)


# --- API keys -------------------------------------------------------------------------


def api_keys(org):
    """The org's keys, active first, newest first."""
    # NULLs would sort last in PostgreSQL's ascending order: the live keys (never revoked) come first.
    return list(ApiKey.objects.filter(org=org).order_by(F("revoked_at").asc(nulls_first=True), "-created_at"))


def create_key(org, name, scopes):
    """A new API key with these scopes: returns (ApiKey, the key), the key to be shown once."""
    if "\x00" in (name or ""):
        raise OrgError("A key name cannot hold a null character.")
    name = validation.normalise(name or "")  # one line of visible text: no control or invisible characters
    if not name:
        raise OrgError("Give the key a name, so you can tell it apart later.")
    if len(name) > KEY_NAME_MAX:
        raise OrgError(f"A key name is at most {KEY_NAME_MAX} characters.")
    # Names tell live keys apart; this also stops a reloaded form from minting a second key.
    if ApiKey.objects.active().filter(org=org, name__iexact=name).exists():
        raise OrgError(
            f"A live key is already named “{name}”. Its key was shown once, when it was made: "
            "if you did not copy it, revoke that key and make a new one."
        )
    chosen = [s for s in Scope.values if s in set(scopes or ())]
    if not chosen or len(chosen) != len(set(scopes)):
        raise OrgError(f"Choose what the key may do: {', '.join(Scope.values)} (at least one).")
    return sessions.create_api_key(org, name, chosen)


def revoke_key(api_key):
    """Stop a key working at once; the row stays so its name and last use remain visible."""
    ApiKey.objects.filter(id=api_key.id, revoked_at__isnull=True).update(revoked_at=clock.now())
    api_key.refresh_from_db()
    return api_key


# --- deleting an organisation ---------------------------------------------------------


def delete_org(org):
    """Erase an org: its tier, proposals, memberships, API keys and agent ids. Members' personal memory stays.

    Returns counts of what went.
    """
    counts = Counter()
    with transaction.atomic():
        writing.lock_org(org.id)
        Organization.objects.select_for_update().get(id=org.id)
        org_fact_ids = list(MemoryFact.objects.filter(org=org).values_list("id", flat=True))
        # Sessions stay (they are the members' own); a cached block quoting the org tier goes.
        quoted = AgentSession.objects.filter(recall_logs__fact_id__in=org_fact_ids).values("id")
        counts["memory blocks cleared"] = AgentSession.objects.filter(id__in=quoted).update(
            memory_block=None, memory_block_at=None
        )
        counts["fact events"] = _delete(FactEvent.objects.filter(Q(org=org) | Q(fact_id__in=org_fact_ids)))
        counts["proposals"] = _delete(OrgFactProposal.objects.filter(org=org))
        counts["org facts"] = _delete(MemoryFact.objects.filter(org=org))
        counts["memberships"] = _delete(Membership.objects.filter(org=org))
        counts["api keys"] = _delete(ApiKey.objects.filter(org=org))
        counts["agent ids"] = _delete(ExternalIdentity.objects.filter(org=org))
        org.delete()
    return {k: v for k, v in counts.items() if v}


def _delete(qs):
    """Delete and count the rows of the queryset's own model (not what cascaded from them)."""
    return qs.delete()[1].get(qs.model._meta.label, 0)

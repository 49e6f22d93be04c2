"""One person, one memory: a signed-in person links an agent's id for them to their own account.

Only by their own action (a portal link opened while signed in, and "This is me" pressed): no API
key, admin or name match ever links. Linking moves everything the remembered person had into the
account: each live fact is re-judged into the account's memory through the write path (a duplicate
confirms, a contradiction supersedes), superseded and expired history moves as it is, and the
sessions, turns, runs, proposals, events and logs follow; the identity then names the account and
the empty remembered person is removed. Nothing is lost silently: a fact that cannot be re-judged
moves as it is.
"""

from collections import Counter
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db import transaction

from memoryapp import clock, people, sessions, writing
from memoryapp.models import (
    AgentSession,
    ExternalIdentity,
    FactEvent,
    Membership,
    MemoryFact,
    MemorySettings,
    PortalLink,
)

# How many times the remembered person's live facts are re-judged when they keep changing (an agent
# still writing) before the stragglers are moved as they are.
LINK_ATTEMPTS = 3


class LinkRefused(ValueError):
    """This id cannot be linked to this account; the message says why, for the person."""


@dataclass
class LinkResult:
    identities: list  # [(org name, external id)] now linked to the account
    facts: Counter = field(default_factory=Counter)  # created | confirmed | held | at_limit | kept
    moved: Counter = field(default_factory=Counter)  # rows moved, by table


class _Changed(Exception):
    """The remembered person's live facts changed since they were judged: judge the new ones."""


def check(account, remembered):
    """LinkRefused unless `account` (signed in) may take in `remembered` (a person an agent remembers)."""
    if account.pk == remembered.pk:
        raise LinkRefused("This memory is already yours.")
    if not people.can_sign_in(account):
        raise LinkRefused("Only an account that signs in with a password can add an assistant's memory to itself.")
    if people.operates(remembered):
        raise LinkRefused("This link is for an account, not for a person an assistant remembers.")


def link(account, remembered, judge=None):
    """Merge `remembered` into `account` (the person's own action): returns a LinkResult.

    The re-judging (model calls) happens with nothing held; the move is one transaction under both
    people's write locks.
    """
    check(account, remembered)
    judged = {}  # remembered fact id -> (its text, StoreResult or None when it could not be re-judged)
    for attempt in range(LINK_ATTEMPTS + 1):
        last = attempt == LINK_ATTEMPTS
        if not last:
            _judge_into(account, remembered, judged, judge)
        try:
            with transaction.atomic():
                return _merge(account, remembered, judged, last)
        except _Changed:
            continue
    raise AssertionError("the last attempt always merges")


def unlink(account, identity_id):
    """Undo a link (the person's own action): the assistant's id names a new, empty remembered person from now on.

    What the link added stays in the account, where its owner may delete it. Returns the identity.
    """
    with transaction.atomic():
        # The account's write lock: a write or recall for this id already running finishes first, and
        # the next one finds the new person.
        writing.lock_user(account.pk)
        identity = ExternalIdentity.objects.select_for_update().filter(id=identity_id, user=account).first()
        if identity is None:
            raise LinkRefused("That assistant's id is no longer part of your account.")
        identity.user = sessions.new_remembered_person()
        identity.linked_at = None
        identity.save(update_fields=["user", "linked_at"])
        # A session records the person, not the id: the org's open ones would go on reading this account.
        still_open = list(AgentSession.objects.filter(user=account, org=identity.org, ended_at__isnull=True))
    for session in still_open:
        sessions.end_session(session)
    return identity


def _judge_into(account, remembered, judged, judge):
    """Re-judge each live fact not judged yet into the account (writing.store; each its own short write)."""
    live = MemoryFact.objects.for_user(remembered).live().select_related("source_session", "extraction_run")
    for fact in live.order_by("created_at", "id"):
        if judged.get(fact.id, (None,))[0] == fact.text:
            continue
        try:
            result = writing.store(
                account,
                fact.text,
                fact.kind,
                origin=fact.origin,
                session=fact.source_session,
                run=fact.extraction_run,
                source_turns=fact.source_turns,
                added_by=account if fact.added_by_id == remembered.pk else fact.added_by,
                reason="added when its person linked an assistant's id to their account",
                judge=judge,
            )
        except writing.FactRejected:
            result = None  # moved as it is below: linking never drops a fact
        judged[fact.id] = (fact.text, result)


def _lock(account, remembered):
    """Both people's sessions, write locks and account rows, in the erasure's order (see erasure.erase_user)."""
    ids = sorted([account.pk, remembered.pk])
    list(
        AgentSession.objects.select_for_update(no_key=True)
        .filter(user_id__in=ids)
        .order_by("id")
        .values_list("id", flat=True)
    )
    for user_id in ids:
        writing.lock_user(user_id)
    found = list(get_user_model().objects.select_for_update().filter(pk__in=ids).order_by("pk"))
    if len(found) != 2:
        raise LinkRefused("This memory or this account was erased meanwhile.")


def _merge(account, remembered, judged, last):
    _lock(account, remembered)
    check(account, remembered)  # again, under the locks
    result = LinkResult(
        identities=[
            (i.org.name, i.external_id)
            for i in ExternalIdentity.objects.filter(user=remembered).select_related("org").order_by("id")
        ]
    )
    live = {f.id: f for f in MemoryFact.objects.for_user(remembered).live().for_display()}
    if not last and any(judged.get(fid, (None,))[0] != f.text for fid, f in live.items()):
        raise _Changed()
    for fid, (_, stored) in judged.items():
        created = fid not in live and stored is not None and stored.outcome == "created"
        if created and not MemoryFact.objects.filter(id=fid).exists():
            # Deleted (by the agent) while it was being re-judged: its copy goes too.
            writing.remove_facts([stored.fact.id])
    for fid, fact in live.items():
        stored = judged.get(fid, (None, None))[1]
        if stored is not None and stored.fact is not None:
            writing.supersede(
                fact,
                stored.fact,
                reason="linked",
                actor=FactEvent.Actor.USER,
                actor_user=account,
                note="its person linked an assistant's id to their account",
            )
            result.facts[stored.outcome] += 1
        else:
            result.facts["kept" if stored is None else stored.outcome] += 1  # moved as it is, still live
    result.moved = _move_rows(account, remembered)
    return result


def _move_rows(account, remembered):
    """Re-key every row that names the remembered person to the account, then remove the empty person."""
    moved = Counter()
    # Open conversations computed their memory block from the remembered person's memory alone.
    AgentSession.objects.filter(user=remembered, ended_at__isnull=True).update(memory_block=None, memory_block_at=None)
    moved["external_ids"] = ExternalIdentity.objects.filter(user=remembered).update(user=account, linked_at=clock.now())
    if Membership.objects.filter(user=remembered).exists():
        raise LinkRefused("This person is a member of an organisation, so they sign in themselves.")
    # Their sign-in links are their history (who asked for each): kept, but spent, so none opens the account.
    PortalLink.objects.filter(user=remembered, used_at__isnull=True, expires_at__gt=clock.now()).update(
        expires_at=clock.now()
    )
    moved["portal_links"] = PortalLink.objects.filter(user=remembered).update(user=account)
    # One switch for the one person from now on; an "off" they chose under the agent's id stays off.
    if MemorySettings.objects.filter(user=remembered, memory_enabled=False).exists():
        writing.set_memory_switch(account, False)
        moved["memory_switched_off"] = 1
    MemorySettings.objects.filter(user=remembered).delete()
    User = get_user_model()
    # Every reverse relation, hidden ones too (turns, runs and events name the person with related_name="+").
    relations = [f for f in User._meta.get_fields(include_hidden=True) if f.auto_created and not f.concrete]
    for rel in relations:
        if rel.one_to_one or rel.many_to_many or rel.related_model in (ExternalIdentity, PortalLink):
            continue
        name = rel.field.name
        n = rel.related_model._base_manager.filter(**{name: remembered.pk}).update(**{name: account.pk})
        if n:
            moved[rel.related_model._meta.model_name] += n
    _, deleted = User.objects.filter(pk=remembered.pk).delete()
    if set(deleted) - {User._meta.label}:
        # Something still named the person and would have gone with them: refuse rather than lose it.
        raise RuntimeError(f"linking would have deleted {deleted}")
    return moved

"""Provenance for support: finding facts and assembling where each one came from."""

from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.db.models import Prefetch, Q, prefetch_related_objects

from memoryapp import search, sessions, writing
from memoryapp.models import (
    AgentSession,
    ExternalIdentity,
    FactEvent,
    Kind,
    Membership,
    MemoryFact,
    RecallLog,
    Turn,
)

STATES = ("live", "superseded", "expired")
CONTEXT_TURNS = 2  # turns shown either side of a source turn on the fact page
RECALLS_SHOWN = 100


@dataclass
class Filters:
    user: str = ""  # external id, email or username
    org: str = ""  # organisation slug
    text: str = ""
    kind: str = ""
    state: str = ""
    origin: str = ""
    backend: str = ""

    @classmethod
    def from_query(cls, params):
        """Filters from a GET query dict; unknown choices are ignored rather than erroring."""
        # NUL can never match stored text and Postgres refuses it in a parameter: drop it.
        f = cls(**{k: (params.get(k) or "").replace("\x00", "").strip()[:200] for k in cls.__dataclass_fields__})
        if f.kind not in Kind.values:
            f.kind = ""
        if f.state not in STATES:
            f.state = ""
        if f.origin not in MemoryFact.Origin.values:
            f.origin = ""
        return f

    @property
    def active(self):
        return any(getattr(self, k) for k in self.__dataclass_fields__)


def find_facts(filters):
    """Facts across all users matching `filters`, newest first (a lazy queryset: slice it)."""
    qs = MemoryFact.objects.select_related("user", "org", "extraction_run")
    if filters.user:
        User = get_user_model()
        people = ExternalIdentity.objects.filter(external_id=filters.user).values("user_id")
        by_account = User.objects.filter(Q(email__iexact=filters.user) | Q(username=filters.user)).values("id")
        qs = qs.filter(Q(user_id__in=people) | Q(user_id__in=by_account))
    if filters.org:
        members = Membership.objects.filter(org__slug=filters.org).values("user_id")
        known = ExternalIdentity.objects.filter(org__slug=filters.org).values("user_id")  # its remembered persons
        qs = qs.filter(
            Q(org__slug=filters.org)
            | Q(scope=MemoryFact.Scope.PERSONAL, user_id__in=members)
            | Q(scope=MemoryFact.Scope.PERSONAL, user_id__in=known)
        )
    if filters.text:
        qs = search.matching(qs, filters.text)
    if filters.kind:
        qs = qs.filter(kind=filters.kind)
    if filters.state == "live":
        qs = qs.live()
    elif filters.state == "superseded":
        qs = qs.filter(superseded_at__isnull=False)
    elif filters.state == "expired":
        qs = qs.filter(superseded_at__isnull=True, expired_at__isnull=False)
    if filters.origin:
        qs = qs.filter(origin=filters.origin)
    if filters.backend:
        qs = qs.filter(extraction_run__backend=filters.backend)
    return qs.order_by("-created_at", "-id")


@dataclass
class TurnView:
    ordinal: int
    role: str = ""
    content: str = ""
    source: bool = False
    missing: bool = False  # a source turn deleted by retention
    gap: int = 0  # a run of hidden turns before this one


@dataclass
class ChainLink:
    fact: MemoryFact
    current: bool
    reason: str = ""  # why this fact was superseded: contradicts | corrected | staff
    event: FactEvent | None = None  # the supersession event, with who did it and why


@dataclass
class FactProvenance:
    fact: MemoryFact
    external_ids: list
    session: AgentSession | None
    turns: list = field(default_factory=list)  # TurnView, a window around the source turns
    missing_turns: list = field(default_factory=list)
    run: object = None
    chain: list = field(default_factory=list)  # ChainLink, oldest first
    events: list = field(default_factory=list)
    recalls: list = field(default_factory=list)
    recall_count: int = 0
    trailing_hidden: int = 0  # turns after the window, not shown


def _window(turns, source_ordinals, context=CONTEXT_TURNS):
    """The source turns with a little context either side; hidden stretches become gaps."""
    keep = set()
    positions = {t.ordinal: i for i, t in enumerate(turns)}
    for o in source_ordinals:
        if o in positions:
            i = positions[o]
            keep.update(range(max(0, i - context), min(len(turns), i + context + 1)))
    if not keep:
        keep = set(range(min(len(turns), 2 * context + 1)))
    out, last = [], -1
    for i in sorted(keep):
        t = turns[i]
        out.append(
            TurnView(t.ordinal, t.role, t.content, source=t.ordinal in source_ordinals, gap=i - last - 1 if i else 0)
        )
        last = i
    return out, len(turns) - 1 - last


def _external_ids(fact):
    """The fact owner's external ids with their orgs, in one query, also cached on `fact.user` for the page."""
    if not fact.user_id:
        return []
    ids = ExternalIdentity.objects.select_related("org").order_by("id")
    prefetch_related_objects([fact], Prefetch("user__external_ids", queryset=ids))
    return list(fact.user.external_ids.all())


def fact_provenance(fact):
    """Everything support needs about one fact: source turns, run, chain, timeline and recalls."""
    session = fact.source_session
    source = set(fact.source_turns or [])
    turns, missing, trailing = [], [], 0
    if session is not None:
        rows = list(Turn.objects.filter(session=session).order_by("ordinal").only("ordinal", "role", "content"))
        present = {t.ordinal for t in rows}
        missing = sorted(source - present)
        turns, trailing = _window(rows, source)
    chain_facts = writing.chain_of(fact)
    events_by_fact = {}
    for e in FactEvent.objects.filter(
        fact_id__in=[f.id for f in chain_facts], action=FactEvent.Action.SUPERSEDED
    ).select_related("actor_user"):
        events_by_fact[e.fact_id] = e
    chain = [
        ChainLink(f, f.id == fact.id, reason=f.supersede_reason, event=events_by_fact.get(f.id)) for f in chain_facts
    ]
    recalls = RecallLog.objects.filter(fact=fact).select_related("session").order_by("-created_at", "-id")
    shown = list(recalls[:RECALLS_SHOWN])
    # The newest recall is the first shown, so "last recalled" and a short list's count need no query of their own.
    fact.last_recall = shown[0].created_at if shown else None
    prov = FactProvenance(
        fact=fact,
        external_ids=_external_ids(fact),
        session=session,
        turns=turns,
        missing_turns=missing,
        run=fact.extraction_run,
        chain=chain,
        events=list(
            FactEvent.objects.filter(fact_id=fact.id).select_related("actor_user", "session").order_by("created_at")
        ),
        recalls=shown,
        recall_count=len(shown) if len(shown) < RECALLS_SHOWN else recalls.count(),
        trailing_hidden=trailing,
    )
    return prov


@dataclass
class SessionProvenance:
    session: AgentSession
    external_id: str | None
    turns: list
    runs: list
    written: list
    confirmed: list
    superseded: list
    recalled: list


def session_provenance(session, turn_offset=0, turn_limit=500):
    """A conversation as support sees it: turns, extraction runs, what it taught and what it was given."""
    events = FactEvent.objects.filter(session=session).order_by("created_at", "id")
    confirmed_ids = list(events.filter(action=FactEvent.Action.CONFIRMED).values_list("fact_id", flat=True))
    superseded_events = list(events.filter(action=FactEvent.Action.SUPERSEDED))
    facts = MemoryFact.objects.in_bulk(confirmed_ids + [e.fact_id for e in superseded_events])
    return SessionProvenance(
        session=session,
        external_id=sessions.external_id_of(session.user, session.org),
        turns=list(Turn.objects.filter(session=session).order_by("ordinal")[turn_offset : turn_offset + turn_limit]),
        runs=list(session.extraction_runs.order_by("started_at", "id")),
        written=list(MemoryFact.objects.filter(source_session=session).for_display().order_by("created_at", "id")),
        confirmed=[facts[i] for i in dict.fromkeys(confirmed_ids) if i in facts],
        superseded=[(e, facts.get(e.fact_id)) for e in superseded_events],
        recalled=list(
            RecallLog.objects.filter(session=session).select_related("fact").order_by("created_at", "position")
        ),
    )

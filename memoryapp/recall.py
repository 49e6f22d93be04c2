"""The read path: a memory block under a budget, computed once per session, and prompt assembly."""

from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from memoryapp import clock, embeddings, writing
from memoryapp.models import ALWAYS_ON_KINDS, AgentSession, Membership, MemoryFact, RecallLog

PERSONAL_HEADER = (
    "Notes about this user, recorded in earlier conversations. They may be out of date or wrong: "
    "if the user says something different now, the user is right, and follow what they say."
)
ORG_HEADER = (
    "Notes about the user's organisation ({name}), shared by its admins with all its members. "
    "They describe the organisation, not this user personally, and may also be out of date."
)


@dataclass
class Selected:
    fact: MemoryFact
    tier: str  # always | relevant | org
    score: float | None


@dataclass
class RecallResult:
    block: str
    facts: list = field(default_factory=list)  # Selected
    cached: bool = False


def _score(fact):
    return round(1 - fact.distance, 4) if getattr(fact, "distance", None) is not None else None


def select(user, message, org=None, vector=None):
    """Pick facts under the budget: always-on personal, relevant personal, then the org tier."""
    memory = settings.MEMORY
    cap = memory["RECALL_CAP"]
    live = MemoryFact.objects.for_user(user).live()
    always = list(
        live.filter(kind__in=ALWAYS_ON_KINDS).order_by("-last_confirmed_at", "id")[: min(cap, memory["TIER1_LIMIT"])]
    )
    chosen = [Selected(f, "always", None) for f in always]
    if vector is None and message:
        vector = embeddings.embed(message)
    room = cap - len(chosen)
    if room > 0 and vector is not None:
        relevant = live.exclude(id__in=[f.id for f in always]).nearest(vector, embeddings.floor("recall"))[
            : min(room, memory["TIER2_LIMIT"])
        ]
        chosen += [Selected(f, "relevant", _score(f)) for f in relevant]
    room = min(cap - len(chosen), memory["ORG_LIMIT"])
    if org is not None and room > 0:
        org_facts = MemoryFact.objects.for_org(org).live()
        org_always = list(org_facts.filter(kind__in=ALWAYS_ON_KINDS).order_by("-last_confirmed_at", "id")[:room])
        chosen += [Selected(f, "org", None) for f in org_always]
        room -= len(org_always)
        if room > 0 and vector is not None:
            relevant = org_facts.exclude(id__in=[f.id for f in org_always]).nearest(vector, embeddings.floor("recall"))[
                :room
            ]
            chosen += [Selected(f, "org", _score(f)) for f in relevant]
    return chosen


def render(chosen, org=None):
    """The memory block text: deterministic for the same facts, empty when nothing is selected."""
    personal = [s for s in chosen if s.tier != "org"]
    shared = [s for s in chosen if s.tier == "org"]
    parts = []
    if personal:
        lines = "\n".join(f"- [{s.fact.kind}] {s.fact.text}" for s in personal)
        parts.append(f"<user_memory>\n{PERSONAL_HEADER}\n{lines}\n</user_memory>")
    if shared:
        lines = "\n".join(f"- [{s.fact.kind}] {s.fact.text}" for s in shared)
        parts.append(f"<org_memory>\n{ORG_HEADER.format(name=org.name)}\n{lines}\n</org_memory>")
    return "\n".join(parts)


def session_org(session):
    """The session's organisation, if the user is (still) a member of it."""
    if Membership.objects.filter(user_id=session.user_id, org_id=session.org_id).exists():
        return session.org
    return None


def recall(session, message, refresh=False):
    """The memory block for a session: computed on first use and reused unless `refresh`."""
    if not writing.memory_allowed(session):
        return RecallResult(block="")
    if session.memory_block is not None and not refresh:
        logs = RecallLog.objects.filter(session=session, created_at=session.memory_block_at).select_related("fact")
        return RecallResult(
            block=session.memory_block,
            facts=[Selected(log.fact, log.tier, log.score) for log in logs.order_by("position")],
            cached=True,
        )
    org = session_org(session)
    chosen = select(session.user, message, org=org)
    block = render(chosen, org)
    now = clock.now()
    with transaction.atomic():
        ids = [s.fact.id for s in chosen]
        if ids:
            MemoryFact.objects.filter(id__in=ids).update(last_recalled_at=now)
            RecallLog.objects.bulk_create(
                RecallLog(
                    user_id=session.user_id,
                    session=session,
                    fact=s.fact,
                    tier=s.tier,
                    score=s.score,
                    position=i,
                    created_at=now,
                )
                for i, s in enumerate(chosen)
            )
        AgentSession.objects.filter(id=session.id).update(memory_block=block, memory_block_at=now)
    session.memory_block, session.memory_block_at = block, now
    return RecallResult(block=block, facts=chosen, cached=False)


def assemble_system(instructions, tool_guidance, memory_block):
    """Anthropic system blocks: stable text first with the cache breakpoint, memory last and uncached."""
    stable = [text for text in (instructions, tool_guidance) if text]
    blocks = [{"type": "text", "text": text} for text in stable]
    if blocks:
        blocks[-1]["cache_control"] = {"type": "ephemeral"}
    if memory_block:
        blocks.append({"type": "text", "text": memory_block})
    return blocks

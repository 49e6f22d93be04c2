"""The export: one document with everything held about a person ("What do you know about me?")."""

from memoryapp import clock, writing
from memoryapp.facts import fact_json, pending_json
from memoryapp.facts import id_or_none as _str
from memoryapp.facts import iso as _iso
from memoryapp.models import (
    AgentSession,
    ExternalIdentity,
    ExtractionRun,
    FactCandidate,
    FactEvent,
    Membership,
    MemoryFact,
    MemorySettings,
    OrgFactProposal,
    PortalLink,
    RecallLog,
    SupportAccess,
    Turn,
)

SCHEMA_VERSION = "2"  # 2: facts in the agent API's shape (one serializer)


def _session(s, turns):
    return {
        "id": str(s.id),
        "organisation": s.org.name if s.org_id else None,
        "memory": s.memory,
        "started_at": _iso(s.started_at),
        "last_activity_at": _iso(s.last_activity_at),
        "ended_at": _iso(s.ended_at),
        "end_reason": s.end_reason or None,
        "extraction_status": s.extraction_status,
        "turn_count": s.turn_count,
        "memory_block": s.memory_block,
        "memory_block_message": s.memory_block_message or None,  # kept for the recall review window
        "retained_turns": [
            {"ordinal": t.ordinal, "role": t.role, "content": t.content, "created_at": _iso(t.created_at)}
            for t in turns
        ],
    }


def _switch(user):
    row = MemorySettings.objects.filter(user=user).first()
    return {"enabled": writing.memory_enabled(user), "changed_at": _iso(row.changed_at) if row else None}


def _memory_rows(user, for_org):
    """The person's sessions (with their kept turns), extraction runs and recall logs: all, or `for_org`'s."""
    sessions = AgentSession.objects.for_user(user)
    if for_org is not None:
        sessions = sessions.filter(org=for_org)
    in_sessions = {"session_id__in": sessions.values("id")} if for_org is not None else {}
    turns_by_session = {}
    turns = Turn.objects.for_user(user).filter(**in_sessions).order_by("session_id", "ordinal")
    for t in turns.iterator(chunk_size=2000):
        turns_by_session.setdefault(t.session_id, []).append(t)
    runs = ExtractionRun.objects.filter(user=user, **in_sessions).order_by("started_at", "id")
    recalls = (
        RecallLog.objects.filter(user=user, **in_sessions)
        .select_related("fact")
        .order_by("created_at", "position", "id")
    )
    sessions = list(sessions.select_related("org").order_by("started_at", "id"))
    return sessions, turns_by_session, runs, recalls


def _account(user, for_org):
    """Who the person is: their account for themselves; for an org's keys, only that org's id for them."""
    identities = ExternalIdentity.objects.filter(user=user).select_related("org").order_by("id")
    if for_org is not None:
        return {
            "external_ids": [
                {"organisation": i.org.name, "external_id": i.external_id} for i in identities.filter(org=for_org)
            ]
        }
    return {
        "username": user.get_username(),
        "email": user.email or None,
        "date_joined": _iso(user.date_joined),
        "external_ids": [{"organisation": i.org.name, "external_id": i.external_id} for i in identities],
        "organisations": [
            {"name": m.org.name, "role": m.role}
            for m in Membership.objects.filter(user=user).select_related("org").order_by("id")
        ],
    }


def _waiting(user):
    """Candidates waiting for the person's word, with why: in every export, as GET /users/{user}/pending lists them."""
    return [
        {**pending_json(c), "at": _iso(c.created_at)}
        for c in FactCandidate.objects.pending().filter(user=user).order_by("created_at", "id")
    ]


def _about_the_account(user):
    """What only the person sees in their export: their decisions, refused attempts, proposals, support, links."""
    return {
        "decided_for_you": [  # kept or discarded by the person; held for the audit until it lapses
            {
                "text": c.text,
                "kind": c.kind,
                "decision": c.decision,
                "at": _iso(c.created_at),
                "decided": _iso(c.decided_at),
            }
            for c in FactCandidate.objects.filter(user=user).exclude(decision="").order_by("created_at", "id")
        ],
        "refused_attempts": [
            {"text": c.text, "kind": c.kind, "reason": c.reason, "at": _iso(c.created_at)}
            for c in FactCandidate.objects.filter(user=user, outcome="refused").order_by("created_at", "id")
        ],
        "org_fact_proposals": [
            {"organisation": p.org.name, "text": p.text, "kind": p.kind, "status": p.status, "at": _iso(p.created_at)}
            for p in OrgFactProposal.objects.filter(proposed_by=user).select_related("org").order_by("created_at")
        ],
        "support_access": [
            {"staff": a.staff_name, "page": a.page, "at": _iso(a.created_at)}
            for a in SupportAccess.objects.filter(user=user).order_by("created_at", "id")
        ],
        "portal_links": [
            {
                "created_at": _iso(p.created_at),
                "expires_at": _iso(p.expires_at),
                "used_at": _iso(p.used_at),
                "made_by": p.made_by or None,
            }
            for p in PortalLink.objects.filter(user=user).order_by("created_at", "id")
        ],
    }


def export_user(user, for_org=None):
    """Everything held about `user` as a JSON-ready dict, described by `schema_version`.

    With `for_org` (an API key's organisation) it is that org's memory of the person: their facts, what
    waits for their word, fact history, and the sessions, extraction runs and recall logs of that org's sessions. Never
    account data (username, e-mail, other organisations) nor who in support looked at it.
    """
    facts = (
        MemoryFact.objects.for_user(user)
        .with_last_recalled()
        .select_related("extraction_run")
        .order_by("created_at", "id")
    )
    sessions, turns_by_session, runs, recalls = _memory_rows(user, for_org)
    events = FactEvent.objects.filter(user=user).order_by("created_at", "id")
    doc = {
        "schema_version": SCHEMA_VERSION,
        "generated_at": _iso(clock.now()),
        "subject": _account(user, for_org),
        "memory_switch": _switch(user),
        "facts": [fact_json(f) for f in facts.iterator(chunk_size=1000)],
        "waiting_for_you": _waiting(user),
        "fact_events": [
            {
                "fact": _str(e.fact_id),
                "action": e.action,
                "actor": e.actor,
                "session": _str(e.session_id),
                "related_fact": _str(e.related_fact_id),
                "reason": e.reason or None,
                "at": _iso(e.created_at),
            }
            for e in events.iterator(chunk_size=2000)
        ],
        "sessions": [_session(s, turns_by_session.get(s.id, [])) for s in sessions],
        "extraction_runs": [
            {
                "id": r.id,
                "session": str(r.session_id),
                "backend": r.backend,
                "model": r.model,
                "prompt_version": r.prompt_version,
                "status": r.status,
                "started_at": _iso(r.started_at),
                "finished_at": _iso(r.finished_at),
                "raw_output": r.raw_output,
                "facts_proposed": r.facts_proposed,
                "facts_dropped": r.facts_dropped,
            }
            for r in runs.iterator(chunk_size=500)
        ],
        "recall_logs": [
            {
                "session": str(r.session_id),
                "fact": str(r.fact_id),
                "fact_text": r.fact.text,
                "tier": r.tier,
                "score": r.score,
                "position": r.position,
                "at": _iso(r.created_at),
            }
            for r in recalls.iterator(chunk_size=2000)
        ],
    }
    if for_org is None:
        doc.update(_about_the_account(user))
    return doc

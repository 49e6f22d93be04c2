"""The export: one document with everything held about a person ("What do you know about me?")."""

from memoryapp import clock, writing
from memoryapp.models import (
    AgentSession,
    ExternalIdentity,
    ExtractionRun,
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

SCHEMA_VERSION = "1"


def _iso(value):
    return value.isoformat() if value is not None else None


def _str(value):
    return str(value) if value is not None else None


def _fact(f):
    return {
        "id": str(f.id),
        "text": f.text,
        "kind": f.kind,
        "state": f.state,
        "origin": f.origin,
        "created_at": _iso(f.created_at),
        "last_confirmed_at": _iso(f.last_confirmed_at),
        "confirmation_count": f.confirmation_count,
        "last_recalled_at": _iso(f.last_recalled_at),
        "superseded_at": _iso(f.superseded_at),
        "superseded_by": _str(f.superseded_by_id),
        "supersede_reason": f.supersede_reason or None,
        "expired_at": _iso(f.expired_at),
        "expired_rule": f.expired_rule or None,
        "provenance": {
            "source_session": _str(f.source_session_id),
            "source_turns": list(f.source_turns),
            "extraction_run": f.extraction_run_id,
            "added_by_you": f.origin == MemoryFact.Origin.USER,
        },
    }


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


def export_user(user):
    """Everything held about `user` as a JSON-ready dict, described by `schema_version`."""
    facts = MemoryFact.objects.for_user(user).with_last_recalled().order_by("created_at", "id")
    sessions = list(AgentSession.objects.for_user(user).select_related("org").order_by("started_at", "id"))
    turns_by_session = {}
    for t in Turn.objects.for_user(user).order_by("session_id", "ordinal").iterator(chunk_size=2000):
        turns_by_session.setdefault(t.session_id, []).append(t)
    runs = ExtractionRun.objects.filter(user=user).order_by("started_at", "id")
    events = FactEvent.objects.filter(user=user).order_by("created_at", "id")
    recalls = RecallLog.objects.filter(user=user).select_related("fact").order_by("created_at", "position", "id")
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": _iso(clock.now()),
        "subject": {
            "username": user.get_username(),
            "email": user.email or None,
            "date_joined": _iso(user.date_joined),
            "external_ids": [
                {"organisation": i.org.name, "external_id": i.external_id}
                for i in ExternalIdentity.objects.filter(user=user).select_related("org").order_by("id")
            ],
            "organisations": [
                {"name": m.org.name, "role": m.role}
                for m in Membership.objects.filter(user=user).select_related("org").order_by("id")
            ],
        },
        "memory_switch": _switch(user),
        "facts": [_fact(f) for f in facts.iterator(chunk_size=1000)],
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
        "org_fact_proposals": [
            {"organisation": p.org.name, "text": p.text, "kind": p.kind, "status": p.status, "at": _iso(p.created_at)}
            for p in OrgFactProposal.objects.filter(proposed_by=user).select_related("org").order_by("created_at")
        ],
        "support_access": [
            {"staff": a.staff_name, "page": a.page, "at": _iso(a.created_at)}
            for a in SupportAccess.objects.filter(user=user).order_by("created_at", "id")
        ],
        "portal_links": [
            {"created_at": _iso(p.created_at), "expires_at": _iso(p.expires_at), "used_at": _iso(p.used_at)}
            for p in PortalLink.objects.filter(user=user).order_by("created_at", "id")
        ],
    }

"""Agent API: the memory block, the assembled system prompt, and what a session was given."""

import uuid

from django.http import HttpRequest
from ninja import Router, Status

from memoryapp import recall as recalling
from memoryapp.api.auth import requires
from memoryapp.api.errors import ERRORS
from memoryapp.api.facts import readable
from memoryapp.api.schemas import PromptIn, PromptOut, RecallIn, RecallOut, SessionRecallOut
from memoryapp.api.sessions import get_session
from memoryapp.models import RecallLog

router = Router(tags=["recall"])


def _fact_out(selected):
    f = selected.fact
    return {
        "id": f.id,
        "text": f.text,
        "kind": f.kind,
        "scope": f.scope,
        "tier": selected.tier,
        "score": selected.score,
    }


@router.post("/recall", response={200: RecallOut, **ERRORS})
@requires("read")
def recall(request: HttpRequest, payload: RecallIn):
    """The session's memory block: computed once per session unless `refresh` is true."""
    session = get_session(request, payload.session)
    result = recalling.recall(session, payload.message, refresh=payload.refresh)
    return Status(200, {"block": result.block, "facts": [_fact_out(s) for s in result.facts], "cached": result.cached})


# exclude_none: a block without a breakpoint must not carry "cache_control": null on the wire.
@router.post("/prompt", response={200: PromptOut, **ERRORS}, exclude_none=True)
@requires("read")
def prompt(request: HttpRequest, payload: PromptIn):
    """Anthropic system blocks: stable instructions (cache breakpoint on the last), memory last."""
    session = get_session(request, payload.session)
    result = recalling.recall(session, payload.message, refresh=payload.refresh)
    return Status(200, {"system": recalling.assemble_system(payload.instructions, payload.tool_guidance, result.block)})


@router.get("/sessions/{session_id}/recall", response={200: SessionRecallOut, **ERRORS})
@requires("read")
def session_recall(request: HttpRequest, session_id: uuid.UUID):
    """What was injected into this session's memory block, and why (tier, score)."""
    session = get_session(request, session_id)
    readable(session.user)  # the facts' texts are the person's memory: none of it while they keep it off
    logs = RecallLog.objects.filter(session=session).with_facts().order_by("created_at", "position")
    return Status(
        200,
        {
            "session": session.id,
            "memory": session.memory,
            "block": session.memory_block,
            "block_at": session.memory_block_at,
            "injected": [
                {
                    "fact": log.fact_id,
                    "text": log.fact.text,
                    "kind": log.fact.kind,
                    "scope": log.fact.scope,
                    "tier": log.tier,
                    "score": log.score,
                    "recalled_at": log.created_at,
                    "in_current_block": log.created_at == session.memory_block_at,
                }
                for log in logs
            ],
        },
    )

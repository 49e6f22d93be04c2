"""Staff re-runs of a failed extraction: claimed once, enqueued once."""

from django.db import transaction

from memoryapp import clock, sessions
from memoryapp.models import AgentSession


def rerun_failed_extraction(session):
    """Queue extraction again for a session whose last attempt failed; False if it is not failed (any more)."""
    with transaction.atomic():
        # The conditional update is the claim: of two clicks (or a click and the sweeper) exactly one wins.
        claimed = AgentSession.objects.filter(
            id=session.id,
            user_id=session.user_id,
            ended_at__isnull=False,
            extraction_status=AgentSession.Extraction.FAILED,
        ).update(extraction_status=AgentSession.Extraction.QUEUED, next_attempt_at=clock.now() + sessions.QUEUE_LEASE)
        if claimed:
            sessions.enqueue_extraction(session.id, session.user_id)
    return bool(claimed)

"""Thin Celery wrappers: named, JSON arguments, ids only."""

import logging

from celery import shared_task
from celery.contrib.django.task import DjangoTask
from kombu.exceptions import OperationalError as BrokerError

from memoryapp import extraction, forgetting, pending, sessions

log = logging.getLogger(__name__)


class EnqueueSafely(DjangoTask):
    """A task whose enqueue never breaks the request: if the broker is down, the sweeper retries."""

    def delay(self, *args, **kwargs):
        try:
            return super().delay(*args, **kwargs)
        except (BrokerError, ConnectionError, OSError) as exc:
            log.warning("could not enqueue %s%r: %s (the sweeper will retry)", self.name, args, exc)
            return None


@shared_task(name="memoryapp.extract_session", base=EnqueueSafely)
def extract_session(session_id, user_id=None):
    # user_id routes every statement to the user's shard; messages queued before it was added lack it.
    run = extraction.extract_session(session_id, user_id)
    return run.id if run else None


@shared_task(name="memoryapp.sweep_sessions", base=EnqueueSafely)
def sweep_sessions():
    return sessions.sweep()


@shared_task(name="memoryapp.forget", base=EnqueueSafely)
def forget():
    run = forgetting.run_forgetting()
    return run.id if run else None


@shared_task(name="memoryapp.apply_retention", base=EnqueueSafely)
def apply_retention():
    return forgetting.apply_retention()


@shared_task(name="memoryapp.lapse_pending", base=EnqueueSafely)
def lapse_pending():
    return pending.lapse()

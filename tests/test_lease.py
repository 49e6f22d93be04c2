"""Issue 42 part 3: a dead or stopped worker costs about a minute, not six.

The claim's lease is short and renewed by a heartbeat while the task works (a slow model call
included), so only a worker that is gone lets it run out; the sweeper then takes the session over.
A stopping worker abandons the call in flight and gives the session back at once.
"""

import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.test import override_settings

from memoryapp import backends, extraction, sessions
from memoryapp.models import AgentSession, ExtractionRun

pytestmark = pytest.mark.django_db(transaction=True)


def ended(org, said="I moved to Porto. I use Vim."):
    person = sessions.get_or_create_user(org, "alice")
    session = sessions.open_session(org, person)
    sessions.add_turns(session, [("user", said)])
    sessions.end_session(session)
    return session


class SlowExtractor(backends.ScriptedBackend):
    """An extraction call that takes `seconds`, or raises `error` when it ends."""

    def __init__(self, seconds, error=None):
        super().__init__()
        self.seconds, self.error, self.started = seconds, error, threading.Event()
        self.extract_answer = {"facts": [{"text": "The user lives in Porto.", "kind": "profile"}]}

    def extract(self, text):
        self.started.set()
        time.sleep(self.seconds)
        if self.error is not None:
            raise self.error
        return super().extract(text)


def test_the_lease_is_short_whatever_the_provider_and_outlived_only_by_a_working_task(org):
    assert timedelta(seconds=60) >= django_settings.EXTRACTION_LEASE
    assert django_settings.EXTRACTION_LEASE + timedelta(seconds=django_settings.SWEEP_SECONDS) <= timedelta(seconds=90)
    slow = SlowExtractor(seconds=1.5)
    session = ended(org)
    with override_settings(EXTRACTION_BACKEND=slow, EXTRACTION_LEASE=timedelta(seconds=0.6)):
        worker = threading.Thread(target=extraction.extract_session, args=(session.id,))
        worker.start()
        slow.started.wait(5)
        first = AgentSession.objects.get(id=session.id).next_attempt_at
        time.sleep(0.9)
        renewed = AgentSession.objects.get(id=session.id).next_attempt_at
        worker.join(10)
    assert renewed > first, "the heartbeat renewed the claim while the model call ran"
    assert AgentSession.objects.get(id=session.id).extraction_status == "done"


def test_a_dead_workers_session_is_taken_over_once_its_lease_runs_out(org, travel):
    session = ended(org)
    run = extraction.claim_session(session.id, session.user_id)  # a worker claims it, then dies
    assert sessions.sweep()["enqueued"] == 0, "a live lease is left alone"
    travel(django_settings.EXTRACTION_LEASE + timedelta(seconds=1))
    assert sessions.sweep()["enqueued"] == 1
    assert ExtractionRun.objects.get(id=run.id).status == "abandoned"


def test_a_stopping_worker_abandons_its_call_and_gives_the_session_back_at_once(org):
    stopping = SlowExtractor(seconds=0, error=extraction.WorkerStopping())
    session = ended(org)
    with override_settings(EXTRACTION_BACKEND=stopping), pytest.raises(extraction.WorkerStopping):
        extraction.extract_session(session.id)
    run = ExtractionRun.objects.get(session_id=session.id)
    assert run.status == "abandoned" and run.error == "the worker was stopping"
    assert sessions.sweep()["enqueued"] == 1, "due at once, not after a lease"


def test_a_failed_call_goes_back_to_the_queue_with_backoff_instead_of_retrying_in_the_task(org, settings):
    settings.ANTHROPIC_TIMEOUT = 7.0
    assert backends.call_timeout(backends.AnthropicBackend()) == 7.0
    failing = SlowExtractor(seconds=0, error=backends.ModelUnavailable("timed out"))
    session = ended(org)
    with override_settings(EXTRACTION_BACKEND=failing):
        extraction.extract_session(session.id)
    session.refresh_from_db()
    assert session.extraction_status == "failed" and session.extraction_attempts == 1
    assert session.next_attempt_at is not None

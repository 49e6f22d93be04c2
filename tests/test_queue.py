"""The write path on real parts: HTTP in, a real Celery worker on the real Redis, facts out."""

import pytest

from memoryapp.models import AgentSession, ExtractionRun, MemoryFact
from tests.conftest import wait_for

pytestmark = [pytest.mark.queue, pytest.mark.django_db(transaction=True)]


def test_session_over_http_is_extracted_by_a_real_worker(api, celery_workers):
    celery_workers(1)
    sid = api.post("/v1/sessions", {"user": "ext-queue"}).json()["id"]
    turns = [
        {"role": "user", "content": "I'm a backend engineer. We're on-prem by contract."},
        {"role": "assistant", "content": "I'm sure you also love Kubernetes."},
        {"role": "user", "content": "I prefer short answers with code first."},
    ]
    assert api.post(f"/v1/sessions/{sid}/turns", {"turns": turns}).status_code == 202
    assert api.post(f"/v1/sessions/{sid}/end").json() == {"status": "queued"}

    # Off the request path: the end returned before anything was extracted.
    facts = wait_for(
        lambda: list(MemoryFact.objects.filter(source_session_id=sid).values_list("text", flat=True)),
        message="the worker to write facts",
    )
    wait_for(lambda: AgentSession.objects.get(id=sid).extraction_status == "done", message="the run to finish")
    facts = set(MemoryFact.objects.filter(source_session_id=sid).values_list("text", flat=True))
    assert "The user is a backend engineer." in facts
    assert "The user's team is on-prem by contract." in facts
    assert "The user prefers short answers with code first." in facts
    assert not any("Kubernetes" in f for f in facts)  # the assistant's words never become facts

    run = ExtractionRun.objects.get(session_id=sid)
    assert (run.status, run.backend) == ("succeeded", "offline")
    status = api.get(f"/v1/sessions/{sid}").json()
    assert status["extraction_status"] == "done"
    assert sorted(status["facts_written"]) == sorted(
        str(i) for i in MemoryFact.objects.filter(source_session_id=sid).values_list("id", flat=True)
    )

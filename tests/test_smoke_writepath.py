import pytest

from memoryapp import extraction, recall
from memoryapp.models import AgentSession, MemoryFact

pytestmark = pytest.mark.django_db(transaction=True)


def test_postgres_to_planetscale_end_to_end(api, scripted, django_capture_on_commit_callbacks):
    sid = api.post("/v1/sessions", {"user": "alice"}).json()["id"]
    api.post(f"/v1/sessions/{sid}/turns", {"turns": [{"role": "user", "content": "We're on Postgres."}]})
    scripted.extract_answer = {"facts": [{"text": "The user's database is PostgreSQL.", "kind": "profile"}]}
    api.post(f"/v1/sessions/{sid}/end")
    extraction.extract_session(sid)
    sid2 = api.post("/v1/sessions", {"user": "alice"}).json()["id"]
    api.post(f"/v1/sessions/{sid2}/turns", {"turns": [{"role": "user", "content": "We migrated to PlanetScale."}]})
    scripted.extract_answer = {"facts": [{"text": "The user's database is PlanetScale.", "kind": "profile"}]}
    scripted.verdict_map = {"postgresql": "CONTRADICTS"}
    api.post(f"/v1/sessions/{sid2}/end")
    extraction.extract_session(sid2)
    old = MemoryFact.objects.get(text__contains="PostgreSQL")
    new = MemoryFact.objects.get(text__contains="PlanetScale")
    assert old.superseded_at is not None and old.superseded_by_id == new.id
    s3 = AgentSession.objects.get(id=api.post("/v1/sessions", {"user": "alice"}).json()["id"])
    block = recall.recall(s3, "which database?").block
    assert "PlanetScale" in block and "PostgreSQL" not in block
    status = api.get(f"/v1/sessions/{sid2}").json()
    assert status["facts_written"] == [str(new.id)]

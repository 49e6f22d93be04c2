"""The agent API's export and erasure routes: scoped to the key's organisation, clear errors."""

import pytest

from memoryapp import extraction, sessions
from memoryapp.models import ErasureReceipt, Membership, MemoryFact
from tests.conftest import Api

FACT = "The user's favourite tea is Lapsang Souchong."


@pytest.fixture
def alice(api, scripted):
    """Alice, known to the key's organisation as 'alice', who has told the agent one thing."""
    sid = api.post("/v1/sessions", {"user": "alice"}).json()["id"]
    api.post(f"/v1/sessions/{sid}/turns", {"turns": [{"role": "user", "content": "I love Lapsang Souchong."}]})
    api.post(f"/v1/sessions/{sid}/end")
    scripted.extract_answer = {"facts": [{"text": FACT, "kind": "preference"}]}
    extraction.extract_session(sid)
    return sid


@pytest.fixture
def other_api(other_org):
    _, key = sessions.create_api_key(other_org, "other")
    return Api(key)


def test_export_is_one_document_with_everything(api, alice):
    response = api.get("/v1/users/alice/export")
    assert response.status_code == 200
    doc = response.json()
    assert doc["schema_version"]
    assert [f["text"] for f in doc["facts"]] == [FACT]
    assert doc["sessions"][0]["id"] == alice
    assert doc["sessions"][0]["retained_turns"][0]["content"] == "I love Lapsang Souchong."
    assert doc["memory_switch"]["enabled"] is True


def test_unknown_user_or_another_orgs_user_is_404(api, other_api, alice, other_org):
    sessions.get_or_create_user(other_org, "zed")
    for path in ("/v1/users/nobody/export", "/v1/users/zed/export"):
        response = api.get(path)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    # Another organisation cannot export or erase Alice, even knowing her external id.
    assert other_api.get("/v1/users/alice/export").status_code == 404
    assert other_api.delete("/v1/users/alice").status_code == 404
    assert MemoryFact.objects.filter(text=FACT).exists()
    assert api.delete("/v1/users/nobody").status_code == 404


def test_no_key_is_401(alice):
    assert Api(None).get("/v1/users/alice/export").status_code == 401
    assert Api(None).delete("/v1/users/alice").status_code == 401


def test_delete_erases_and_answers_202_with_a_receipt(api, alice):
    response = api.delete("/v1/users/alice")

    assert response.status_code == 202
    body = response.json()
    receipt = ErasureReceipt.objects.get(id=body["receipt"])
    assert receipt.requested_via == "api"
    assert body["counts"]["facts"] == 1 and body["counts"]["sessions"] == 1
    assert "alice" not in response.content.decode() and "Lapsang" not in response.content.decode()
    assert not MemoryFact.objects.filter(text=FACT).exists()
    # She is gone: the export and a second erasure are 404; a new session starts a fresh, empty memory.
    assert api.get("/v1/users/alice/export").status_code == 404
    assert api.delete("/v1/users/alice").status_code == 404
    api.post("/v1/sessions", {"user": "alice"})
    assert api.get("/v1/users/alice/export").json()["facts"] == []


def test_a_person_shared_with_another_org_cannot_be_erased_by_one_of_them(api, alice, org, other_org):
    user = sessions.find_user(org, "alice")
    Membership.objects.create(user=user, org=other_org)
    response = api.delete("/v1/users/alice")
    assert response.status_code == 409
    assert "another organisation" in response.json()["error"]["message"]
    assert MemoryFact.objects.filter(text=FACT).exists()

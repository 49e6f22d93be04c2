"""The agent API's export and erasure routes: scoped to the key's organisation, clear errors."""

import json

import pytest

from memoryapp import export, extraction, sessions, support_access
from memoryapp.models import ErasureReceipt, ExternalIdentity, Membership, MemoryFact, all_scopes
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
    _, key = sessions.create_api_key(other_org, "other", all_scopes())
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


def test_a_key_exports_its_orgs_memory_of_a_person_and_no_account_data(api, org, other_org, make_user, scripted):
    """The demo's shape: the org's admin, who is also in another org and whom support looked up."""
    olga = make_user("olga", org, role="admin", email="olga@acme.test")
    Membership.objects.create(user=olga, org=other_org, role="member")
    ExternalIdentity.objects.create(org=org, user=olga, external_id="olga-ext")
    ExternalIdentity.objects.create(org=other_org, user=olga, external_id="olga-at-globex")
    here = sessions.open_session(org, olga)
    sessions.add_turns(here, [("user", "I only drink green tea.")])
    sessions.end_session(here)
    scripted.extract_answer = {"facts": [{"text": "The user only drinks green tea.", "kind": "preference"}]}
    extraction.extract_session(here.id)
    there = sessions.open_session(other_org, olga)
    sessions.add_turns(there, [("user", "Globex pays me in Zorkmids.")])
    support_access.record(make_user("sam", is_staff=True), olga, "/console/users/olga/facts")

    response = api.get("/v1/users/olga-ext/export")
    assert response.status_code == 200
    doc, text = response.json(), response.content.decode()
    assert [f["text"] for f in doc["facts"]] == ["The user only drinks green tea."]
    assert [s["id"] for s in doc["sessions"]] == [str(here.id)] and doc["extraction_runs"]
    assert {e["action"] for e in doc["fact_events"]} >= {"created"}
    assert doc["subject"] == {"external_ids": [{"organisation": "Acme", "external_id": "olga-ext"}]}
    for account_data in ("olga@acme.test", '"olga"', "Globex", "olga-at-globex", "Zorkmids", "sam"):
        assert account_data not in text, account_data
    assert "support_access" not in doc and "portal_links" not in doc

    # The person's own export (their memory pages) keeps everything it had.
    own = json.dumps(export.export_user(olga))
    for account_data in ("olga@acme.test", "Globex", "olga-at-globex", "Zorkmids", '"staff": "sam"'):
        assert account_data in own, account_data


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
    ExternalIdentity.objects.create(user=user, org=other_org, external_id="alice")
    response = api.delete("/v1/users/alice")
    assert response.status_code == 409
    assert "another organisation" in response.json()["error"]["message"]
    assert MemoryFact.objects.filter(text=FACT).exists()

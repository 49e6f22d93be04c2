"""Issue 15 through the agent API: a key acts only on the people its agent remembers, and every
answer under /api/ is JSON, whatever went wrong."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from memoryapp import sessions
from memoryapp.models import ExternalIdentity, Membership, PortalLink

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_known_to_agent(org, make_user):
    """The demo's shape: the org's only admin, with a password, whom the org's agent also talks to."""
    admin = make_user("olga", org, role="admin")
    ExternalIdentity.objects.create(org=org, user=admin, external_id="olga-ext")
    return admin


def test_a_key_cannot_mint_a_portal_link_for_the_orgs_admin(api, admin_known_to_agent):
    response = api.post("/v1/users/olga-ext/portal")
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "conflict" and "signing in" in error["message"]
    assert not PortalLink.objects.exists()


def test_a_key_cannot_erase_the_orgs_admin(api, admin_known_to_agent):
    response = api.delete("/v1/users/olga-ext")
    assert response.status_code == 409
    assert "signing in" in response.json()["error"]["message"]
    admin = get_user_model().objects.get(id=admin_known_to_agent.id)
    assert admin.has_usable_password() and Membership.objects.filter(user=admin, role="admin").exists()


@pytest.mark.parametrize(
    "make_operator",
    [
        pytest.param(lambda u: setattr(u, "is_staff", True), id="staff"),
        pytest.param(lambda u: u.set_password("a new password 123"), id="password"),
        pytest.param(lambda u: setattr(u, "is_superuser", True), id="superuser"),
    ],
)
def test_a_key_acts_only_on_people_who_cannot_sign_in(api, org, make_operator):
    person = sessions.get_or_create_user(org, "p1")
    assert api.post("/v1/users/p1/portal").status_code == 200  # an agent's person: a link is fine
    make_operator(person)
    person.save()
    assert api.post("/v1/users/p1/portal").status_code == 409
    assert api.delete("/v1/users/p1").status_code == 409
    assert get_user_model().objects.filter(id=person.id).exists()


def test_a_person_the_agent_only_remembers_can_still_be_erased_by_the_key(api, org):
    person = sessions.get_or_create_user(org, "p2")
    response = api.delete("/v1/users/p2")
    assert response.status_code == 202
    assert not get_user_model().objects.filter(id=person.id).exists()


# --- hostile input ------------------------------------------------------------------------------


@pytest.fixture
def open_session(api):
    return api.post("/v1/sessions", {"user": "p3"}).json()["id"]


def test_a_lone_surrogate_in_a_turn_is_422_not_500(api, open_session):
    raw = '{"turns": [{"role": "user", "content": "hi \\ud800 there"}]}'
    assert json.loads(raw)["turns"][0]["content"] == "hi \ud800 there"  # valid JSON, not valid text
    response = api.post(f"/v1/sessions/{open_session}/turns", raw=raw)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "turns.0.content" and "surrogate" in error["message"]


# --- every answer under /api/ is JSON -----------------------------------------------------------


def _json_error(response, status):
    assert response.status_code == status, response.content[:200]
    assert response["Content-Type"].startswith("application/json")
    return response.json()["error"]


def test_an_unknown_api_route_is_a_json_404(api):
    error = _json_error(api.get("/v1/no-such-thing"), 404)
    assert error["code"] == "not_found"
    assert _json_error(Client().get("/api/nothing/here"), 404)["code"] == "not_found"


def test_a_wrong_method_is_a_json_405_that_names_the_allowed_ones(api, open_session):
    response = api.client.put("/api/v1/sessions", "{}", content_type="application/json", headers=api._headers())
    error = _json_error(response, 405)
    assert error["code"] == "method_not_allowed" and "POST" in response["Allow"]


def test_an_encoded_slash_in_a_user_id_is_a_json_404(api, org):
    sessions.get_or_create_user(org, "p4")
    for path in ("/v1/users/a%2Fb/portal", "/v1/users/a%2Fb/export", "/v1/users/p4%2F..%2Fp4/export"):
        assert _json_error(api.get(path) if path.endswith("export") else api.post(path), 404)["code"] == "not_found"


def test_a_bad_host_header_is_a_json_400(api):
    response = api.client.get("/api/v1/sessions/x", headers=api._headers(), HTTP_HOST="evil.example")
    assert _json_error(response, 400)["code"] == "bad_request"


def test_pages_keep_their_html_errors():
    response = Client().get("/no-such-page/")
    assert response.status_code == 404 and not response["Content-Type"].startswith("application/json")

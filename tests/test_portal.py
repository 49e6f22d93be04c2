"""Portal links: one-time, signed, short-lived sign-in links issued to an agent through the API."""

import hashlib
from datetime import timedelta

import pytest
from django.test import Client

from memoryapp import clock, portal, sessions
from memoryapp.models import ExternalIdentity, PortalLink


@pytest.fixture
def person(org):
    return sessions.get_or_create_user(org, "customer-42")


def issue(api, external="customer-42"):
    return api.post(f"/v1/users/{external}/portal")


def path_of(url):
    return url.split("://", 1)[1].split("/", 1)[1].join(["/", ""])


def test_the_api_issues_a_link_that_signs_the_person_in_once(api, person):
    response = issue(api)
    assert response.status_code == 200
    body = response.json()
    assert body["url"].startswith("http://testserver/me/portal/")
    expires = clock.now() + timedelta(minutes=10)
    assert abs((PortalLink.objects.get().expires_at - expires).total_seconds()) < 5
    assert body["expires_at"]
    browser = Client()
    shown = browser.get(path_of(body["url"]))
    assert shown.status_code == 200 and "Continue" in shown.content.decode()
    signed_in = browser.post(path_of(body["url"]))
    assert signed_in.status_code == 302 and signed_in["Location"] == "/me/"
    assert signed_in["Cache-Control"].startswith("max-age=0")
    assert browser.get("/me/").status_code == 200  # now signed in as that person
    assert int(browser.session["_auth_user_id"]) == person.id
    again = Client().post(path_of(body["url"]))
    assert again.status_code == 410 and "already been used" in again.content.decode()


def test_the_link_says_who_made_it_an_admin_by_name_an_agent_as_the_assistant(api, org, person, make_user):
    from memoryapp import orgs

    admin = make_user("boss", org=org, role="admin")
    identity = ExternalIdentity.objects.get(user=person)
    by_admin, _ = orgs.portal_link_for(identity, "http://testserver", admin)
    shown = Client().get(path_of(by_admin)).content.decode()
    assert "This link was made by boss, an admin of Acme, so you can" in shown and "Your assistant made" not in shown
    by_agent = issue(api).json()["url"]
    shown = Client().get(path_of(by_agent)).content.decode()
    assert "Your assistant made this link" in shown and "API key" not in shown


def test_the_admin_who_made_a_link_can_never_take_that_memory_into_their_account(api, org, person, make_user):
    from memoryapp import orgs
    from memoryapp.models import MemoryFact

    api.post("/v1/users/customer-42/facts", {"text": "The user is pregnant.", "kind": "profile"})
    admin = make_user("boss", org=org, role="admin")
    url, _ = orgs.portal_link_for(ExternalIdentity.objects.get(user=person), "http://testserver", admin)
    browser = Client()
    browser.force_login(admin)
    offer = browser.get(path_of(url)).content.decode()
    assert "You made this link." in offer and "This is me" not in offer
    refused = browser.post(path_of(url), {"action": "link"})
    assert refused.status_code == 409 and "never add their memory to your own account" in refused.content.decode()
    assert MemoryFact.objects.for_user(person).live().count() == 1  # still the person's, in their memory
    assert not MemoryFact.objects.for_user(admin).exists()


def test_a_person_erased_by_their_org_while_signed_in_by_a_link_is_told_how_to_get_a_link(api, org, person):
    """After an admin erases a remembered person, their open tab lands on the sign-in page, which has no password
    for them: it says where links come from."""
    from memoryapp import orgs

    browser = Client()
    url = issue(api).json()["url"]
    browser.post(path_of(url))
    assert browser.get("/me/").status_code == 200
    orgs.erase_remembered(ExternalIdentity.objects.get(user=person))
    landed = browser.get("/me/", follow=True)
    assert landed.redirect_chain[-1][0].startswith("/login/")
    assert "ask your assistant for a fresh one" in landed.content.decode()


def test_only_a_hash_of_the_token_is_stored(person):
    url, _ = portal.issue_link(person)
    token = url.rstrip("/").rsplit("/", 1)[1]
    stored = PortalLink.objects.get().token_hash
    assert token not in stored and token.split(":")[0] not in stored
    assert stored == hashlib.sha256(token.split(":")[0].encode()).hexdigest()


def test_an_expired_link_gets_a_clear_page(person, travel):
    url, _ = portal.issue_link(person)
    travel(timedelta(minutes=10, seconds=1))
    response = Client().get(url)
    assert response.status_code == 410 and "expired" in response.content.decode()
    assert "_auth_user_id" not in Client().session


def test_the_lifetime_is_a_setting(person, settings, travel):
    settings.MEMORY = {**settings.MEMORY, "PORTAL_LINK_MINUTES": 2}
    url, expires_at = portal.issue_link(person)
    assert expires_at <= clock.now() + timedelta(minutes=2)
    travel(timedelta(minutes=3))
    assert Client().get(url).status_code == 410


@pytest.mark.parametrize(
    "token",
    ["nonsense", "abc:def", "x" * 300, "%00", "a:b:c"],
)
def test_a_tampered_or_made_up_link_is_400(db, token):
    response = Client().get(f"/me/portal/{token}/")
    assert response.status_code == 400 and "not valid" in response.content.decode()


def test_a_signed_token_for_a_link_that_no_longer_exists_is_410(person):
    url, _ = portal.issue_link(person)
    PortalLink.objects.all().delete()
    assert Client().get(url).status_code == 410


def test_unknown_and_other_org_users_are_404(api, org, other_org):
    response = issue(api, "nobody")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    sessions.get_or_create_user(other_org, "theirs")
    assert issue(api, "theirs").status_code == 404
    assert not PortalLink.objects.exists()


def test_no_key_no_link(client, person):
    response = client.post("/api/v1/users/customer-42/portal")
    assert response.status_code == 401


def test_staff_accounts_never_get_a_link(api, person):
    person.is_staff = True
    person.save()
    response = issue(api)
    assert response.status_code == 409 and "sign" in response.json()["error"]["message"]
    assert not PortalLink.objects.exists()


def test_a_person_of_two_organisations_signs_in_themselves(api, person, other_org):
    ExternalIdentity.objects.create(user=person, org=other_org, external_id="theirs")
    response = issue(api)
    assert response.status_code == 409 and "another organisation" in response.json()["error"]["message"]


def test_a_link_does_not_sign_in_an_account_made_staff_after_issue(person):
    url, _ = portal.issue_link(person)
    person.is_staff = True
    person.save()
    browser = Client()
    assert browser.post(url).status_code == 400
    assert "_auth_user_id" not in browser.session

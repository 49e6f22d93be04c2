"""Issue 41: who is who (remembered persons are not members) and one person, one memory (linking)."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test import Client

from memoryapp import erasure, linking, orgs, people, portal, recall, sessions, writing
from memoryapp.models import AgentSession, ErasureReceipt, ExternalIdentity, FactEvent, Membership, MemoryFact
from tests.conftest import demote_at_once

pytestmark = pytest.mark.django_db


def client_for(user):
    c = Client()
    c.force_login(user)
    return c


def token_of(url):
    return url.rstrip("/").rsplit("/", 1)[-1]


@pytest.fixture
def admin(org, make_user):
    return make_user("olga", org, role="admin")


# --- who is who ------------------------------------------------------------------------------------


def test_the_api_makes_a_remembered_person_never_a_member_and_the_pages_show_them_apart(org, admin, api, make_user):
    make_user("alice", org)
    assert api.post("/v1/users/alice/facts", {"text": "The user keeps bees.", "kind": "profile"}).status_code == 201
    remembered = sessions.find_user(org, "alice")
    assert not Membership.objects.filter(user=remembered).exists()

    members = client_for(admin).get(f"/orgs/{org.slug}/members/").content.decode()
    assert members.count("<strong>alice</strong>") == 1  # one alice: the member, not the agent's alice too
    page = client_for(admin).get(f"/orgs/{org.slug}/people/").content.decode()
    assert "People your agents remember" in page and ">alice</strong>" in page
    assert "The user keeps bees." not in page  # an admin never sees a remembered person's facts
    assert remembered.username not in page


def test_a_remembered_person_cannot_be_made_admin_so_the_last_admin_stays_one_who_signs_in(org, admin):
    remembered = sessions.get_or_create_user(org, "demo-customer")
    # Even a membership made by hand (as the old API did) cannot carry the admin role.
    forced = Membership.objects.create(user=remembered, org=org)
    with pytest.raises(orgs.OrgError, match="signs in"):
        orgs.change_role(forced, "admin")
    with pytest.raises(orgs.OrgError, match="at least one admin"):
        orgs.change_role(Membership.objects.get(user=admin), "member")


def test_an_admin_who_cannot_sign_in_does_not_count_on_any_path(org, admin, make_user):
    other = make_user("otto", org, role="admin")
    other.is_active = False
    get_user_model().objects.filter(pk=other.pk).update(is_active=False)  # deactivated earlier, somehow
    mine = Membership.objects.get(user=admin)
    with pytest.raises(orgs.OrgError):
        orgs.change_role(mine, "member")
    with pytest.raises(orgs.OrgError):
        orgs.remove_member(mine)
    with pytest.raises(CommandError, match="only admin"):
        call_command("erase_user", "olga", interactive=False)
    with pytest.raises(erasure.ErasureRefused):
        erasure.erase_user(admin, "self")
    # Django admin, the shell, any code: deactivating, unusable password or deleting the last one.
    admin.is_active = False
    with pytest.raises(people.LastAdmin), transaction.atomic():
        admin.save()
    admin.refresh_from_db()
    admin.set_unusable_password()
    with pytest.raises(people.LastAdmin), transaction.atomic():
        admin.save()
    with pytest.raises(people.LastAdmin), transaction.atomic():
        get_user_model().objects.get(pk=admin.pk).delete()
    assert Membership.objects.get(user=admin).role == "admin"


def test_django_admin_offers_no_delete_and_refuses_deactivating_the_last_admin(org, admin, make_user):
    staff = make_user("root", is_staff=True, is_superuser=True)
    browser = client_for(staff)
    assert browser.get(f"/admin/auth/user/{admin.pk}/delete/").status_code == 403
    form = browser.get(f"/admin/auth/user/{admin.pk}/change/")
    assert form.status_code == 200
    data = {
        "username": "olga",
        "password": admin.password,
        "is_active": "",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
    }
    refused = browser.post(f"/admin/auth/user/{admin.pk}/change/", data)
    assert refused.status_code == 200 and "only admin" in refused.content.decode()
    admin.refresh_from_db()
    assert admin.is_active


@pytest.mark.django_db(transaction=True)
def test_two_admins_demoting_each_other_beside_one_who_cannot_sign_in_leave_one_who_can(org, make_user):
    a = Membership.objects.get(user=make_user("ann", org, role="admin"))
    b = Membership.objects.get(user=make_user("ben", org, role="admin"))
    ghost = make_user("gus", org, role="admin")
    get_user_model().objects.filter(pk=ghost.pk).update(is_active=False)
    assert demote_at_once(a, b) == ["ok", "refused"]
    assert Membership.objects.who_can_sign_in().filter(org=org, role="admin").count() == 1


def test_the_org_tier_reaches_a_remembered_person_through_their_identity(org, admin):
    orgs.add_fact(org, admin, "The team deploys on Fridays.", "constraint")
    person = sessions.get_or_create_user(org, "cust-1")
    block = recall.recall(sessions.open_session(org, person), "when do you deploy?").block
    assert "The team deploys on Fridays." in block
    stranger = sessions.get_or_create_user(orgs.Organization.objects.create(slug="x", name="X"), "cust-2")
    assert "Fridays" not in recall.recall(sessions.open_session(org, stranger), "when do you deploy?").block


def test_admin_sends_a_portal_link_and_erases_a_remembered_person_without_javascript(org, admin, api):
    api.post("/v1/users/cust-9/facts", {"text": "The user keeps bees.", "kind": "profile"})
    ident = ExternalIdentity.objects.get(org=org, external_id="cust-9")
    browser = client_for(admin)
    shown = browser.post(f"/orgs/{org.slug}/people/{ident.id}/portal/").content.decode()
    assert "/me/portal/" in shown and "The user keeps bees." not in shown
    confirm = browser.get(f"/orgs/{org.slug}/people/{ident.id}/erase/")
    assert confirm.status_code == 200 and "Type" in confirm.content.decode()
    assert browser.post(f"/orgs/{org.slug}/people/{ident.id}/erase/", {"confirm": "nope"}).status_code == 400
    assert MemoryFact.objects.filter(text="The user keeps bees.").exists()
    done = browser.post(f"/orgs/{org.slug}/people/{ident.id}/erase/", {"confirm": "cust-9"})
    assert done.status_code == 302
    assert not MemoryFact.objects.filter(text="The user keeps bees.").exists()
    # The notice links the receipt, which shows the counts to anyone with its address, no sign-in needed.
    receipt = ErasureReceipt.objects.get()
    assert (
        f'<a href="/me/erased/{receipt.id}/">Receipt {receipt.id}</a>' in browser.get(done["Location"]).content.decode()
    )
    assert "facts, all versions" in Client().get(f"/me/erased/{receipt.id}/").content.decode()
    assert api.get("/v1/users/cust-9/facts").status_code == 404


# --- one person, one memory ---------------------------------------------------------------------


@pytest.fixture
def alice(make_user):
    return make_user("alice")


def _agent_knows_alice(org, api):
    for text, kind in (
        ("The user keeps bees on the roof.", "profile"),
        ("The user prefers answers in French.", "preference"),
    ):
        assert api.post("/v1/users/alice/facts", {"text": text, "kind": kind}).status_code == 201
    session = sessions.open_session(org, sessions.find_user(org, "alice"))
    sessions.add_turns(session, [("user", "Hello from the roof.")])
    return sessions.find_user(org, "alice"), session


def test_the_org_erase_page_of_a_person_with_their_own_account_says_why_it_cannot_and_offers_no_form(
    org, admin, api, alice
):
    remembered, _ = _agent_knows_alice(org, api)
    linking.link(alice, remembered)
    ident = ExternalIdentity.objects.get(org=org, external_id="alice")
    browser = client_for(admin)
    page = browser.get(f"/orgs/{org.slug}/people/{ident.id}/erase/")
    assert page.status_code == 200
    assert "only they can erase" in page.content.decode() and 'name="confirm"' not in page.content.decode()
    refused = browser.post(f"/orgs/{org.slug}/people/{ident.id}/erase/", {"confirm": "alice"})
    assert refused.status_code == 409 and "nor an organisation" in refused.content.decode()
    assert MemoryFact.objects.for_user(alice).filter(text="The user keeps bees on the roof.").exists()


def _link_in_browser(browser, org, remembered):
    url, _ = portal.issue_link(remembered, org=org)
    offer = browser.get(f"/me/portal/{token_of(url)}/").content.decode()
    assert "This is me: add this memory to my account" in offer
    # What it would add is said before it is pressed: whose id, how many facts, and that it stays.
    live = MemoryFact.objects.for_user(remembered).live().count()
    assert (
        f"Acme's assistant made this link for the person it knows as <code>alice</code>, who has {live} fact" in offer
    )
    assert "what was added stays in your account" in offer
    assert "reads that one memory, including what the others' assistants learned" in offer  # said before, not after
    return browser.post(f"/me/portal/{token_of(url)}/", {"action": "link"})


def test_an_agents_memory_of_an_account_holder_joins_it_only_when_she_says_this_is_me(scripted, org, api, alice):
    remembered, session = _agent_knows_alice(org, api)
    assert remembered.pk != alice.pk  # an org key never links, whatever the names
    browser = client_for(alice)
    assert "bees" not in browser.get("/me/").content.decode()

    assert _link_in_browser(browser, org, remembered).status_code == 302
    mine = browser.get("/me/").content.decode()
    assert "bees on the roof" in mine
    assert "Acme's assistant knows you as <code>alice</code>" in mine
    assert not get_user_model().objects.filter(pk=remembered.pk).exists()
    assert ExternalIdentity.objects.get(org=org, external_id="alice").user_id == alice.pk
    assert AgentSession.objects.get(id=session.id).user_id == alice.pk
    # The agent now reaches the one memory through its id; the account still signs in for itself.
    listed = api.get("/v1/users/alice/facts").json()
    assert {f["text"] for f in listed["facts"]} >= {"The user keeps bees on the roof."}
    assert browser.get("/me/").wsgi_request.user.pk == alice.pk


def test_linking_says_what_became_of_each_fact_and_a_persons_own_correction_stands(scripted, org, api, alice):
    moved = writing.store(alice, "The user lives in Porto.", "profile").fact
    writing.correct_fact(moved, "The user lives in Braga.", "profile", actor_user=alice, origin=MemoryFact.Origin.USER)
    for text in ("The user lives in Lisbon.", "The user keeps bees on the roof."):
        assert api.post("/v1/users/alice/facts", {"text": text, "kind": "profile"}).status_code == 201
    scripted.verdict_map = {"braga": "CONTRADICTS"}  # what the judge says of Lisbon against her Braga
    remembered = sessions.find_user(org, "alice")
    page = client_for(alice).post(_link_url(org, remembered), {"action": "link"}, follow=True).content.decode()
    assert "1 new, 1 set aside where a correction of yours says otherwise" in page
    live = set(MemoryFact.objects.for_user(alice).live().values_list("text", flat=True))
    assert "The user lives in Braga." in live and "The user lives in Lisbon." not in live


def test_memory_switched_off_under_the_agents_id_stays_off_once_linked(scripted, org, api, alice):
    remembered, _ = _agent_knows_alice(org, api)
    writing.set_memory_switch(remembered, False)  # in their portal session: "Turn memory off"
    browser = client_for(alice)
    page = browser.post(_link_url(org, remembered), {"action": "link"}, follow=True).content.decode()
    assert not writing.memory_enabled(alice) and "now off for your whole account" in page
    sent = api.post("/v1/users/alice/facts", {"text": "The user rows on Sundays.", "kind": "profile"})
    assert sent.status_code == 409  # the agent's id stays unremembered, as she chose
    # Unlinking later does not switch it back on, and the page says so before she confirms.
    identity = ExternalIdentity.objects.get(org=org, external_id="alice")
    assert "Your memory stays switched off" in browser.get(f"/me/known-as/{identity.id}/unlink/").content.decode()


def _link_url(org, remembered):
    return f"/me/portal/{token_of(portal.issue_link(remembered, org=org)[0])}/"


def test_a_linked_id_can_be_unlinked_without_javascript_and_the_agent_starts_an_empty_memory(scripted, org, api, alice):
    remembered, _ = _agent_knows_alice(org, api)
    browser = client_for(alice)
    _link_in_browser(browser, org, remembered)
    still_open = sessions.open_session(org, alice)
    identity = ExternalIdentity.objects.get(org=org, external_id="alice")
    mine = browser.get("/me/").content.decode()
    assert f'href="/me/known-as/{identity.id}/unlink/"' in mine
    confirm = browser.get(f"/me/known-as/{identity.id}/unlink/")
    assert confirm.status_code == 200 and "will no longer know you as" in confirm.content.decode()
    done = browser.post(f"/me/known-as/{identity.id}/unlink/", follow=True)
    page = done.content.decode()
    assert "no longer knows you as" in page and "bees on the roof" in page  # what it added stays hers
    assert "knows you as <code>alice</code>" not in page
    identity.refresh_from_db()
    assert identity.user_id != alice.pk and identity.linked_at is None
    assert not people.can_sign_in(identity.user)  # a remembered person again, with nothing remembered
    assert api.get("/v1/users/alice/facts").json()["facts"] == []  # the agent no longer reads her memory
    assert AgentSession.objects.get(id=still_open.id).ended_at is not None
    assert browser.post(f"/me/known-as/{identity.id}/unlink/").status_code == 404  # no longer hers
    # The agent's old sessions name her account, not the id: they no longer reach her memory either.
    old = str(still_open.id)
    assert api.post("/v1/recall", {"session": old, "message": "bees"}).status_code == 404
    assert api.post("/v1/prompt", {"session": old, "message": "bees"}).status_code == 404
    assert api.get(f"/v1/sessions/{old}").status_code == 404


def test_linking_confirms_duplicates_supersedes_contradictions_and_moves_history_as_is(scripted, org, alice):
    remembered = sessions.get_or_create_user(org, "alice")
    own = writing.store(alice, "The user lives in Berlin.", "profile").fact
    same = writing.store(alice, "The user drinks green tea.", "preference").fact
    old = writing.store(remembered, "The user drinks green tea daily.", "preference").fact
    moved = writing.store(remembered, "The user lives in Paris.", "profile").fact
    history = writing.store(remembered, "The user works at a bakery.", "profile").fact
    writing.correct_fact(history, "The user works at a bank.", "profile", actor_user=None)
    scripted.verdict_map = {"green tea": "DUPLICATE", "berlin": "CONTRADICTS"}

    def judge(new_text, old_texts):
        assert len(connection.atomic_blocks) == 1  # the test's own: no model call inside a transaction
        return scripted.verdicts(new_text, old_texts)

    result = linking.link(alice, remembered, judge=judge)

    same.refresh_from_db()
    own.refresh_from_db()
    assert same.confirmation_count == 2 and same.superseded_at is None
    assert own.superseded_at is not None  # Paris supersedes Berlin, through the write path
    live = set(MemoryFact.objects.for_user(alice).live().values_list("text", flat=True))
    assert live == {"The user drinks green tea.", "The user lives in Paris.", "The user works at a bank."}
    assert MemoryFact.objects.for_user(alice).get(id=history.id).supersede_reason == "corrected"
    assert MemoryFact.objects.for_user(alice).get(id=old.id).superseded_by_id == same.id
    assert MemoryFact.objects.for_user(alice).get(id=moved.id).supersede_reason == "linked"
    assert not FactEvent.objects.filter(user_id=remembered.pk).exists()
    assert result.facts["confirmed"] == 1 and result.identities == [("Acme", "alice")]
    # Data and privacy does not count a linked fact's original as a version the person's memory replaced.
    shown = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", client_for(alice).get("/me/data/").content.decode()))
    replaced = MemoryFact.objects.for_user(alice).filter(superseded_at__isnull=False).exclude(supersede_reason="linked")
    assert f"{replaced.count()} replaced versions kept for history" in shown and "original of a linked fact" in shown


def test_linking_is_refused_for_accounts_and_never_done_by_a_key(org, alice, make_user, api):
    with pytest.raises(linking.LinkRefused):
        linking.link(alice, make_user("bob"))  # another account: never merged into someone else
    # A portal link for an account cannot even be made, by a key or otherwise.
    assert api.post("/v1/users/alice/facts", {"text": "The user keeps bees.", "kind": "profile"}).status_code == 201
    assert sessions.find_user(org, "alice").pk != alice.pk


def test_erasure_covers_every_linked_identity_and_the_receipt_lists_them(scripted, org, api, alice):
    remembered, _ = _agent_knows_alice(org, api)
    browser = client_for(alice)
    _link_in_browser(browser, org, remembered)
    assert "Acme's <code>alice</code>" in browser.get("/me/erase/").content.decode()
    done = browser.post("/me/erase/", {"confirm": "ERASE"})
    receipt = browser.get(done["Location"]).content.decode()
    assert "Acme" in receipt
    assert api.get("/v1/users/alice/facts").status_code == 404
    assert not MemoryFact.objects.filter(text__contains="bees").exists()


def test_export_of_a_linked_account_includes_the_agents_memory_and_its_id(scripted, org, api, alice):
    remembered, _ = _agent_knows_alice(org, api)
    spare, _ = portal.issue_link(remembered, org=org, made_by="API key 'desk'")  # made, never opened
    browser = client_for(alice)
    _link_in_browser(browser, org, remembered)
    doc = browser.get("/me/data/export.json").json()
    assert {"organisation": "Acme", "external_id": "alice"} in doc["subject"]["external_ids"]
    assert any(f["text"] == "The user keeps bees on the roof." for f in doc["facts"])
    # The links made for that memory are its history, who asked for each included; none opens the account.
    assert sorted(str(link["made_by"]) for link in doc["portal_links"]) == ["API key 'desk'", "None"]
    assert Client().post(f"/me/portal/{token_of(spare)}/").status_code == 410
    readable = browser.get("/me/data/export.html").content.decode()
    assert "made at the request of API key &#x27;desk&#x27;, never used" in readable


def test_a_portal_session_names_its_person_in_words_and_shows_only_the_tabs_it_may_open(org, api):
    api.post("/v1/users/demo-customer/facts", {"text": "The user keeps bees.", "kind": "profile"})
    person = sessions.find_user(org, "demo-customer")
    browser = Client()
    url, _ = portal.issue_link(person, org=org)
    browser.post(url)
    page = browser.get("/me/").content.decode()
    assert "You, as known to Acme" in page
    assert person.username not in page
    assert f'href="/orgs/{org.slug}/"' not in page  # no org tab that would answer 403
    # A person an assistant remembers has no account: the pages do not promise to erase one.
    for path in ("/me/data/", "/me/erase/"):
        shown = browser.get(path).content.decode()
        assert "and account" not in shown and "Your account name" not in shown, path
    assert "Erase my memory" in shown and "the record of you" in shown and "account itself" not in shown
    readable = browser.get("/me/data/export.html").content.decode()
    assert "Everything held about you" in readable and person.username not in readable
    # Erased, the receipt speaks of the record of them, and counts their sign-in sessions once.
    receipt = browser.get(browser.post("/me/erase/", {"confirm": "ERASE"})["Location"]).content.decode()
    assert "the record of you is gone" in receipt and "your account" not in receipt
    assert "record of you (you had no account)" in receipt and "sign ins" not in receipt

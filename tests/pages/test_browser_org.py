"""Organisation pages in a real browser: an admin manages the org, a member reads it."""

import re

import pytest
from playwright.sync_api import expect

from memoryapp import extraction, orgs, sessions
from memoryapp.models import ApiKey, Invitation, Membership, MemoryFact, OrgFactProposal
from tests.conftest import login, screenshot, settled

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def team(scripted, org, make_user):
    alice = make_user("alice", org, role="admin", email="alice@acme.test", first_name="Alice", last_name="Admin")
    bob = make_user("bob", org, email="bob@acme.test", first_name="Bob", last_name="Builder")
    make_user("erin", email="erin@acme.test")
    orgs.add_fact(org, alice, "The team's main language is Go.", "profile")
    orgs.add_fact(org, alice, "Production deploys happen on Tuesdays and Thursdays.", "constraint")
    # Bob's conversation mentions something about the organisation: extraction proposes it.
    scripted.extract_answer = {
        "facts": [{"text": "The team reviews every pull request within a day.", "kind": "preference", "scope": "org"}]
    }
    s = sessions.open_session(org, bob)
    sessions.add_turns(s, [("user", "Our team reviews every PR within a day, it's a rule here.")])
    sessions.end_session(s)
    extraction.extract_session(s.id)
    sessions.create_api_key(org, "Support bot")
    return alice, bob


@pytest.mark.slow
def test_admin_adds_member_approves_proposal_and_edits_an_org_fact(page, org, team):
    login(page, "alice")
    page.goto(f"/orgs/{org.slug}/members/")
    expect(page.get_by_role("heading", name="Members (2)")).to_be_visible()
    page.get_by_label("Who it is for (a note for you, optional)").fill("Erin from support")
    page.get_by_role("button", name="Create invitation link").click()
    link = page.get_by_label("Link", exact=True).input_value()
    assert "/join/" in link
    expect(page.locator("#invitation-" + str(Invitation.objects.get().id))).to_contain_text("Erin from support")
    screenshot(page, "org-members-admin")
    # Erin, signed in elsewhere, opens the link and accepts with her own account (her consent).
    erin_page = page.context.browser.new_context(base_url=page.url.split("/orgs/")[0]).new_page()
    login(erin_page, "erin")
    erin_page.goto(link)
    screenshot(erin_page, "org-join-signed-in")
    erin_page.get_by_role("button", name="Accept as erin").click()
    expect(erin_page.get_by_role("status")).to_contain_text("You joined Acme as member.")
    erin_page.context.close()
    assert Membership.objects.filter(org=org, user__username="erin").exists()
    page.reload()
    expect(page.get_by_role("heading", name="Members (3)")).to_be_visible()

    page.get_by_role("link", name=re.compile("Proposed facts")).click()
    proposal = page.locator("li.proposal")
    expect(proposal).to_contain_text("Proposed by Bob Builder")
    screenshot(page, "org-proposals-admin")
    proposal.get_by_label("Fact").fill("The team reviews every pull request within one working day.")
    proposal.get_by_role("button", name=re.compile("^Approve")).click()
    expect(page.get_by_role("status")).to_contain_text("Approved and published")
    expect(page.get_by_text("No proposals are waiting.")).to_be_visible()
    assert OrgFactProposal.objects.get().status == "approved"

    page.get_by_role("link", name="Org memory").click()
    fact = page.locator("li.fact", has_text="within one working day")
    expect(fact).to_contain_text("Proposed by Bob Builder, approved by Alice Admin")
    target = page.locator("li.fact", has_text="main language is Go")
    target.locator("summary").click()  # the fact's ⋯ menu
    target.get_by_role("link", name="Correct").click()
    editor = page.locator("li.fact.editing")
    expect(editor).to_be_visible()
    screenshot(page, "org-memory-editing")
    settled(editor.get_by_label("Fact, as one sentence"))
    editor.get_by_label("Fact, as one sentence").fill("The team's main languages are Go and TypeScript.")
    editor.get_by_role("button", name="Save correction").click()
    expect(page.get_by_role("status")).to_contain_text("Corrected.")
    expect(page.locator("li.fact", has_text="Go and TypeScript")).to_contain_text("Corrected by Alice Admin")
    expect(page.get_by_text("The team's main language is Go.")).to_have_count(0)
    screenshot(page, "org-memory-admin")
    live = set(MemoryFact.objects.for_org(org).live().values_list("text", flat=True))
    assert "The team's main languages are Go and TypeScript." in live and "The team's main language is Go." not in live
    # With JavaScript, Delete… asks in a dialog and posts; the list refreshes in place.
    page.once("dialog", lambda dialog: dialog.accept())
    target = page.locator("li.fact", has_text="Go and TypeScript")
    target.locator("summary").click()
    target.get_by_role("link", name=re.compile("^Delete")).click()
    expect(page.get_by_role("status")).to_contain_text("Deleted")
    expect(page.locator("li.fact", has_text="Go and TypeScript")).to_have_count(0)

    page.get_by_role("link", name="API keys").click()
    page.get_by_label("Name", exact=True).fill("Release bot")
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_text("Copy it now. It will not be shown again.")).to_be_visible()
    assert page.get_by_label("Key", exact=True).input_value().startswith("mem_")
    screenshot(page, "org-keys-admin")


def test_member_sees_the_org_page_read_only(page, org, team):
    login(page, "bob")
    page.goto("/orgs/")
    page.get_by_role("main").get_by_role("link", name="Acme").click()
    expect(page.get_by_text("Production deploys happen on Tuesdays and Thursdays.")).to_be_visible()
    expect(page.get_by_text("You are a member")).to_be_visible()
    expect(page.get_by_role("heading", name="Add a fact")).to_have_count(0)
    expect(page.get_by_role("link", name=re.compile("^Edit"))).to_have_count(0)
    expect(page.locator("li.fact details.row-menu")).to_have_count(0)  # no actions menu for members
    expect(page.get_by_role("button", name=re.compile("^Delete"))).to_have_count(0)
    expect(page.get_by_role("link", name=re.compile("Proposed facts"))).to_have_count(0)
    screenshot(page, "org-memory-member")
    page.get_by_role("link", name="Members").click()
    expect(page.get_by_role("button", name=re.compile("^Remove"))).to_have_count(0)
    expect(page.get_by_text("alice@acme.test")).to_have_count(0)  # emails are for admins
    screenshot(page, "org-members-member")
    response = page.goto(f"/orgs/{org.slug}/keys/")
    assert response.status == 403
    expect(page.get_by_role("alert")).to_contain_text("Only admins of Acme can do this")


def test_admin_pages_work_without_javascript(page_nojs, org, team):
    page = page_nojs
    login(page, "alice")
    page.goto(f"/orgs/{org.slug}/")
    page.get_by_label("Fact, as one sentence").fill("The team is based in Lisbon.")
    page.get_by_role("button", name="Add to the org memory").click()
    # No kind is chosen for the admin: the form says so instead of filing it as a preference.
    expect(page.get_by_role("alert")).to_contain_text("Choose a kind from the list.")
    assert not MemoryFact.objects.for_org(org).filter(text__contains="Lisbon").exists()
    page.get_by_label("Kind").select_option("profile")
    page.get_by_role("button", name="Add to the org memory").click()
    expect(page.get_by_role("status")).to_contain_text("Added to the org memory.")
    assert MemoryFact.objects.for_org(org).get(text__contains="Lisbon").kind == "profile"
    lisbon = page.locator("li.fact", has_text="based in Lisbon")
    lisbon.locator("summary").click()  # the ⋯ menu is a <details>: it opens without JavaScript
    lisbon.get_by_role("link", name="Correct").click()
    assert page.url.endswith("/edit/")
    page.get_by_label("Fact, as one sentence").fill("The team is based in Porto.")
    page.get_by_role("button", name="Save correction").click()
    expect(page.locator("li.fact", has_text="based in Porto")).to_be_visible()
    # Deleting a shared fact asks first, without JavaScript too (it deleted at once).
    porto = page.locator("li.fact", has_text="based in Porto")
    porto.locator("summary").click()
    porto.get_by_role("link", name=re.compile("^Delete")).click()
    expect(page.get_by_role("heading", name=re.compile("for every member"))).to_be_visible()
    assert MemoryFact.objects.for_org(org).live().filter(text__contains="Porto").exists()
    page.get_by_role("button", name="Delete it").click()
    expect(page.get_by_role("status")).to_contain_text("Deleted")
    assert not MemoryFact.objects.for_org(org).live().filter(text__contains="Porto").exists()
    page.goto(f"/orgs/{org.slug}/proposals/")
    page.locator("li.proposal").get_by_role("button", name=re.compile("^Reject")).click()
    expect(page.get_by_role("status")).to_contain_text("Rejected.")
    page.get_by_role("link", name="API keys").click()
    page.get_by_label("Name", exact=True).fill("Batch job")
    page.get_by_role("button", name="Create key").click()
    key = page.get_by_label("Key", exact=True).input_value()
    assert sessions.authenticate_key(key).name == "Batch job"
    page.goto(f"/orgs/{org.slug}/keys/")
    expect(page.get_by_label("Key", exact=True)).to_have_count(0)  # shown once

    # Invite someone new, who makes their own account from the link (no JavaScript either side).
    page.goto(f"/orgs/{org.slug}/members/")
    page.get_by_role("button", name="Create invitation link").click()
    link = page.get_by_label("Link", exact=True).input_value()
    newcomer = page.context.browser.new_context(
        base_url=page.url.split("/orgs/")[0], java_script_enabled=False
    ).new_page()
    newcomer.goto(link)
    newcomer.get_by_label("Username").fill("nadia")
    newcomer.get_by_label("Password", exact=True).fill("a long passphrase 42")
    newcomer.get_by_label("Password confirmation").fill("a long passphrase 42")
    screenshot(newcomer, "org-join-new-account")
    newcomer.get_by_role("button", name="Create my account and join").click()
    expect(newcomer.get_by_role("status")).to_contain_text("You joined Acme as member.")
    newcomer.context.close()
    assert Membership.objects.get(org=org, user__username="nadia").role == "member"
    # A second invitation, revoked before use.
    page.get_by_role("button", name="Create invitation link").click()
    page.locator("table.invitations").get_by_role("button", name=re.compile("^Revoke")).click()
    expect(page.get_by_role("status")).to_contain_text("Invitation revoked.")


def test_admin_creates_a_read_only_key_and_sees_what_each_key_may_do(page, org, team):
    login(page, "alice")
    page.goto(f"/orgs/{org.slug}/keys/")
    page.get_by_label("Name", exact=True).fill("Dashboard")
    page.get_by_role("checkbox", name=re.compile("^Write")).uncheck()
    page.get_by_role("checkbox", name=re.compile("^Erase")).uncheck()
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_text("Copy it now. It will not be shown again.")).to_be_visible()
    row = page.locator("tr", has_text="Dashboard")
    expect(row.locator(".badge.scope")).to_have_text(["read"])
    expect(page.locator("tr", has_text="Support bot").locator(".badge.scope")).to_have_text(["read", "write"])
    screenshot(page, "org-keys-scopes")
    key = page.get_by_label("Key", exact=True).input_value()
    assert sessions.authenticate_key(key).scopes == ["read"]


def test_a_key_with_no_scope_is_refused_without_javascript(page_nojs, org, team):
    page = page_nojs
    login(page, "alice")
    page.goto(f"/orgs/{org.slug}/keys/")
    page.get_by_label("Name", exact=True).fill("Nothing")
    for name in ("^Read", "^Write", "^Erase"):
        page.get_by_role("checkbox", name=re.compile(name)).uncheck()
    page.get_by_role("button", name="Create key").click()
    expect(page.get_by_role("alert")).to_contain_text("Choose what the key may do")
    assert not sessions.authenticate_key("") and page.get_by_label("Name", exact=True).input_value() == "Nothing"


def test_the_new_key_has_a_copy_button_and_revoking_asks_first(page, org, team):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    login(page, "alice")
    page.goto(f"/orgs/{org.slug}/keys/")
    page.get_by_label("Name", exact=True).fill("Release bot")
    page.get_by_role("button", name="Create key").click()
    key = page.get_by_label("Key", exact=True).input_value()
    copy = page.get_by_role("button", name="Copy the key")
    copy.click()
    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == key

    # Revoke goes through a confirmation page (no window.confirm), with or without JavaScript.
    page.get_by_role("link", name="Revoke Release bot").click()
    expect(page.get_by_role("heading", name=re.compile("Revoke “Release bot”"))).to_be_visible()
    assert sessions.authenticate_key(key) is not None  # asking changed nothing
    page.get_by_role("button", name="Revoke key").click()
    expect(page.get_by_role("status")).to_contain_text("Revoked “Release bot”")
    assert sessions.authenticate_key(key) is None


def test_the_copy_button_stays_hidden_without_javascript_and_the_key_is_plain_text(page_nojs, org, team):
    page = page_nojs
    login(page, "alice")
    page.goto(f"/orgs/{org.slug}/keys/")
    page.get_by_label("Name", exact=True).fill("Batch job")
    page.get_by_role("button", name="Create key").click()
    field = page.get_by_label("Key", exact=True)
    assert field.input_value().startswith("mem_")
    expect(page.get_by_role("button", name="Copy the key")).to_have_count(0)  # hidden: it could do nothing
    field.select_text()  # a read-only field, not disabled: the whole key can be selected and copied by hand
    start, end, length = field.evaluate("el => [el.selectionStart, el.selectionEnd, el.value.length]")
    assert (start, end) == (0, length) and length > 40


def test_revoke_remove_and_leave_are_confirmed_without_javascript(page_nojs, org, team, make_user):
    page = page_nojs
    make_user("dora", org, first_name="Dora", last_name="Member")
    login(page, "alice")
    page.goto(f"/orgs/{org.slug}/keys/")
    page.get_by_role("link", name="Revoke Support bot").click()
    expect(page.get_by_role("heading", name=re.compile("Revoke “Support bot”"))).to_be_visible()
    screenshot(page, "org-key-revoke-confirm")
    page.get_by_role("link", name="Cancel").click()
    assert ApiKey.objects.get(name="Support bot").revoked_at is None
    page.get_by_role("link", name="Revoke Support bot").click()
    page.get_by_role("button", name="Revoke key").click()
    expect(page.get_by_role("status")).to_contain_text("Revoked “Support bot”")
    assert ApiKey.objects.get(name="Support bot").revoked_at is not None

    page.goto(f"/orgs/{org.slug}/members/")
    page.get_by_role("link", name="Remove Bob Builder").click()
    expect(page.get_by_role("heading", name="Remove Bob Builder from Acme?")).to_be_visible()
    assert Membership.objects.filter(org=org, user__username="bob").exists()
    page.get_by_role("button", name="Remove Bob Builder").click()
    expect(page.get_by_role("status")).to_contain_text("Removed bob.")
    assert not Membership.objects.filter(org=org, user__username="bob").exists()

    dora = page.context.browser.new_context(base_url=page.url.split("/orgs/")[0], java_script_enabled=False)
    dora_page = dora.new_page()
    login(dora_page, "dora")
    dora_page.goto(f"/orgs/{org.slug}/members/")
    dora_page.get_by_role("link", name="Leave organisation").click()
    expect(dora_page.get_by_role("heading", name="Leave Acme?")).to_be_visible()
    assert Membership.objects.filter(org=org, user__username="dora").exists()
    dora_page.get_by_role("button", name="Leave Acme").click()
    expect(dora_page.get_by_role("status")).to_contain_text("You left Acme.")
    dora.close()
    assert not Membership.objects.filter(org=org, user__username="dora").exists()


def test_admin_hands_a_member_a_password_reset_link_and_they_set_a_new_password(page, org, make_user):
    make_user("alice", org, role="admin")
    make_user("bob", org, first_name="Bob", last_name="Builder")
    login(page, "alice")
    page.goto(f"/orgs/{org.slug}/members/")
    page.get_by_role("button", name=re.compile("Password reset link for Bob")).click()
    link = page.locator("#id_reset_link").input_value()
    assert "/reset/" in link
    # Bob, in a browser of his own, opens it and chooses a new password, then signs in with it.
    bob_page = page.context.browser.new_context(base_url=page.url.split("/orgs/")[0]).new_page()
    bob_page.goto(link)
    bob_page.get_by_label("New password", exact=True).fill("a brand new passphrase 42")
    bob_page.get_by_label("New password again").fill("a brand new passphrase 42")
    bob_page.get_by_role("button", name="Set password").click()
    bob_page.wait_for_url(re.compile(r"/login/"))
    login(bob_page, "bob", "a brand new passphrase 42")
    bob_page.wait_for_url(re.compile(r"/me/"))
    # The link worked once.
    bob_page.goto(link)
    expect(bob_page.get_by_role("heading", name="This link can't be used")).to_be_visible()
    bob_page.context.close()

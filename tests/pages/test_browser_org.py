"""Organisation pages in a real browser: an admin manages the org, a member reads it."""

import re

import pytest
from playwright.sync_api import expect

from memoryapp import extraction, orgs, sessions
from memoryapp.models import Membership, MemoryFact, OrgFactProposal
from tests.conftest import login, screenshot

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


def test_admin_adds_member_approves_proposal_and_edits_an_org_fact(page, org, team):
    login(page, "alice")
    page.goto(f"/orgs/{org.slug}/members/")
    expect(page.get_by_role("heading", name="Members (2)")).to_be_visible()
    page.get_by_label("Username, or email address to invite someone new").fill("erin")
    page.locator("#members form.card").get_by_role("button", name="Add").click()
    expect(page.get_by_role("status")).to_contain_text("Added erin as member.")
    expect(page.get_by_role("heading", name="Members (3)")).to_be_visible()
    page.get_by_label("Username, or email address to invite someone new").fill("newcomer@acme.test")
    page.locator("#members form.card").get_by_role("button", name="Add").click()
    expect(page.get_by_role("status")).to_contain_text("Invited newcomer@acme.test")
    screenshot(page, "org-members-admin")
    assert Membership.objects.filter(org=org, user__username="erin").exists()

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
    editor.get_by_label("Fact, as one sentence").fill("The team's main languages are Go and TypeScript.")
    editor.get_by_role("button", name="Save correction").click()
    expect(page.get_by_role("status")).to_contain_text("Corrected.")
    expect(page.locator("li.fact", has_text="Go and TypeScript")).to_contain_text("Corrected by Alice Admin")
    expect(page.get_by_text("The team's main language is Go.")).to_have_count(0)
    screenshot(page, "org-memory-admin")
    live = set(MemoryFact.objects.for_org(org).live().values_list("text", flat=True))
    assert "The team's main languages are Go and TypeScript." in live and "The team's main language is Go." not in live

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
    page.goto(f"/orgs/{org.slug}/proposals/")
    page.locator("li.proposal").get_by_role("button", name=re.compile("^Reject")).click()
    expect(page.get_by_role("status")).to_contain_text("Rejected.")
    page.get_by_role("link", name="API keys").click()
    page.get_by_label("Name", exact=True).fill("Batch job")
    page.get_by_role("button", name="Create key").click()
    key = page.get_by_label("Key", exact=True).input_value()
    assert sessions.authenticate_key(key).name == "Batch job"
    page.reload()
    expect(page.get_by_label("Key", exact=True)).to_have_count(0)  # shown once

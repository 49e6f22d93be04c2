"""Flows from issue 16 in a real browser, with and without JavaScript: stale tabs, the back button,
over-long text, withdrawing a proposal, the phone menu, the proposals badge, the error pages."""

import re

import pytest
from playwright.sync_api import expect

from memoryapp import writing
from memoryapp.models import MemoryFact, OrgFactProposal
from memoryapp.pages.display import as_yours
from tests.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

FACT = "The user prefers tea to coffee."
PARAGRAPH = (
    "The user prefers tea to coffee in the morning, and at work they drink green tea, except on Fridays when "
    "the team goes out for coffee together at the place round the corner that opened last spring near the station."
)


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    """Every test here signs in; the sign-in limit (10 a minute per address) is per test, not per run."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def pat(org, make_user, scripted):
    person = make_user("pat", org)
    writing.store(person, FACT, "preference")
    return person


def both(page, page_nojs):
    return [(page, True), (page_nojs, False)]


def test_a_stale_second_tab_lands_on_the_current_version(browser, live_server, pat):
    context = browser.new_context(base_url=live_server.url, java_script_enabled=False)
    first, second = context.new_page(), context.new_page()
    login(first, "pat")
    fact = MemoryFact.objects.get(text=FACT)
    for tab in (first, second):
        tab.goto(f"/me/facts/{fact.id}/correct/")
    second.get_by_label("What the assistant should remember").fill("The user prefers green tea.")
    second.get_by_role("button", name="Save correction").click()
    expect(second.get_by_role("status")).to_contain_text("Corrected.")

    first.get_by_label("What the assistant should remember").fill("The user prefers black tea.")
    first.get_by_role("button", name="Save correction").click()
    expect(first.get_by_role("status")).to_contain_text("replaced while you were editing it")
    current = first.locator("li.fact.fresh")
    expect(current).to_contain_text("You prefer green tea.")
    assert not MemoryFact.objects.filter(text__contains="black tea").exists()
    # Reloading the old form's address never shows a form for the replaced fact.
    first.goto(f"/me/facts/{fact.id}/correct/")
    expect(first.get_by_role("button", name="Save correction")).to_have_count(0)
    expect(first.locator("li.fact.fresh")).to_contain_text("You prefer green tea.")
    context.close()


def test_back_after_delete_does_not_show_the_form(page_nojs, pat):
    page = page_nojs
    login(page, "pat")
    item = page.locator("li.fact", has_text=as_yours(FACT))
    item.locator("summary").click()
    item.get_by_role("link", name="Delete").click()
    page.get_by_role("button", name="Yes, delete it").click()
    expect(page.get_by_role("status")).to_contain_text("Deleted.")
    page.go_back()
    expect(page.get_by_role("button", name="Yes, delete it")).to_have_count(0)
    expect(page.get_by_role("status")).to_contain_text("has been deleted")
    assert not MemoryFact.objects.filter(text=FACT).exists()


def test_over_long_text_is_refused_never_cut(page, page_nojs, pat):
    fact = MemoryFact.objects.get(text=FACT)
    for pg, js in both(page, page_nojs):
        login(pg, "pat")
        pg.goto(f"/me/facts/{fact.id}/correct/")
        box = pg.get_by_label("What the assistant should remember")
        box.fill(PARAGRAPH)
        assert box.input_value() == PARAGRAPH  # the browser did not cut the pasted text
        if js:
            expect(pg.locator(".counter")).to_have_text(f"{len(PARAGRAPH) - 200} characters too many")
            box.fill("x" * 201)
            expect(pg.locator(".counter")).to_have_text("1 character too many")
            box.fill("x" * 199)
            expect(pg.locator(".counter")).to_have_text("1 character left")
            box.fill(PARAGRAPH)
        pg.get_by_role("button", name="Save correction").click()
        expect(pg.get_by_role("alert")).to_contain_text(f"This is {len(PARAGRAPH)} characters")
        expect(pg.get_by_label("What the assistant should remember")).to_have_value(PARAGRAPH)
        assert MemoryFact.objects.get(id=fact.id).superseded_at is None
        assert not MemoryFact.objects.filter(text__startswith=PARAGRAPH[:40], origin="user").exists()


def test_markup_is_refused_with_a_clear_message(page_nojs, pat):
    login(page_nojs, "pat")
    fact = MemoryFact.objects.get(text=FACT)
    page_nojs.goto(f"/me/facts/{fact.id}/correct/")
    page_nojs.get_by_label("What the assistant should remember").fill("The user prefers <b>tea</b>.")
    page_nojs.get_by_role("button", name="Save correction").click()
    expect(page_nojs.get_by_role("alert")).to_contain_text("plain text")
    assert MemoryFact.objects.get(id=fact.id).superseded_at is None


def propose(org, person, text="The team deploys on Fridays."):
    from memoryapp import sessions

    session = sessions.open_session(org, person)
    sessions.add_turns(session, [("user", "Our team deploys on Fridays.")])
    return OrgFactProposal.objects.create(
        org=org, proposed_by=person, text=text, kind="constraint", source_session=session
    )


def test_a_person_sees_and_withdraws_their_proposal(page, page_nojs, org, pat):
    for pg, _ in both(page, page_nojs):
        proposal = propose(org, pat)
        login(pg, "pat")
        card = pg.locator(f"#proposal-{proposal.id}")
        expect(card).to_contain_text("waiting for an admin")
        card.get_by_role("link", name="From this conversation").click()
        expect(pg.locator(f"#proposal-{proposal.id}")).to_contain_text("The team deploys on Fridays.")
        pg.locator(f"#proposal-{proposal.id}").get_by_role("button", name="Withdraw suggestion").click()
        expect(pg.get_by_role("status")).to_contain_text("Withdrawn.")
        assert not OrgFactProposal.objects.filter(id=proposal.id).exists()


def test_a_decided_proposal_shows_its_status_and_cannot_be_withdrawn(page, org, pat):
    proposal = propose(org, pat)
    OrgFactProposal.objects.filter(id=proposal.id).update(status="rejected")
    login(page, "pat")
    card = page.locator(f"#proposal-{proposal.id}")
    expect(card).to_contain_text("not added")
    expect(card.get_by_role("button", name="Withdraw suggestion")).to_have_count(0)


def test_the_proposals_badge_follows_an_approval(page, org, make_user, pat):
    make_user("ada", org, role="admin")
    propose(org, pat, "The team deploys on Fridays.")
    propose(org, pat, "The team uses Kubernetes.")
    login(page, "ada")
    page.goto(f"/orgs/{org.slug}/proposals/")
    badge = page.locator("#proposals-badge")
    expect(badge).to_have_text(re.compile(r"\s*2\s*"))
    page.locator("li.proposal").first.get_by_role("button", name=re.compile("^Approve")).click()
    expect(page.get_by_role("status")).to_contain_text("Approved")
    expect(badge).to_have_text(re.compile(r"\s*1\s*"))  # swapped out of band, without a reload


def test_with_javascript_an_action_on_what_another_tab_changed_lands_on_the_page_as_it_is(page, org, make_user, pat):
    """A stranger's report: Correct on a fact deleted in another tab swapped the whole list into the row,
    and Approve on a withdrawn proposal did nothing at all."""
    login(page, "pat")
    item = page.locator("li.fact", has_text=as_yours(FACT))
    writing.delete_fact(MemoryFact.objects.get(text=FACT), actor="user", actor_user=pat)  # the other tab
    item.locator("summary").click()
    item.get_by_role("link", name="Correct").click()
    expect(page.get_by_role("status")).to_contain_text("has been deleted")
    expect(page.locator("#results")).to_have_count(1)

    make_user("ada", org, role="admin")
    proposal = propose(org, pat, "The team deploys on Fridays.")
    page.context.clear_cookies()
    login(page, "ada")
    page.goto(f"/orgs/{org.slug}/proposals/")
    OrgFactProposal.objects.filter(id=proposal.id).delete()  # withdrawn meanwhile
    page.locator(f"#proposal-{proposal.id}").get_by_role("button", name=re.compile("^Approve")).click()
    expect(page.get_by_role("status")).to_contain_text("already changed in another tab")
    expect(page.locator(f"#proposal-{proposal.id}")).to_have_count(0)


def test_the_phone_menu_works_without_javascript(browser, live_server, org, pat):
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 375, "height": 812}, java_script_enabled=False
    )
    page = context.new_page()
    login(page, "pat")
    areas = page.get_by_role("navigation", name="Areas", exact=True)
    expect(areas).to_be_hidden()  # the wide header's links are folded away on a phone
    menu = page.locator("details.menu")
    box = menu.locator("summary").bounding_box()
    assert box["height"] >= 44 and box["width"] >= 44
    menu.locator("summary").click()
    panel = page.locator(".menu-panel")
    expect(panel).to_contain_text("Signed in as pat")
    panel.get_by_role("link", name="Acme").click()
    expect(page).to_have_url(re.compile(r"/orgs/acme/$"))
    # The header is one row: the brand and the menu button share it.
    brand = page.locator("a.brand").bounding_box()
    summary = page.locator("details.menu summary").bounding_box()
    assert abs(brand["y"] + brand["height"] / 2 - (summary["y"] + summary["height"] / 2)) < 4
    context.close()


def test_the_header_links_only_to_areas_the_person_may_use(page, org, make_user, pat):
    login(page, "pat")
    areas = page.get_by_role("navigation", name="Areas", exact=True)
    expect(areas.get_by_role("link")).to_have_text(["My memory", "Acme"])
    expect(page.locator(".who")).to_contain_text("Signed in as pat")
    make_user("sam", is_staff=True)
    page.context.clear_cookies()  # sign out
    login(page, "sam")
    page.goto("/me/")
    expect(page.get_by_role("navigation", name="Areas", exact=True).get_by_role("link")).to_have_text(
        ["My memory", "Support console"]
    )


def test_unknown_pages_get_the_sites_404(page, pat):
    login(page, "pat")
    response = page.goto("/me/facts/00000000-0000-0000-0000-000000000000/")
    assert response.status == 404
    expect(page.get_by_role("heading", name="Page not found")).to_be_visible()
    expect(page.get_by_role("link", name="Go to my memory")).to_be_visible()
    assert page.evaluate("getComputedStyle(document.querySelector('header.top')).backgroundColor") != "rgba(0, 0, 0, 0)"


def test_a_forms_button_does_not_touch_the_field_above_it(page, db):
    # Before: the sign-in button sat flush against the password field (0 px between them).
    page.goto("/login/")
    field = page.locator("input[name=password]").bounding_box()
    button = page.get_by_role("button", name="Sign in").bounding_box()
    assert button["y"] - (field["y"] + field["height"]) >= 8

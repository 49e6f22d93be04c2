"""The end-user flow in a real browser, with and without JavaScript: portal link to export."""

import json

import pytest
from playwright.sync_api import expect

from memoryapp import sessions
from memoryapp.models import MemoryFact
from memoryapp.pages.display import as_yours
from tests.conftest import screenshot, settled
from tests.pages.test_account_pages import seed_memory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CORRECTED_FROM = "The user likes examples written in Python."
CORRECTED_TO = "The user likes examples written in Go."
DELETED = "The user is preparing a conference talk on connection pooling."


def portal_path(api, external_id):
    url = api.post(f"/v1/users/{external_id}/portal").json()["url"]
    return "/" + url.split("://", 1)[1].split("/", 1)[1]


def open_portal(page, link, shot=None):
    """Open a portal link as a person does: the page only asks; pressing Continue uses the link."""
    page.goto(link)
    page.get_by_role("heading", name="Open “My memory”").wait_for()
    if shot:
        screenshot(page, shot)
    page.get_by_role("button", name="Continue").click()


def fact_item(page, text):
    """A fact as its owner sees it: in the second person ("You like ...")."""
    return page.locator("li.fact", has_text=as_yours(text))


def row_action(page, text, name):
    """Open a fact's ⋯ menu and follow one of its actions (a native <details>: works without JS)."""
    item = fact_item(page, text)
    item.locator("summary").click()
    item.get_by_role("link", name=name).click()


def run_flow(page, api, org, scripted, travel, js, prefix):
    person = sessions.get_or_create_user(org, "customer-42")
    seed_memory(org, person, scripted, travel)
    link = portal_path(api, "customer-42")

    # portal link -> Continue -> My memory
    open_portal(page, link, shot=f"{prefix}-portal-continue")
    page.get_by_role("heading", name="My memory").wait_for()
    assert page.url.endswith("/me/")
    # a portal sign-in reaches My memory only
    response = page.goto("/orgs/")
    assert response.status == 403
    page.get_by_role("heading", name="This sign-in only opens your memory").wait_for()
    screenshot(page, f"{prefix}-portal-only")
    page.get_by_role("link", name="Go to My memory").click()
    page.get_by_role("heading", name="My memory").wait_for()
    page.get_by_role("heading", name="My memory").wait_for()
    headings = page.locator(".kind-group h2").all_inner_texts()
    assert [h.split()[0] for h in headings] == ["Constraints", "About", "Preferences", "Goals"]
    screenshot(page, f"{prefix}-memory")

    if js:
        # search filters as you type (htmx), and the first Tab reaches the skip link
        page.fill("#q", "rust")
        expect(page.locator("#results li.fact")).to_have_count(1)
        assert "learn Rust" in page.locator("#results").inner_text()
        screenshot(page, f"{prefix}-memory-search")
        page.fill("#q", "planetscale")
        expect(page.locator("#results")).to_contain_text("PlanetScale")
        page.go_back()  # the list for "rust" comes back, and so do the words in the box
        expect(page.locator("#results")).to_contain_text("learn Rust")
        expect(page.locator("#q")).to_have_value("rust")
        page.goto("/me/")
        page.keyboard.press("Tab")
        expect(page.locator(":focus")).to_have_text("Skip to content")

    # correct a fact
    row_action(page, CORRECTED_FROM, "Correct")
    form_text = page.locator("textarea[name=text]")
    form_text.wait_for()
    screenshot(page, f"{prefix}-correct")
    assert ("/correct/" in page.url) != js  # in place with htmx, its own page without
    if js:
        settled(form_text)
    form_text.fill("The user likes Go. And also Rust.")
    page.get_by_role("button", name="Save correction").click()
    page.get_by_text("more than one sentence").wait_for()
    screenshot(page, f"{prefix}-correct-error")
    if js:
        settled(page.locator("textarea[name=text]"))
    page.locator("textarea[name=text]").fill(CORRECTED_TO)
    page.get_by_role("button", name="Save correction").click()
    fact_item(page, CORRECTED_TO).wait_for()
    assert fact_item(page, CORRECTED_FROM).count() == 0

    # its history shows both versions
    row_action(page, CORRECTED_TO, "History")
    page.get_by_role("heading", name="History of a fact").wait_for()
    versions = page.locator(".versions").inner_text()
    assert as_yours(CORRECTED_FROM) in versions and as_yours(CORRECTED_TO) in versions
    assert "You corrected it" in versions and "Learned from a conversation" in versions
    screenshot(page, f"{prefix}-history")

    # delete another
    page.get_by_role("link", name="Memories").first.click()
    row_action(page, DELETED, "Delete")
    page.get_by_role("button", name="Yes, delete it").wait_for()
    screenshot(page, f"{prefix}-delete-confirm")
    page.get_by_role("button", name="Yes, delete it").click()
    page.get_by_text("Deleted.").first.wait_for()
    assert fact_item(page, DELETED).count() == 0 or "Deleted." in fact_item(page, "Deleted.").inner_text()
    screenshot(page, f"{prefix}-after-delete")

    # switch memory off
    page.get_by_role("navigation", name="My memory").get_by_role("link", name="Data and privacy").click()
    screenshot(page, f"{prefix}-switch-on")
    page.get_by_role("button", name="Turn memory off").click()
    page.get_by_role("button", name="Turn memory on").wait_for()
    assert "Nothing is used and nothing is learned" in page.locator("#memory-switch").inner_text()
    screenshot(page, f"{prefix}-switch-off")

    # the export contains the correction and not the deleted fact
    page.get_by_role("heading", name="Data and privacy").wait_for()
    screenshot(page, f"{prefix}-data")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download (JSON)").click()
    with open(download.value.path(), encoding="utf-8") as fh:
        doc = json.load(fh)
    facts = {f["text"]: f for f in doc["facts"]}
    assert facts[CORRECTED_TO]["state"] == "live" and facts[CORRECTED_TO]["provenance"]["origin"] == "user"
    assert facts[CORRECTED_FROM]["state"] == "superseded"  # the old version stays, as history
    assert DELETED not in facts
    assert doc["memory_switch"]["enabled"] is False
    assert not MemoryFact.objects.filter(text=DELETED).exists()
    return person, link


@pytest.mark.slow
def test_account_flow_with_javascript(page, api, org, scripted, travel):
    person, used_link = run_flow(page, api, org, scripted, travel, js=True, prefix="account")

    page.goto("/me/conversations/")
    screenshot(page, "account-conversations")
    page.locator(".convo-title").last.click()
    page.get_by_role("heading", name="What it taught the assistant").wait_for()
    screenshot(page, "account-conversation")
    page.goto("/me/conversations/")
    page.locator(".convo", has_text="memory off").locator(".convo-title").first.click()
    screenshot(page, "account-conversation-off")
    page.goto("/me/about/")
    screenshot(page, "account-about")

    # a reused link gets a clear page, not an error
    page.goto(used_link)
    assert page.get_by_role("heading", name="This link can't be used").is_visible()
    screenshot(page, "account-portal-used")

    # erase, behind the typed word, ends on a receipt with the person signed out
    page.goto("/me/erase/")
    page.fill("#id_confirm", "erase")
    page.get_by_role("button", name="Erase my memory", exact=True).click()
    page.get_by_text("Type ERASE in capital letters").wait_for()
    screenshot(page, "account-erase-error")
    page.fill("#id_confirm", "ERASE")
    page.get_by_role("button", name="Erase my memory", exact=True).click()
    page.get_by_role("heading", name="Your memory has been erased").wait_for()
    screenshot(page, "account-erased")
    page.goto("/me/")
    assert "/login/" in page.url

    # someone new sees the empty state
    sessions.get_or_create_user(org, "customer-7")
    open_portal(page, portal_path(api, "customer-7"))
    page.get_by_text("Nothing remembered yet.").wait_for()
    screenshot(page, "account-empty")


@pytest.mark.slow
def test_account_flow_without_javascript(page_nojs, api, org, scripted, travel):
    run_flow(page_nojs, api, org, scripted, travel, js=False, prefix="account-nojs")
    page_nojs.goto("/me/conversations/")
    assert page_nojs.locator(".convo").count() == 4

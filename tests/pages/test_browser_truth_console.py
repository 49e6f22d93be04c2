"""Issue 44 on the console and the shared pieces: Find opens on something, one date format, readable
costs, the review counter, the forgetting log of the demo, support access in words, one pager, Vary."""

import io
import re

import pytest
from django.core.management import call_command
from django.test import Client
from playwright.sync_api import expect

from memoryapp import support_access
from memoryapp.models import AgentSession, ExtractionRun, MemoryFact, RecallLog, RecallReview, SupportAccess
from memoryapp.pages.display import usd
from tests.conftest import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def sam(make_user):
    return make_user("sam", is_staff=True)


def test_find_opens_on_the_latest_runs_and_shows_no_ones_facts_until_asked(page, sam, org, make_user):
    """Opening the console looks at no one's memory: facts appear for a search, and only then is access logged."""
    rita = make_user("rita", org)
    session = AgentSession.objects.create(user=rita, org=org)
    run = ExtractionRun.objects.create(session=session, user=rita, backend="offline", model="m", status="done")
    MemoryFact.objects.create(user=rita, text="The user owns a red bicycle.", kind="profile", embedding_model="x")
    login(page, "sam")
    page.goto("/console/")
    expect(page.get_by_role("link", name=f"Run #{run.id}")).to_be_visible()
    expect(page.locator("#results")).to_contain_text("Search to see facts")
    expect(page.locator("#results")).not_to_contain_text("red bicycle")
    assert not SupportAccess.objects.filter(user=rita).exists()
    page.get_by_label("Text contains").fill("bicycle")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#results")).to_contain_text("The user owns a red bicycle.")
    assert SupportAccess.objects.filter(user=rita, page="find").count() == 1


def test_costs_and_dates_read_one_way():
    assert [usd(x) for x in (0, 0.0012345, 0.5, 1234.5)] == ["$0", "$0.0012", "$0.50", "$1,234.50"]


def test_a_run_page_shows_cost_without_six_zeros(page, sam, org, make_user):
    rita = make_user("rita", org)
    session = AgentSession.objects.create(user=rita, org=org)
    run = ExtractionRun.objects.create(session=session, user=rita, backend="offline", model="m", status="done")
    login(page, "sam")
    page.goto(f"/console/runs/{run.id}/")
    expect(page.locator("dd", has_text="$0")).to_have_text("$0")
    expect(page.get_by_text("0.000000")).to_have_count(0)
    expect(page.locator("main")).not_to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d"))


def test_the_review_counter_follows_a_judgement(page, sam, org, make_user):
    rita = make_user("rita", org)
    fact = MemoryFact.objects.create(user=rita, text="The user owns cat 1.", kind="profile", embedding_model="x")
    session = AgentSession.objects.create(user=rita, org=org)
    for i in range(3):
        log = RecallLog.objects.create(user=rita, session=session, fact=fact, tier="always", position=i)
        RecallReview.objects.create(recall_log=log, user=rita)
    login(page, "sam")
    page.goto("/console/quality/review/")
    counter = page.locator("#review-counts")
    expect(counter).to_have_text("3 waiting · 0 judged.")
    page.locator("li.review").first.get_by_role("button", name="Relevant", exact=True).click()
    expect(counter).to_have_text("2 waiting · 1 judged.")


def test_the_demo_forgetting_log_shows_the_run_that_expired_its_goal(page, sam):
    call_command("seed_demo", stdout=io.StringIO())
    login(page, "sam")
    page.goto("/console/forgetting/")
    expect(page.locator("main")).not_to_contain_text("has not run yet")
    page.locator("main a[href*='/console/forgetting/']").first.click()
    expect(page.locator("main")).to_contain_text("The user wants to learn Rust this year.")


def test_support_access_reads_in_plain_words_and_fits_a_phone(page, sam, org, make_user):
    pat = make_user("pat", org)
    fact = MemoryFact.objects.create(
        user=pat, text="The user's team is on-prem.", kind="constraint", embedding_model="x"
    )
    support_access.record(sam, pat, f"fact {fact.id}")
    support_access.record(sam, pat, "find")
    login(page, "pat")
    page.set_viewport_size({"width": 375, "height": 800})
    page.goto("/me/data/")
    accesses = page.locator(".accesses")
    expect(accesses).to_contain_text("a fact: “Your team is on-prem.”")
    expect(accesses).to_contain_text("a search")
    expect(accesses).not_to_contain_text(str(fact.id))
    assert page.evaluate("document.documentElement.scrollWidth") <= 375


def test_console_lists_use_the_one_keyset_pager(sam, org, make_user):
    from memoryapp.models import SupportAccess

    pat = make_user("pat", org)
    for _ in range(55):
        support_access.record(sam, pat, "find")
    client = Client()
    client.force_login(sam)
    first = client.get("/console/access/")
    cursor = first.context["page"].next_cursor
    assert cursor and "Next →" in first.content.decode()
    second = client.get("/console/access/", {"after": cursor})
    assert len(second.context["page"].rows) == 5 and "First page" in second.content.decode()
    shown = {a.id for a in first.context["page"].rows} | {a.id for a in second.context["page"].rows}
    assert shown == set(SupportAccess.objects.values_list("id", flat=True))
    assert client.get("/console/access/", {"after": "garbage"}).status_code == 400


@pytest.mark.parametrize("url", ["/console/", "/orgs/acme/members/", "/me/"])
def test_every_page_or_partial_view_varies_on_hx_request(url, sam, org, make_user):
    admin = make_user("ada", org, role="admin")
    client = Client()
    client.force_login(sam if url.startswith("/console/") else admin)
    for headers in ({}, {"HX-Request": "true"}):
        response = client.get(url, headers=headers)
        assert response.status_code == 200
        assert "HX-Request" in response.get("Vary", ""), (url, headers, response.get("Vary"))

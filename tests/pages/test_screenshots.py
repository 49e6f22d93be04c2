"""Every page, for each audience, at 375 and 1440 px, on the demo data that `make run` loads.

Each page is checked the way a person would notice a layout bug: nothing is wider than a phone's
screen at 375 px, and the header's controls are big enough to tap. The pictures go to
tests/screenshots/; with UPDATE_SCREENSHOTS=1 they go to docs/screenshots/ (committed, small:
quantised to 256 colours)."""

import os

import pytest
from django.core.management import call_command
from django.template.loader import render_to_string
from PIL import Image

from memoryapp import metrics
from memoryapp.models import AgentSession, ExtractionRun, MemoryFact
from tests.conftest import BASE_DIR, SCREENSHOTS

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTHS = ((1440, 900), (375, 812))
MAX_HEIGHT = 2600  # px of a full-page picture kept; enough to show every page's shape


def out_dir():
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        return os.path.join(BASE_DIR, "docs", "screenshots")
    return SCREENSHOTS


def shoot(page, name, problems):
    """Both widths; record pages that overflow a phone's width or have tiny header controls."""
    folder = out_dir()
    os.makedirs(folder, exist_ok=True)
    for width, height in WIDTHS:
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(50)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        if overflow > 0:
            problems.append(f"{name} at {width}px is {overflow}px wider than the screen")
        if width == 375:
            small = page.evaluate(
                """[...document.querySelectorAll('header.top summary, header.top a.brand, .subnav a')]
                   .filter(e => e.offsetParent !== null && e.getBoundingClientRect().height < 44)
                   .map(e => e.textContent.trim())"""
            )
            if small:
                problems.append(f"{name}: header targets under 44px tall: {small}")
        path = os.path.join(folder, f"{name}-{width}.png")
        page.screenshot(path=path, full_page=True)
        image = Image.open(path)
        if image.height > MAX_HEIGHT:
            image = image.crop((0, 0, image.width, MAX_HEIGHT))
        image.convert("RGB").quantize(colors=256).save(path, optimize=True)


def sign_in(browser, live_server, username, password):
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    return context, page


def test_every_page_for_every_audience(browser, live_server):
    from memoryapp.management.commands import seed_demo

    call_command("seed_demo", stdout=open(os.devnull, "w"))
    demo_facts = MemoryFact.objects.filter(user__username="demo")
    replaced = demo_facts.filter(superseded_at__isnull=False, supersede_reason="contradicts").first()
    live = demo_facts.filter(superseded_at__isnull=True, expired_at__isnull=True).first()
    session = AgentSession.objects.filter(user__username="demo", ended_at__isnull=False).order_by("started_at").first()
    run = ExtractionRun.objects.filter(session=session).first()
    metrics.draw_review_sample(5)
    problems = []

    # The end user's own pages.
    context, page = sign_in(browser, live_server, "demo", seed_demo.DEMO_PASSWORD)
    for name, path in [
        ("me-memory", "/me/"),
        ("me-fact-history", f"/me/facts/{replaced.superseded_by_id}/"),
        ("me-fact-correct", f"/me/facts/{live.id}/correct/"),
        ("me-fact-delete", f"/me/facts/{live.id}/delete/"),
        ("me-conversations", "/me/conversations/"),
        ("me-conversation", f"/me/conversations/{session.id}/"),
        ("me-data", "/me/data/"),
        ("me-erase", "/me/erase/"),
        ("me-about", "/me/about/"),
        ("org-admin-memory", "/orgs/demo/"),
        ("org-admin-proposals", "/orgs/demo/proposals/"),
        ("org-admin-members", "/orgs/demo/members/"),
        ("org-admin-keys", "/orgs/demo/keys/"),
        ("org-admin-delete", "/orgs/demo/delete/"),
        ("error-404", "/me/facts/00000000-0000-0000-0000-000000000000/"),
    ]:
        page.goto(path)
        shoot(page, name, problems)
    # The phone menu, open.
    page.set_viewport_size({"width": 375, "height": 812})
    page.goto("/me/")
    page.locator("details.menu summary").click()
    page.locator(".menu-panel").wait_for()
    page.screenshot(path=os.path.join(out_dir(), "me-phone-menu-375.png"))
    context.close()

    # A plain member of the organisation.
    context, page = sign_in(browser, live_server, "member", seed_demo.MEMBER_PASSWORD)
    for name, path in [("org-member-memory", "/orgs/demo/"), ("org-member-members", "/orgs/demo/members/")]:
        page.goto(path)
        shoot(page, name, problems)
    page.goto("/orgs/demo/keys/")  # admins only
    shoot(page, "org-member-forbidden", problems)
    context.close()

    # Support staff.
    context, page = sign_in(browser, live_server, "staff", seed_demo.STAFF_PASSWORD)
    for name, path in [
        ("console-find", "/console/?org=demo"),
        ("console-fact", f"/console/facts/{replaced.id}/"),
        ("console-conversation", f"/console/sessions/{session.id}/"),
        ("console-run", f"/console/runs/{run.id}/"),
        ("console-health", "/console/health/"),
        ("console-poisoning", "/console/poisoning/"),
        ("console-quality", "/console/quality/"),
        ("console-review", "/console/quality/review/"),
        ("console-access", "/console/access/"),
        ("console-at-limit", "/console/at-limit/"),
        ("console-forgetting", "/console/forgetting/"),
    ]:
        page.goto(path)
        shoot(page, name, problems)
    context.close()

    # Signed out: the sign-in page, and the 500 page (rendered without a request, as Django does).
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto("/login/")
    shoot(page, "login", problems)
    for code in ("403", "500"):
        page.set_content(render_to_string(f"{code}.html"))
        page.wait_for_load_state()
        shoot(page, f"error-{code}", problems)
    context.close()

    assert not problems, "\n".join(problems)

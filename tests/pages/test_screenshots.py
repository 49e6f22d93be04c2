"""Every page, for each audience, at 375 and 1440 px, on the demo data that `make run` loads.

Each page is checked the way a person would notice a layout bug: nothing is wider than a phone's
screen at 375 px, and the header's controls are big enough to tap. The pictures go to
tests/screenshots/ as taken; with UPDATE_SCREENSHOTS=1 they go to docs/screenshots/ (committed, small:
cut to MAX_HEIGHT and quantised to 256 colours). The same walk runs axe-core on every page at both
widths: no violations (one walk for both, where there were two: each seeds the demo and signs in)."""

import io
import os
from pathlib import Path

import axe_playwright_python  # requirements-dev.txt: only its bundled axe.min.js is used
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.template.loader import render_to_string
from PIL import Image

from memoryapp import metrics, password_reset
from memoryapp.models import AgentSession, ExtractionRun, MemoryFact
from tests.conftest import BASE_DIR, SCREENSHOTS

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTHS = ((1440, 900), (375, 812))
MAX_HEIGHT = 2600  # px of a full-page picture kept; enough to show every page's shape
AXE = (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text(encoding="utf-8")


UPDATE = os.environ.get("UPDATE_SCREENSHOTS") == "1"  # remake the committed copies in docs/screenshots/


def out_dir():
    return os.path.join(BASE_DIR, "docs", "screenshots") if UPDATE else SCREENSHOTS


def picture(name):
    """The committed copies are PNGs; the ones a test run leaves to be looked at are JPEGs (half the time)."""
    return os.path.join(out_dir(), f"{name}.png" if UPDATE else f"{name}.jpg")


def violations(page):
    """axe-core's violations on the page as it is shown: 'rule: target …' lines."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE)  # evaluated, not a <script>: the pages' CSP allows only their own scripts
    # resultTypes: only violations get a selector for every node (axe's documented speed-up); the
    # rules that run, and the violations found, are the same.
    found = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations")
    return [f"{v['id']}: {', '.join(str(n['target']) for n in v['nodes'][:3])}" for v in found]


def shoot(page, name, problems, axe_problems=None):
    """Both widths; record pages that overflow a phone's width or have tiny header controls, and with
    `axe_problems` (a list) axe-core's violations at each width."""
    os.makedirs(out_dir(), exist_ok=True)
    for width, height in WIDTHS:
        page.set_viewport_size({"width": width, "height": height})
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
        path = picture(f"{name}-{width}")
        page.screenshot(path=path, full_page=True)
        if UPDATE:  # only the committed copies are cut and quantised (slow)
            image = Image.open(path)
            if image.height > MAX_HEIGHT:
                image = image.crop((0, 0, image.width, MAX_HEIGHT))
            image.convert("RGB").quantize(colors=256).save(path, optimize=True)
        if axe_problems is not None:
            axe_problems.extend(f"{name} at {width}px: {line}" for line in violations(page))


def sign_in(browser, live_server, username, password):
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    return context, page


def walk(browser, live_server, visit):
    """Every page for every audience on the demo data: `visit(page, name)` on each one."""
    from memoryapp.management.commands import seed_demo

    call_command("seed_demo", stdout=io.StringIO())
    demo_facts = MemoryFact.objects.filter(user__username="demo")
    replaced = demo_facts.filter(superseded_at__isnull=False, supersede_reason="contradicts").first()
    live = demo_facts.filter(superseded_at__isnull=True, expired_at__isnull=True).first()
    session = AgentSession.objects.filter(user__username="demo", ended_at__isnull=False).order_by("started_at").first()
    run = ExtractionRun.objects.filter(session=session).first()
    metrics.draw_review_sample(5)

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
        ("org-admin-people", "/orgs/demo/people/"),
        ("org-admin-keys", "/orgs/demo/keys/"),
        ("org-admin-delete", "/orgs/demo/delete/"),
        ("error-404", "/me/facts/00000000-0000-0000-0000-000000000000/"),
        ("error-400", "/me/?after=not-a-cursor"),
    ]:
        page.goto(path)
        visit(page, name)
    yield page  # the caller may look at more while signed in as the demo person
    context.close()

    # A plain member of the organisation.
    context, page = sign_in(browser, live_server, "member", seed_demo.MEMBER_PASSWORD)
    for name, path in [("org-member-memory", "/orgs/demo/"), ("org-member-members", "/orgs/demo/members/")]:
        page.goto(path)
        visit(page, name)
    page.goto("/orgs/demo/keys/")  # admins only
    visit(page, "org-member-forbidden")
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
        visit(page, name)
    context.close()

    # Signed out: the sign-in page, and the 500 page (rendered without a request, as Django does).
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto("/login/")
    visit(page, "login")
    # A one-time password reset link, as an admin passes it on, and one that no longer works.
    link, _ = password_reset.issue_link(None, get_user_model().objects.get(username="member"))
    page.goto(link)
    visit(page, "password-reset")
    page.goto("/reset/no-such-link/")
    visit(page, "password-reset-invalid")
    for code in ("403", "500"):
        page.set_content(render_to_string(f"{code}.html"))
        page.wait_for_load_state()
        visit(page, f"error-{code}")
    context.close()


def test_every_page_for_every_audience_with_no_axe_violation(browser, live_server):
    problems, axe_problems = [], []
    pages = walk(browser, live_server, lambda page, name: shoot(page, name, problems, axe_problems))
    page = next(pages)
    # The phone menu, open.
    page.set_viewport_size({"width": 375, "height": 812})
    page.goto("/me/")
    page.locator("details.menu summary").click()
    page.locator(".menu-panel").wait_for()
    page.screenshot(path=picture("me-phone-menu-375"))
    for _ in pages:  # the rest of the walk: each page is shot as the generator reaches it
        pass
    assert not problems, "\n".join(problems)
    assert not axe_problems, "\n".join(axe_problems)


def test_who_is_who_and_linking_pages(browser, live_server):
    """Issue 41: members and remembered persons apart, the link offer, a linked person's /me/, a portal session."""
    from memoryapp import portal, sessions, writing
    from memoryapp.management.commands import seed_demo
    from memoryapp.models import Organization

    call_command("seed_demo", stdout=io.StringIO())
    org = Organization.objects.get(slug="demo")
    customer = sessions.get_or_create_user(org, "demo-customer")
    writing.store(customer, "The user ships parcels to Lisbon every Monday.", "profile")
    remembered = sessions.get_or_create_user(org, "member-at-home")
    writing.store(remembered, "The user prefers delivery windows after 6 pm.", "preference")
    sessions.get_or_create_user(org, "crm-" + "7f3a" * 31)  # an id of 128 characters wraps on a phone
    problems = []

    context, page = sign_in(browser, live_server, "demo", seed_demo.DEMO_PASSWORD)
    for name, path in [("org-admin-members", "/orgs/demo/members/"), ("org-admin-people", "/orgs/demo/people/")]:
        page.goto(path)
        shoot(page, name, problems)
    page.set_viewport_size({"width": 375, "height": 800})
    widest = page.evaluate(
        "Math.max(...[...document.querySelectorAll('table.people strong')].map(e => e.getBoundingClientRect().right))"
    )
    assert widest <= 375, f"a person's id runs {widest - 375:.0f}px past a phone's screen on People"
    context.close()

    # The plain member, signed in, opens a link the assistant made for the id it knows them by.
    context, page = sign_in(browser, live_server, "member", seed_demo.MEMBER_PASSWORD)
    url, _ = portal.issue_link(remembered, org=org)
    page.goto(url)
    shoot(page, "me-portal-link-offer", problems)
    page.click("text=This is me: add this memory to my account")
    page.wait_for_load_state()
    shoot(page, "me-linked-memory", problems)
    context.close()

    # A memory-only session: its person in words, only the tabs it may open.
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(portal.issue_link(customer, org=org)[0])
    page.click("button[type=submit]")
    page.wait_for_load_state()
    shoot(page, "me-portal-session", problems)
    context.close()
    assert not problems, "\n".join(problems)

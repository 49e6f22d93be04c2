import json
import os

# Tests publish to an in-memory broker unless a test starts a real worker on Redis itself.
os.environ.setdefault("CELERY_BROKER_URL", "memory://")

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from memoryapp import clock, extraction, sessions
from memoryapp.models import Membership, Organization


@pytest.fixture(autouse=True)
def _real_time():
    clock.reset()
    yield
    clock.reset()


@pytest.fixture
def scripted():
    """Install a scripted extraction backend; set .extract_answer / .verdict_map per test."""
    backend = extraction.ScriptedBackend()
    with extraction.use_backend(backend):
        yield backend


@pytest.fixture
def org(db):
    return Organization.objects.create(slug="acme", name="Acme")


@pytest.fixture
def other_org(db):
    return Organization.objects.create(slug="globex", name="Globex")


@pytest.fixture
def api_key(org):
    _, key = sessions.create_api_key(org, "test")
    return key


class Api:
    """A JSON client for the agent API with a bearer key."""

    def __init__(self, key):
        self.client = Client()
        self.key = key

    def _headers(self):
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def post(self, path, data=None, raw=None):
        body = raw if raw is not None else json.dumps(data if data is not None else {})
        return self.client.post(f"/api{path}", body, content_type="application/json", headers=self._headers())

    def get(self, path):
        return self.client.get(f"/api{path}", headers=self._headers())

    def delete(self, path):
        return self.client.delete(f"/api{path}", headers=self._headers())


@pytest.fixture
def api(api_key):
    return Api(api_key)


@pytest.fixture
def make_user(db):
    """A person with a password, optionally a member of an org."""

    def make(username, org=None, role="member", password="correct horse battery", **extra):
        user = get_user_model().objects.create_user(username=username, password=password, **extra)
        if org is not None:
            Membership.objects.create(user=user, org=org, role=role)
        return user

    return make


# --- browser tests ----------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = os.path.join(os.path.dirname(__file__), "screenshots")


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium driven by Playwright (never a downloaded browser)."""
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser, live_server):
    """A fresh page (JavaScript on) whose relative URLs go to the live server."""
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1440, "height": 900})
    pg = context.new_page()
    yield pg
    context.close()


@pytest.fixture
def page_nojs(browser, live_server):
    """A fresh page with JavaScript disabled: every action must still work."""
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": 1440, "height": 900}, java_script_enabled=False
    )
    pg = context.new_page()
    yield pg
    context.close()


def login(page, username, password="correct horse battery"):
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")


def screenshot(page, name):
    """Save the current page at 1440 px and 375 px wide under tests/screenshots/."""
    os.makedirs(SCREENSHOTS, exist_ok=True)
    original = page.viewport_size
    for width, height in ((1440, 900), (375, 812)):
        page.set_viewport_size({"width": width, "height": height})
        page.screenshot(path=os.path.join(SCREENSHOTS, f"{name}-{width}.png"), full_page=True)
    page.set_viewport_size(original)

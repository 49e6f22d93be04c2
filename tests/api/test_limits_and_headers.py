"""Issue 11: rate limits per API key and per login, and the security headers."""

import pytest
from django.core.cache import cache

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_counters(rate_window):
    cache.clear()
    yield
    cache.clear()


def test_api_key_over_its_rate_gets_429_with_retry_after(api, settings):
    settings.MEMORY = {**settings.MEMORY, "API_RATE_PER_MINUTE": 3}
    codes = [api.post("/v1/sessions", {"user": "u1"}).status_code for _ in range(4)]
    assert codes == [201, 201, 201, 429]
    limited = api.post("/v1/sessions", {"user": "u1"})
    assert limited.json()["error"]["code"] == "rate_limited"
    assert int(limited["Retry-After"]) == 55


def test_one_keys_limit_does_not_throttle_another_org(api, other_org, settings):
    from memoryapp import sessions
    from tests.conftest import Api

    settings.MEMORY = {**settings.MEMORY, "API_RATE_PER_MINUTE": 1}
    other = Api(sessions.create_api_key(other_org, "b")[1])
    assert api.post("/v1/sessions", {"user": "u"}).status_code == 201
    assert api.post("/v1/sessions", {"user": "u"}).status_code == 429
    assert other.post("/v1/sessions", {"user": "u"}).status_code == 201


def test_login_attempts_are_rate_limited(client, make_user, settings):
    settings.MEMORY = {**settings.MEMORY, "LOGIN_RATE_PER_MINUTE": 2}
    make_user("dana")
    bad = {"username": "dana", "password": "wrong"}
    assert client.post("/login/", bad).status_code == 200  # the form with its error
    assert client.post("/login/", bad).status_code == 200
    third = client.post("/login/", {"username": "dana", "password": "correct horse battery"})
    assert third.status_code == 429
    assert "Retry-After" in third
    assert "Too many sign-in attempts" in third.content.decode()


def test_pages_carry_security_headers(client):
    response = client.get("/login/")
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Frame-Options"] == "DENY"


def test_hsts_and_secure_cookies_in_production_settings():
    import os
    import secrets
    import subprocess
    import sys

    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT)"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memoryapp.settings",
        "HTTPS": "1",
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    hsts, session_secure, csrf_secure, redirect = out.stdout.split()
    assert int(hsts) >= 31536000 and session_secure == csrf_secure == redirect == "True"


def test_every_answer_says_the_servers_own_time(client, api):
    """Server-Timing: app;dur=<ms> on pages and API answers, errors included (bench_pages reads it)."""
    import re

    for response in (client.get("/login/"), api.post("/v1/sessions", {"user": "u1"}), api.get("/v1/no-such-route")):
        assert re.fullmatch(r"app;dur=\d+\.\d\d", response["Server-Timing"]), response["Server-Timing"]

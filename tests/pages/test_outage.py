"""Issue 42 part 4 (pages): during a database outage pages answer the site's styled 503 with Retry-After,
/healthz stays a liveness probe, and /readyz says which dependency is down."""

import socket
from contextlib import contextmanager
from unittest import mock

import psycopg
import pytest
from django.db import OperationalError, connections
from django.test import Client
from playwright.sync_api import expect

from memoryapp import readiness
from memoryapp.celery import app
from tests.conftest import login


@contextmanager
def database_down():
    """Every new cursor fails as it does when PostgreSQL has gone away."""
    failure = OperationalError("connection to server failed: Connection refused")
    with mock.patch.object(type(connections["default"]), "ensure_connection", side_effect=failure):
        yield


@contextmanager
def server_stopped():
    """As when PostgreSQL stops under a running server: open connections fail their health check and
    new ones are refused (the live server's thread checks its connection at each request)."""
    wrapper = type(connections["default"])
    refused = psycopg.OperationalError("connection failed: Connection refused")
    with (
        mock.patch.object(wrapper, "is_usable", return_value=False),
        mock.patch.object(wrapper, "get_new_connection", side_effect=refused),
    ):
        yield


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


@pytest.mark.django_db
def test_a_page_in_a_database_outage_is_the_styled_503_with_retry_after(make_user):
    client = Client(raise_request_exception=False)
    client.force_login(make_user("pat"))
    with database_down():
        response = client.get("/me/")
        health = Client().get("/healthz")  # a probe sends no cookie
    body = response.content.decode()
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert "We cannot reach your memory right now" in body
    assert 'href="/static/app.css"' in body and 'class="top"' in body  # the base layout, styled
    assert health.status_code == 200  # liveness: the process itself is fine


@pytest.mark.django_db
def test_other_errors_still_get_the_500_page(make_user, monkeypatch):
    from memoryapp import people

    client = Client(raise_request_exception=False)
    client.force_login(make_user("pat"))
    monkeypatch.setattr(people, "is_portal_session", mock.Mock(side_effect=ValueError("a bug")))
    response = client.get("/me/")
    assert response.status_code == 500 and "Retry-After" not in response


@pytest.mark.django_db(transaction=True)
def test_readyz_names_what_is_down(client, monkeypatch):
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"status": "ready", "down": []}

    params = readiness.database_params()
    monkeypatch.setattr(readiness, "database_params", lambda: {**params, "host": "127.0.0.1", "port": _closed_port()})
    database = client.get("/readyz")
    assert database.status_code == 503 and database.json() == {"status": "unavailable", "down": ["database"]}
    assert database["Retry-After"] == "5"

    broker = f"redis://127.0.0.1:{_closed_port()}/0"
    monkeypatch.setenv("CELERY_BROKER_URL", broker)  # Celery reads it before its own conf
    monkeypatch.setattr(app.conf, "broker_url", broker)
    both = client.get("/readyz")
    assert both.status_code == 503 and both.json()["down"] == ["database", "broker"]
    assert client.get("/healthz").status_code == 200


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_outage_page_in_a_browser(page, make_user):
    make_user("pat")
    login(page, "pat")
    with server_stopped():
        response = page.goto("/me/")
    assert response.status == 503
    expect(page.get_by_role("heading", name="We cannot reach your memory right now")).to_be_visible()
    assert page.evaluate("getComputedStyle(document.querySelector('header.top')).backgroundColor") != "rgba(0, 0, 0, 0)"


@pytest.mark.django_db
def test_a_form_from_before_a_sign_in_elsewhere_gets_a_page_in_words_not_djangos_csrf_text(make_user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("pat"))
    response = client.post("/me/settings/", {"memory": "off"})  # the token of a session that has since changed
    body = response.content.decode()
    assert response.status_code == 403 and "This form has expired" in body and "Nothing was changed" in body
    assert "DEBUG=True" not in body and 'class="top"' in body


@pytest.mark.django_db
def test_an_actions_address_opened_as_a_page_says_so_and_an_api_405_stays_json(make_user):
    client = Client()
    client.force_login(make_user("pat"))
    response = client.get("/me/waiting/6b1f0f3e-5f0c-4c39-9a8e-1d2f3a4b5c6d/keep/")  # as after signing in again
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert "a button's, not a page" in response.content.decode() and "nothing was changed" in response.content.decode()
    sent = client.post("/me/")  # a form sent to a page that takes none
    assert sent.status_code == 405 and "This page takes no form" in sent.content.decode()
    api = client.get("/api/v1/sessions")
    assert api.status_code == 405 and api.json()["error"]["code"] == "method_not_allowed"

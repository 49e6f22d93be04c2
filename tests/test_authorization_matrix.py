"""Issue 11: every route, every kind of caller, the status each one must get, and no leaks.

The routes are collected from Django's URL resolver and from the ninja API's routers, so a new
route fails this test until someone declares who may use it.
"""

import json
import re
import uuid

import pytest
from django.core.cache import cache
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from memoryapp import clock, linking, orgs, password_reset, portal, sessions, writing
from memoryapp.api import api
from memoryapp.models import (
    ApiKey,
    ErasureReceipt,
    ExternalIdentity,
    ExtractionRun,
    FactCandidate,
    ForgettingRun,
    Membership,
    MemoryFact,
    Organization,
    OrgFactProposal,
    RecallLog,
    RecallReview,
    all_scopes,
)

pytestmark = pytest.mark.django_db

ACTORS = (
    "anon",
    "user_a",
    "user_b",
    "other_org",
    "org_admin",
    "staff",
    "key_a",
    "key_b",
    "key_revoked",
    "portal",
    "linked",
)

# B's words. None of them may appear in any response to anyone acting as, or for, someone else.
B_SECRETS = ("Zanzibar", "QUIXOTIC-WALRUS-7731")

# Declared status per route and method, one column per actor in ACTORS order:
#          anon A   B   other adm staff keyA keyB revoked portal linked
# Pages ignore API keys (they are not sessions), so key callers are anonymous there.
# "portal" is a memory-only session opened by a portal link for Pat, a person Acme's agent remembers
# (no password, no membership, no role): it reaches Pat's own /me/ pages and nothing else (403 elsewhere).
# "linked" is Lena, an account of her own who linked Acme's agent's id for her (ext-lena) by opening a
# portal link while signed in: she is no member of Acme, so its pages are 404 to her like to any outsider.
# /me/ pages: someone else's fact or conversation is 404 (never 403: existence is not revealed).
# /console/: staff only; signed-out visitors are sent to sign in, anyone else signed in gets 403.
# /orgs/<slug>/: non-members 404, members 403 for admin actions, org admins 200/302.
PAGES = {
    "": {"GET": "302 302 302 302 302 302 302 302 302 302 302", "POST": "405 405 405 405 405 405 405 405 405 405 405"},
    # Liveness probe: says "ok" and nothing else.
    "healthz": {
        "GET": "200 200 200 200 200 200 200 200 200 200 200",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    # Readiness: the database and the broker answer; nothing about anyone.
    "readyz": {
        "GET": "200 200 200 200 200 200 200 200 200 200 200",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    "login/": {
        "GET": "200 302 302 302 302 302 200 200 200 302 302",
        "POST": "200 302 302 302 302 302 200 200 200 302 302",
    },
    "logout/": {
        "GET": "405 405 405 405 405 405 405 405 405 405 405",
        "POST": "302 302 302 302 302 302 302 302 302 302 302",
    },
    "me/": {
        "GET": "302 200 200 200 200 200 302 302 302 200 200",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    "me/facts/<uuid:fact_id>/": {
        "GET": "302 200 404 404 404 404 302 302 302 404 404",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    "me/facts/<uuid:fact_id>/correct/": {
        "GET": "302 200 404 404 404 404 302 302 302 404 404",
        "POST": "302 200 404 404 404 404 302 302 302 404 404",
    },
    "me/facts/<uuid:fact_id>/delete/": {
        "GET": "302 200 404 404 404 404 302 302 302 404 404",
        "POST": "302 302 404 404 404 404 302 302 302 404 404",
    },
    "me/conversations/": {
        "GET": "302 200 200 200 200 200 302 302 302 200 200",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    "me/conversations/<uuid:session_id>/": {
        "GET": "302 200 404 404 404 404 302 302 302 404 404",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    # Only an id the person linked to their own account can be unlinked: Pat's (never linked) is 404 to all.
    "me/known-as/<int:identity_id>/unlink/": {
        "GET": "302 404 404 404 404 404 302 302 302 404 404",
        "POST": "302 404 404 404 404 404 302 302 302 404 404",
    },
    # The switch lives on Data and privacy: GET sends everyone signed in there.
    "me/settings/": {
        "GET": "302 302 302 302 302 302 302 302 302 302 302",
        "POST": "302 400 400 400 400 400 302 302 302 400 400",
    },
    "me/data/": {
        "GET": "302 200 200 200 200 200 302 302 302 200 200",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    "me/data/export.json": {
        "GET": "302 200 200 200 200 200 302 302 302 200 200",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    "me/data/export.html": {
        "GET": "302 200 200 200 200 200 302 302 302 200 200",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    # Only a forgotten fact of one's own can be restored; A's is not forgotten, so it is 404 to everyone.
    "me/facts/<uuid:fact_id>/restore/": {
        "GET": "405 405 405 405 405 405 405 405 405 405 405",
        "POST": "302 404 404 404 404 404 302 302 302 404 404",
    },
    # A's candidate waiting for her word: only A may keep or discard it.
    "me/waiting/<uuid:candidate_id>/keep/": {
        "GET": "405 405 405 405 405 405 405 405 405 405 405",
        "POST": "302 302 404 404 404 404 302 302 302 404 404",
    },
    "me/waiting/<uuid:candidate_id>/discard/": {
        "GET": "405 405 405 405 405 405 405 405 405 405 405",
        "POST": "302 302 404 404 404 404 302 302 302 404 404",
    },
    # An empty POST only shows the confirmation form again; nothing is erased without the typed word.
    # Only the person whose conversation made the proposal may withdraw it; anyone else gets 404.
    "me/proposals/<int:proposal_id>/withdraw/": {
        "GET": "405 405 405 405 405 405 405 405 405 405 405",
        "POST": "302 302 404 404 404 404 302 302 302 404 404",
    },
    "me/erase/": {
        "GET": "302 200 200 200 200 200 302 302 302 200 200",
        "POST": "302 200 200 200 200 200 302 302 302 200 200",
    },
    # The receipt holds no personal data, so it needs no sign-in.
    "me/erased/<uuid:receipt_id>/": {
        "GET": "200 200 200 200 200 200 200 200 200 200 200",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    "me/about/": {
        "GET": "200 200 200 200 200 200 200 200 200 200 200",
        "POST": "405 405 405 405 405 405 405 405 405 405 405",
    },
    # The token is the credential: GET only shows a Continue button (link previewers cannot use it);
    # POST signs whoever holds a fresh one in as its owner (Pat), in a memory-only session.
    "me/portal/<str:token>/": {
        "GET": "200 200 200 200 200 200 200 200 200 200 200",
        "POST": "302 302 302 302 302 302 302 302 302 302 302",
    },
    "console/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/facts/<uuid:fact_id>/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/facts/<uuid:fact_id>/restore": {
        "GET": "302 403 403 403 403 405 302 302 302 403 403",
        "POST": "302 403 403 403 403 302 302 302 302 403 403",
    },
    "console/sessions/<uuid:session_id>/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/sessions/<uuid:session_id>/rerun": {
        "GET": "302 403 403 403 403 405 302 302 302 403 403",
        "POST": "302 403 403 403 403 302 302 302 302 403 403",
    },
    "console/runs/<int:run_id>/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/health/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/poisoning/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/poisoning/<uuid:fact_id>/": {
        "GET": "302 403 403 403 403 405 302 302 302 403 403",
        "POST": "302 403 403 403 403 302 302 302 302 403 403",
    },
    "console/quality/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/quality/review/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/quality/review/draw": {
        "GET": "302 403 403 403 403 405 302 302 302 403 403",
        "POST": "302 403 403 403 403 302 302 302 302 403 403",
    },
    "console/quality/review/<int:review_id>/": {
        "GET": "302 403 403 403 403 405 302 302 302 403 403",
        "POST": "302 403 403 403 403 302 302 302 302 403 403",
    },
    "console/access/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/at-limit/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/forgetting/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "console/forgetting/<int:run_id>/": {
        "GET": "302 403 403 403 403 200 302 302 302 403 403",
        "POST": "302 403 403 403 403 405 302 302 302 403 403",
    },
    "orgs/": {
        "GET": "302 200 200 200 200 200 302 302 302 403 200",
        "POST": "405 405 405 405 405 405 405 405 405 403 405",
    },
    "orgs/<slug:slug>/": {
        "GET": "302 200 200 404 200 404 302 302 302 403 404",
        "POST": "405 405 405 405 405 405 405 405 405 403 405",
    },
    "orgs/<slug:slug>/facts/add/": {
        "GET": "405 405 405 405 405 405 405 405 405 403 405",
        "POST": "302 403 403 404 400 404 302 302 302 403 404",
    },
    "orgs/<slug:slug>/facts/<uuid:fact_id>/edit/": {
        "GET": "302 403 403 404 200 404 302 302 302 403 404",
        "POST": "302 403 403 404 400 404 302 302 302 403 404",
    },
    # GET is the confirmation page (no JavaScript); POST deletes.
    "orgs/<slug:slug>/facts/<uuid:fact_id>/delete/": {
        "GET": "302 403 403 404 200 404 302 302 302 403 404",
        "POST": "302 403 403 404 302 404 302 302 302 403 404",
    },
    "orgs/<slug:slug>/proposals/": {
        "GET": "302 403 403 404 200 404 302 302 302 403 404",
        "POST": "405 405 405 405 405 405 405 405 405 403 405",
    },
    "orgs/<slug:slug>/proposals/<int:proposal_id>/decide/": {
        "GET": "405 405 405 405 405 405 405 405 405 403 405",
        "POST": "302 403 403 404 400 404 302 302 302 403 404",
    },
    "orgs/<slug:slug>/members/": {
        "GET": "302 200 200 404 200 404 302 302 302 403 404",
        "POST": "405 405 405 405 405 405 405 405 405 403 405",
    },
    # Invitations are the only way in; an empty form is a 400 for the admin.
    "orgs/<slug:slug>/invitations/create/": {
        "GET": "405 405 405 405 405 405 405 405 405 403 405",
        "POST": "302 403 403 404 400 404 302 302 302 403 404",
    },
    "orgs/<slug:slug>/invitations/<int:invitation_id>/revoke/": {
        "GET": "405 405 405 405 405 405 405 405 405 403 405",
        "POST": "302 403 403 404 302 404 302 302 302 403 404",
    },
    "orgs/<slug:slug>/members/<int:membership_id>/role/": {
        "GET": "405 405 405 405 405 405 405 405 405 403 405",
        "POST": "302 403 403 404 400 404 302 302 302 403 404",
    },
    "orgs/<slug:slug>/members/<int:membership_id>/remove/": {
        "GET": "302 403 403 404 200 404 302 302 302 403 404",
        "POST": "302 403 403 404 302 404 302 302 302 403 404",
    },
    # A one-time password reset link for a member of Acme, shown to its admin once (200).
    "orgs/<slug:slug>/members/<int:membership_id>/reset-link/": {
        "GET": "405 405 405 405 405 405 405 405 405 403 405",
        "POST": "302 403 403 404 200 404 302 302 302 403 404",
    },
    # The people Acme's agents remember (by Acme's id): admins only; they never see those people's facts.
    "orgs/<slug:slug>/people/": {
        "GET": "302 403 403 404 200 404 302 302 302 403 404",
        "POST": "405 405 405 405 405 405 405 405 405 403 405",
    },
    "orgs/<slug:slug>/people/<int:identity_id>/portal/": {
        "GET": "405 405 405 405 405 405 405 405 405 403 405",
        "POST": "302 403 403 404 200 404 302 302 302 403 404",
    },
    # A confirmation page, then the erasure behind the typed id (an empty POST is a 400 for the admin).
    "orgs/<slug:slug>/people/<int:identity_id>/erase/": {
        "GET": "302 403 403 404 200 404 302 302 302 403 404",
        "POST": "302 403 403 404 400 404 302 302 302 403 404",
    },
    "orgs/<slug:slug>/leave/": {
        "GET": "302 200 200 404 200 404 302 302 302 403 404",
        # the only admin cannot leave (400); a member leaves (302)
        "POST": "302 302 302 404 400 404 302 302 302 403 404",
    },
    "orgs/<slug:slug>/keys/": {
        "GET": "302 403 403 404 200 404 302 302 302 403 404",
        "POST": "405 405 405 405 405 405 405 405 405 403 405",
    },
    "orgs/<slug:slug>/keys/create/": {
        "GET": "405 405 405 405 405 405 405 405 405 403 405",
        "POST": "302 403 403 404 400 404 302 302 302 403 404",
    },
    "orgs/<slug:slug>/keys/<int:key_id>/revoke/": {
        "GET": "302 403 403 404 200 404 302 302 302 403 404",
        "POST": "302 403 403 404 302 404 302 302 302 403 404",
    },
    "orgs/<slug:slug>/delete/": {
        "GET": "302 403 403 404 200 404 302 302 302 403 404",
        "POST": "302 403 403 404 400 404 302 302 302 403 404",
    },
    # An invitation link: anyone may look; POST joins with the signed-in account (its consent), or
    # needs a new account's details (400 when empty); people already in Acme get 400. A portal
    # session cannot join anything.
    "join/<str:invite_token>/": {
        "GET": "200 200 200 200 200 200 200 200 200 403 200",
        "POST": "400 400 400 302 400 302 400 400 400 403 302",
    },
    # A password reset link: the token is the credential, so anyone holding it sees the form; an empty
    # POST is a form error (400) and leaves the link usable. A portal session is kept to /me/.
    "reset/<str:reset_token>/": {
        "GET": "200 200 200 200 200 200 200 200 200 403 200",
        "POST": "400 400 400 400 400 400 400 400 400 403 400",
    },
    # The agent API's own pages: the schema and its viewer are public and hold no data
    # (ninja serves them for any method).
    "api/": {
        "GET": "404 404 404 404 404 404 404 404 404 404 404",
        "POST": "404 404 404 404 404 404 404 404 404 404 404",
    },
    "api/openapi.json": {
        "GET": "200 200 200 200 200 200 200 200 200 200 200",
        "POST": "200 200 200 200 200 200 200 200 200 200 200",
    },
    "api/docs": {
        "GET": "200 200 200 200 200 200 200 200 200 200 200",
        "POST": "200 200 200 200 200 200 200 200 200 200 200",
    },
}

# The agent API: only a live key of the session's (or person's) organisation gets through.
# Signed-in people without a key are 401 like anyone else: the API never reads the cookie.
# A (alice) has a password: the key may export her memory but never signs her in or erases her (409).
API = {
    ("POST", "/v1/sessions"): "401 401 401 401 401 401 201 201 401 401 401",
    ("POST", "/v1/sessions/{session_id}/turns"): "401 401 401 401 401 401 202 404 401 401 401",
    ("POST", "/v1/sessions/{session_id}/end"): "401 401 401 401 401 401 202 404 401 401 401",
    ("GET", "/v1/sessions/{session_id}"): "401 401 401 401 401 401 200 404 401 401 401",
    ("POST", "/v1/recall"): "401 401 401 401 401 401 200 404 401 401 401",
    ("POST", "/v1/prompt"): "401 401 401 401 401 401 200 404 401 401 401",
    ("GET", "/v1/sessions/{session_id}/recall"): "401 401 401 401 401 401 200 404 401 401 401",
    ("POST", "/v1/users/{user}/portal"): "401 401 401 401 401 401 409 404 401 401 401",
    ("GET", "/v1/users/{user}/export"): "401 401 401 401 401 401 200 404 401 401 401",
    ("DELETE", "/v1/users/{user}"): "401 401 401 401 401 401 409 404 401 401 401",
    # Facts of a person the key's org knows; another org's key gets 404 for them.
    ("GET", "/v1/users/{user}/facts"): "401 401 401 401 401 401 200 404 401 401 401",
    ("GET", "/v1/users/{user}/pending"): "401 401 401 401 401 401 200 404 401 401 401",
    # Remembering names a person by the org's own id: another org's key makes its own person (201).
    ("POST", "/v1/users/{user}/facts"): "401 401 401 401 401 401 201 201 401 401 401",
    ("GET", "/v1/facts/{fact_id}"): "401 401 401 401 401 401 200 404 401 401 401",
    ("PATCH", "/v1/facts/{fact_id}"): "401 401 401 401 401 401 200 404 401 401 401",
    ("DELETE", "/v1/facts/{fact_id}"): "401 401 401 401 401 401 200 404 401 401 401",
}
# Which key scope each API route needs (its OpenAPI description says the same).
SCOPES = {
    ("POST", "/v1/sessions"): "write",
    ("POST", "/v1/sessions/{session_id}/turns"): "write",
    ("POST", "/v1/sessions/{session_id}/end"): "write",
    ("GET", "/v1/sessions/{session_id}"): "read",
    ("POST", "/v1/recall"): "read",
    ("POST", "/v1/prompt"): "read",
    ("GET", "/v1/sessions/{session_id}/recall"): "read",
    ("POST", "/v1/users/{user}/portal"): "portal",
    ("GET", "/v1/users/{user}/export"): "read",
    ("DELETE", "/v1/users/{user}"): "erase",
    ("GET", "/v1/users/{user}/facts"): "read",
    ("GET", "/v1/users/{user}/pending"): "read",
    ("POST", "/v1/users/{user}/facts"): "write",
    ("GET", "/v1/facts/{fact_id}"): "read",
    ("PATCH", "/v1/facts/{fact_id}"): "write",
    ("DELETE", "/v1/facts/{fact_id}"): "write",
}
# Routes that create the named person in the calling key's own org rather than reach another's.
CREATES_OWN_PERSON = {("POST", "/v1/users/{user}/facts")}


# --- collecting routes ------------------------------------------------------------------------


def _walk(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p


def django_routes():
    """Every URL pattern of the project except the admin site's own internals."""
    return [route for route, _ in _walk(get_resolver().url_patterns) if not route.startswith("admin/")]


def ninja_operations():
    """(method, path) for every operation of every router of the agent API."""
    ops = []
    for prefix, router in api._routers:
        for path, path_view in router.path_operations.items():
            for operation in path_view.operations:
                for method in operation.methods:
                    ops.append((method, prefix + path))
    return ops


def _ninja_as_django(path):
    return "api" + re.sub(r"\{(\w+)\}", r"<\1>", path)


# --- the world: two orgs, their people, their objects -----------------------------------------


@pytest.fixture
def world(db, make_user):
    cache.clear()
    acme = Organization.objects.create(slug="acme", name="Acme")
    globex = Organization.objects.create(slug="globex", name="Globex")
    alice = make_user("alice", acme)
    bob = make_user("bob", acme)
    carol = make_user("carol", globex)
    olga = make_user("olga", acme, role="admin")
    sam = make_user("sam", is_staff=True)
    for person, org, ext in ((alice, acme, "ext-alice"), (bob, acme, "ext-bob"), (carol, globex, "ext-carol")):
        ExternalIdentity.objects.create(org=org, user=person, external_id=ext)
    pat = sessions.get_or_create_user(acme, "ext-pat")  # remembered by Acme's agent; no password
    pat_identity = ExternalIdentity.objects.get(user=pat)
    lena = make_user("lena")  # an account of her own, who linked Acme's agent's id for her
    lena_remembered = sessions.get_or_create_user(acme, "ext-lena")
    writing.store(lena_remembered, "The user keeps bees on the roof.", "profile")
    linking.link(lena, lena_remembered)

    def history(person, said, fact_text, kind):
        session = sessions.open_session(acme, person)
        sessions.add_turns(session, [("user", said), ("assistant", "Noted.")])
        sessions.end_session(session)
        run = ExtractionRun.objects.create(
            user=person, session=session, backend="scripted", model="scripted", prompt_version="t", input_hash="x"
        )
        fact = writing.store(person, fact_text, kind, session=session, run=run).fact
        log = RecallLog.objects.create(user=person, session=session, fact=fact, tier="always")
        review = RecallReview.objects.create(recall_log=log, user=person)
        return session, run, fact, review

    a_session, a_run, a_fact, a_review = history(
        alice, "I prefer concise answers, please.", "The user prefers concise answers.", "preference"
    )
    b_session, b_run, b_fact, b_review = history(
        bob,
        "My secret project is called Zanzibar. QUIXOTIC-WALRUS-7731",
        "The user's secret project codename is Zanzibar.",
        "profile",
    )
    org_fact = writing.store(
        olga, "The team deploys on Fridays.", "constraint", org=acme, origin=MemoryFact.Origin.ORG_ADMIN, added_by=olga
    ).fact
    proposal = OrgFactProposal.objects.create(org=acme, proposed_by=alice, text="The team uses Go.", kind="profile")
    key_a_row, key_a = sessions.create_api_key(acme, "agent", all_scopes())
    _, key_b = sessions.create_api_key(globex, "agent", all_scopes())
    revoked_row, key_revoked = sessions.create_api_key(acme, "old", all_scopes())
    ApiKey.objects.filter(id=revoked_row.id).update(revoked_at=clock.now())
    a_open = sessions.open_session(acme, alice)  # the agent API works on an open session
    receipt = ErasureReceipt.objects.create(subject_ref="ref", requested_via="self", counts={"facts": 1})
    forgetting_run = ForgettingRun.objects.create(mode="log")

    invitation, _ = orgs.invite(acme, olga, "member")

    cookies = {}
    signed_in = (
        ("user_a", alice),
        ("user_b", bob),
        ("other_org", carol),
        ("org_admin", olga),
        ("staff", sam),
        ("linked", lena),
    )
    for name, person in signed_in:
        c = Client()
        c.force_login(person)
        cookies[name] = c.cookies
    c = Client()  # Pat opens a portal link and presses Continue: a memory-only session
    assert c.post("/me/portal/" + portal.issue_link(pat)[0].rstrip("/").rsplit("/", 1)[-1] + "/").status_code == 302
    cookies["portal"] = c.cookies
    keys = {"key_a": key_a, "key_b": key_b, "key_revoked": key_revoked}

    def params(route, owner="a"):
        """Path parameters for `route`, filled with A's objects (or B's, for the cross-check)."""
        mine = {
            "a": {"fact": a_fact, "session": a_session, "run": a_run, "review": a_review, "user": alice},
            "b": {"fact": b_fact, "session": b_session, "run": b_run, "review": b_review, "user": bob},
        }[owner]
        is_org = route.startswith("orgs/")
        membership = Membership.objects.get(user=mine["user"], org=acme)
        return {
            "fact_id": org_fact.id if is_org else mine["fact"].id,
            "session_id": mine["session"].id,
            "run_id": forgetting_run.id if route.startswith("console/forgetting/") else mine["run"].id,
            "review_id": mine["review"].id,
            "receipt_id": receipt.id,
            "slug": acme.slug,
            "proposal_id": proposal.id,
            "membership_id": membership.id,
            "key_id": key_a_row.id,
            "user": f"ext-{mine['user'].username}",
            # A fresh one-time link each time (for Pat): the credential is the token itself.
            "token": lambda: portal.issue_link(pat)[0].rstrip("/").rsplit("/", 1)[-1],
            "invite_token": lambda: orgs.invite(acme, olga, "member")[1],
            "reset_token": lambda: password_reset.issue_link(olga, mine["user"])[0].rstrip("/").rsplit("/", 1)[-1],
            "invitation_id": invitation.id,
            # A fresh candidate waiting for the owner's word each time (keeping or discarding uses it up).
            "candidate_id": lambda: (
                FactCandidate.objects.create(
                    user=mine["user"],
                    outcome="pending",
                    text="The user approves refunds.",
                    kind="profile",
                    reason="held",
                    origin="agent",
                ).id
            ),
            # A remembered person's identity for A; B's own (he signs in) for the cross-check.
            "identity_id": pat_identity.id if owner == "a" else ExternalIdentity.objects.get(user=bob).id,
        }

    return {
        "cookies": cookies,
        "keys": keys,
        "params": params,
        "a_session": a_session,
        "a_open": a_open,
        "b_session": b_session,
        "alice": alice,
        "bob": bob,
    }


def _fill(route, values):
    def sub(match):
        name = match.group(1)
        value = values[name]
        return str(value() if callable(value) else value)

    route = re.sub(r"<(?:\w+:)?(\w+)>", sub, route)
    return re.sub(r"\{(\w+)\}", sub, route)


def _api_body(path, session_id):
    if path == "/v1/sessions":
        return {"user": "ext-alice"}
    if path.endswith("/turns"):
        return {"turns": [{"role": "user", "content": "I like tea."}]}
    if path in ("/v1/recall", "/v1/prompt"):
        return {"session": str(session_id), "message": "hello"}
    if path == "/v1/users/{user}/facts":
        return {"text": "The user's dog is called Biscuit.", "kind": "profile"}
    if path == "/v1/facts/{fact_id}":
        return {"text": "The user prefers answers in bullet points.", "kind": "preference"}
    return None


def _request(world, actor, method, url, body=None):
    """One request as `actor`, rolled back afterwards so every request sees the same world."""
    client = Client()
    if actor in world["cookies"]:
        client.cookies = world["cookies"][actor].__class__(world["cookies"][actor])
    headers = {}
    if actor in world["keys"]:
        headers["Authorization"] = f"Bearer {world['keys'][actor]}"
    cache.clear()  # rate-limit counters must not turn into 429s half-way through the matrix
    with transaction.atomic():
        if method == "GET":
            response = client.get(url, headers=headers)
        elif method == "DELETE":
            response = client.delete(url, headers=headers)
        elif method == "PATCH":
            response = client.patch(url, json.dumps(body), content_type="application/json", headers=headers)
        elif body is not None:
            response = client.post(url, json.dumps(body), content_type="application/json", headers=headers)
        else:
            response = client.post(url, {}, headers=headers)
        content = b"".join(response) if response.streaming else response.content
        transaction.set_rollback(True)
    return response.status_code, content.decode("utf-8", "replace")


# --- the test ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_every_route_answers_every_caller_as_declared_and_never_leaks_b(world):
    routes = django_routes()
    ops = ninja_operations()
    ninja_routes = {_ninja_as_django(path) for _, path in ops}
    assert len(ops) >= 10 and len(routes) >= 40, "route discovery found too little; the walk is broken"

    undeclared = [r for r in routes if r not in PAGES and r not in ninja_routes]
    undeclared += [f"{m} {p}" for m, p in ops if (m, p) not in API]
    stale = [r for r in PAGES if r not in routes] + [f"{m} {p}" for m, p in API if (m, p) not in ops]
    assert not undeclared, f"routes with no declared expectation (add them to PAGES/API): {undeclared}"
    assert not stale, f"declared routes that no longer exist: {stale}"

    mismatches, leaks = [], []
    checked = 0
    params = {**world["params"]("a"), "session_id": world["a_open"].id}
    for route in routes:
        if route in ninja_routes:
            continue
        for method, expected in PAGES[route].items():
            for actor, want in zip(ACTORS, expected.split(), strict=True):
                url = "/" + _fill(route, world["params"](route))
                status, body = _request(world, actor, method, url)
                checked += 1
                if status != int(want):
                    mismatches.append(f"{method} /{route} as {actor}: expected {want}, got {status}")
                if actor not in ("user_b", "staff"):
                    leaks += [f"{method} {url} as {actor} shows {s!r}" for s in B_SECRETS if s in body]

    for method, path in ops:
        for actor, want in zip(ACTORS, API[(method, path)].split(), strict=True):
            url = "/api" + _fill(path, params)
            body_in = _api_body(path, world["a_open"].id) if method in ("POST", "PATCH") else None
            status, body = _request(world, actor, method, url, body_in)
            checked += 1
            if status != int(want):
                mismatches.append(f"{method} /api{path} as {actor}: expected {want}, got {status} {body[:120]}")
            if actor != "user_b":
                leaks += [f"{method} {url} as {actor} shows {s!r}" for s in B_SECRETS if s in body]

    assert checked >= len(ACTORS) * (len(PAGES) + len(API))
    assert not mismatches, f"{len(mismatches)} of {checked} checks differ:\n" + "\n".join(mismatches)
    assert not leaks, "B's memory leaked:\n" + "\n".join(leaks)


def test_b_objects_in_the_path_never_show_b_to_a_or_another_tenant(world):
    """The cross-check: B's own ids in every path, requested by A, another org's user and its key."""
    params = world["params"]("b")
    leaks, opened = [], []
    for route in django_routes():
        if route.startswith("api/") or "<" not in route or route.startswith("me/portal/"):
            continue
        url = "/" + _fill(route, world["params"](route, owner="b"))
        for actor in ("user_a", "other_org", "key_b", "portal"):
            status, body = _request(world, actor, "GET", url)
            leaks += [f"GET {url} as {actor} shows {s!r}" for s in B_SECRETS if s in body]
            if status == 200 and route.startswith("me/") and "erased" not in route:
                opened.append(f"GET {url} as {actor}")
    for method, path in ninja_operations():
        body = _api_body(path, world["b_session"].id) if method in ("POST", "PATCH") else None
        if "{" not in path and "session" not in (body or {}):
            continue  # opening a session names no one's object: another org's key makes its own person
        url = "/api" + _fill(path, params)
        for actor in ("key_b", "key_revoked"):
            status, text = _request(world, actor, method, url, body)
            leaks += [f"{method} {url} as {actor} shows {s!r}" for s in B_SECRETS if s in text]
            if status < 400 and (method, path) not in CREATES_OWN_PERSON:
                opened.append(f"{method} {url} as {actor}: {status}")
    # Existence is not revealed: B's fact and an id that does not exist look the same to A.
    client = Client()
    client.cookies = world["cookies"]["user_a"]
    b_fact = MemoryFact.objects.for_user(world["bob"]).get()
    assert client.get(f"/me/facts/{b_fact.id}/").status_code == client.get(f"/me/facts/{uuid.uuid4()}/").status_code
    assert not leaks, "B's memory leaked:\n" + "\n".join(leaks)
    assert not opened, "B's objects opened for someone else:\n" + "\n".join(opened)


def test_forms_need_a_csrf_token(org, make_user):
    alice = make_user("alice", org)
    fact = writing.store(alice, "The user prefers tea.", "preference").fact
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    assert client.post(f"/me/facts/{fact.id}/delete/").status_code == 403
    assert MemoryFact.objects.filter(id=fact.id).exists()


def test_every_api_route_needs_its_declared_key_scope(world):
    """A key without the route's scope gets 403 `forbidden`; a key with only that scope gets through."""
    ops = ninja_operations()
    assert sorted(SCOPES) == sorted(ops), "declare the scope of every API route in SCOPES"
    acme = Organization.objects.get(slug="acme")
    params = {**world["params"]("a"), "session_id": world["a_open"].id}
    wrong, described = [], []
    for method, path in ops:
        needed = SCOPES[(method, path)]
        _, without = sessions.create_api_key(acme, "narrow", [s for s in all_scopes() if s != needed])
        _, only = sessions.create_api_key(acme, "only", [needed])
        world["keys"].update(without=without, only=only)
        url = "/api" + _fill(path, params)
        body = _api_body(path, world["a_open"].id) if method in ("POST", "PATCH") else None
        status, text = _request(world, "without", method, url, body)
        if status != 403 or json.loads(text)["error"]["code"] != "forbidden" or f"'{needed}'" not in text:
            wrong.append(f"{method} {path} without '{needed}': {status} {text[:100]}")
        status, text = _request(world, "only", method, url, body)
        # Through the scope check: alice signs in with a password, so her portal link and erasure
        # are then refused for that reason (409), which the trust tests cover.
        if status >= 400 and not (status == 409 and "operates an organisation" in text):
            wrong.append(f"{method} {path} with only '{needed}': {status} {text[:100]}")
    for path, item in api.get_openapi_schema()["paths"].items():
        for method, operation in item.items():
            needed = SCOPES[(method.upper(), path.removeprefix("/api"))]
            if f"`{needed}` scope" not in operation.get("description", ""):
                described.append(f"{method} {path}")
    assert not wrong, "\n".join(wrong)
    assert not described, f"OpenAPI descriptions that do not name the scope: {described}"

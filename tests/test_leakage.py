"""The incident the seed warns about: one colleague's memory reaching another, or one org's reaching another org.

Alice and Bob are in org A, Carol in org B. Every page and every agent API route is collected by
introspection (Django's URL resolver and the ninja API's OpenAPI description), so routes added later
are swept too. Path parameters are filled with ids the acting person could legitimately name and
with ids of other people's objects; every response body is searched for the other parties' secrets.
"""

import itertools
import json
import re
import uuid
from dataclasses import dataclass, field

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from memoryapp import extraction, orgs, recall, sessions, writing
from memoryapp.api import api as ninja_api
from memoryapp.models import (
    AgentSession,
    ApiKey,
    ExternalIdentity,
    ExtractionRun,
    FactCandidate,
    FactEvent,
    Invitation,
    Membership,
    MemoryFact,
    Organization,
    OrgFactProposal,
    RecallLog,
    Turn,
    all_scopes,
)

pytestmark = pytest.mark.django_db

# One-word markers inside the data, so HTML or JSON escaping cannot hide a leak.
ALICE_SECRETS = ["Zanzibarcoffee", "Quixoticarbiter", "Aliceturnword"]
BOB_SECRETS = ["Bobsecretmango", "Bobturnword"]
CAROL_SECRETS = ["Carolsecretfig", "Carolturnword"]
ORG_A_SECRETS = [
    "Pelicanpipeline",
    "Kumquatserver",
    "Orgalphazq",
    "Alphakeyname",
    "alicezq",
    "bobzq",
    "Alphainvitee",
    "Rememberalphazq",
]
ORG_B_SECRETS = ["Betaorgtoken", "Orgbetazq", "Betakeyname", "carolzq", "Betainvitee"]
RECALL_MESSAGE = "coffee roasts, mango tea, figs, pipelines, hosting, servers and deployment"

CSRF_TOKEN = re.compile(r'(?<=csrfmiddlewaretoken" value=")\w+|(?<="X-CSRFToken": ")\w+')
SKIP_PREFIXES = ("admin/", "api/")  # Django's own admin is staff-only; the agent API is swept through ninja
SKIP_ON_OWN = re.compile(r"erase|delete|remove|leave|revoke|logout", re.IGNORECASE)  # destructive on one's own data


@dataclass
class Value:
    text: str
    own: bool  # the acting party may legitimately name it


@dataclass
class World:
    org_a: Organization
    org_b: Organization
    users: dict
    key_a: str
    key_b: str
    objects: dict = field(default_factory=dict)  # owner -> kind -> [values]


def _fact(user, text, kind):
    return writing.store(user, text, kind).fact


def _session(org, user, *lines, end=False, answer=None, backend=None):
    s = sessions.open_session(org, user)
    sessions.add_turns(s, [("user", line) for line in lines] + [("assistant", "Noted.")])
    if end:
        backend.extract_answer = answer or {"facts": []}
        sessions.end_session(s)
        extraction.extract_session(s.id)
    return s


def build_world(scripted, make_user):
    org_a = Organization.objects.create(slug="orgalphazq", name="Orgalphazq Ltd")
    org_b = Organization.objects.create(slug="orgbetazq", name="Orgbetazq Inc")
    bob = make_user("bobzq", org_a, role="admin", email="bobzq@a.test")
    alice = make_user("alicezq", org_a, email="alicezq@a.test")
    dave = make_user("davezq", org_a)  # a plain member of org A
    carol = make_user("carolzq", org_b, role="admin", email="carolzq@b.test")
    for user, org in ((alice, org_a), (bob, org_a), (dave, org_a), (carol, org_b)):
        user.external_ids.create(org=org, external_id=f"{user.username}-ext")

    # Personal memory: facts, a conversation that taught them, an open conversation, recall logs.
    _session(
        org_a,
        alice,
        "I only drink Zanzibarcoffee roasts; I work as a Quixoticarbiter. Aliceturnword.",
        end=True,
        backend=scripted,
        answer={
            "facts": [
                {"text": "The user prefers Zanzibarcoffee roasts.", "kind": "preference", "scope": "personal"},
                {"text": "The user works as a Quixoticarbiter.", "kind": "profile", "scope": "personal"},
                {"text": "The team hosts everything on Kumquatserver.", "kind": "profile", "scope": "org"},
            ]
        },
    )
    alice_open = _session(org_a, alice, "More about Zanzibarcoffee, Aliceturnword.")
    recall.recall(alice_open, RECALL_MESSAGE)
    _fact(bob, "The user prefers Bobsecretmango tea.", "preference")
    bob_open = _session(org_a, bob, "Tea time: Bobsecretmango. Bobturnword.")
    _fact(carol, "The user prefers Carolsecretfig jam.", "preference")
    # A candidate waiting for each person's word (on their own My memory only; kept or discarded by them alone).
    for user, word in ((alice, "Aliceturnword"), (bob, "Bobsecretmango"), (carol, "Carolsecretfig")):
        held = writing.store(
            user, f"The user may approve every {word} refund for all customers without a check.", "profile"
        )
        assert held.outcome == "pending", held
    carol_open = _session(org_b, carol, "Carolsecretfig again. Carolturnword.")

    # Org tiers, a pending proposal in each org, API keys.
    orgs.add_fact(org_a, bob, "The team deploys with the Pelicanpipeline.", "constraint")
    orgs.add_fact(org_b, carol, "The team ships Betaorgtoken builds.", "constraint")
    OrgFactProposal.objects.create(org=org_b, proposed_by=carol, text="The team likes Betaorgtoken.", kind="goal")
    # A person org A's agent remembers, who never signs in (org A's admins manage them on its people page).
    remembered = sessions.get_or_create_user(org_a, "rememberalphazq-person")
    _fact(remembered, "The user prefers Rememberalphazq notebooks.", "preference")
    orgs.invite(org_a, bob, note="Alphainvitee")
    orgs.invite(org_b, carol, note="Betainvitee")
    sessions.create_api_key(org_a, "Alphakeyname")
    sessions.create_api_key(org_b, "Betakeyname")
    _, key_a = sessions.create_api_key(org_a, "sweep", all_scopes())  # every route is swept
    _, key_b = sessions.create_api_key(org_b, "sweep", all_scopes())

    # Everyone's recall has run once, so recall logs and cached blocks exist for each party.
    for s in (bob_open, carol_open):
        recall.recall(s, RECALL_MESSAGE)

    users = {"alice": alice, "bob": bob, "carol": carol, "dave": dave, "remembered_a": remembered}
    world = World(org_a, org_b, users, key_a, key_b)
    for name, user in world.users.items():
        world.objects[name] = {
            "fact": [str(i) for i in MemoryFact.objects.for_user(user).values_list("id", flat=True)],
            "session": [str(i) for i in AgentSession.objects.filter(user=user).values_list("id", flat=True)],
            "run": [str(i) for i in ExtractionRun.objects.filter(user=user).values_list("id", flat=True)],
            "turn": [str(i) for i in Turn.objects.filter(user=user).values_list("id", flat=True)],
            "log": [str(i) for i in RecallLog.objects.filter(user=user).values_list("id", flat=True)],
            "event": [str(i) for i in FactEvent.objects.filter(user=user).values_list("id", flat=True)],
            "user": [str(user.id), user.username, f"{user.username}-ext"],
            "identity": [str(i) for i in user.external_ids.values_list("id", flat=True)],
            "candidate": [str(i) for i in FactCandidate.objects.filter(user=user).values_list("id", flat=True)],
        }
    for name, org in (("org_a", org_a), ("org_b", org_b)):
        world.objects[name] = {
            "fact": [str(i) for i in MemoryFact.objects.for_org(org).values_list("id", flat=True)],
            "proposal": [str(i) for i in OrgFactProposal.objects.filter(org=org).values_list("id", flat=True)],
            "key": [str(i) for i in ApiKey.objects.filter(org=org).values_list("id", flat=True)],
            # Memberships belong to the org: its admins may name any of them.
            "member": [str(i) for i in Membership.objects.filter(org=org).values_list("id", flat=True)],
            "invitation": [str(i) for i in Invitation.objects.filter(org=org).values_list("id", flat=True)],
            # The people the org's agent remembers (its admins may act on them), not its members.
            "identity": [
                str(i)
                for i in ExternalIdentity.objects.filter(org=org, user__memberships__isnull=True).values_list(
                    "id", flat=True
                )
            ],
            "org": [org.slug, str(org.id)],
            "event": [
                str(i) for i in FactEvent.objects.filter(org=org, user__isnull=True).values_list("id", flat=True)
            ],
        }
    return world


# --- filling parameters ---------------------------------------------------------------------------

KIND_BY_NAME = [
    ("proposal", "proposal"),
    ("invitation", "invitation"),
    ("identity", "identity"),
    # Tokens are bearer secrets, not objects anyone owns: no party has one, so a route taking a token is
    # swept with one made-up value (every other party's ids were as made-up to it, and 16 % of the sweep).
    ("token", "token"),
    ("membership", "member"),
    ("member", "member"),
    ("key", "key"),
    ("fact", "fact"),
    ("candidate", "candidate"),
    ("session", "session"),
    ("run", "run"),
    ("turn", "turn"),
    ("log", "log"),
    ("event", "event"),
    ("slug", "org"),
    ("org", "org"),
    ("user", "user"),
]


def _is_uuid(text):
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def values_for(name, converter, world, own_parties, other_parties):
    """Candidate values for one path parameter: the actor's own objects and other people's."""
    kinds = [kind for needle, kind in KIND_BY_NAME if needle in name.lower()][:1]
    out = []
    for parties, own in ((own_parties, True), (other_parties, False)):
        for party in parties:
            buckets = world.objects[party]
            for kind in kinds or list(buckets):
                for text in buckets.get(kind, []):
                    if converter == "int" and not text.isdigit():
                        continue
                    if converter == "uuid" and not _is_uuid(text):
                        continue
                    # A number is an id, for routes that take one: this world's slugs are words, so
                    # "/orgs/2/" was a 404 for anyone, ~1,000 requests (a fifth of the sweep) that proved nothing.
                    if converter == "slug" and (text.isdigit() or not re.fullmatch(r"[-a-zA-Z0-9_]+", text)):
                        continue
                    out.append(Value(text, own))
    seen, unique = set(), []
    for v in out:
        if v.text not in seen:
            seen.add(v.text)
            unique.append(v)
    return unique or [Value("1", False)]


def fillings(params, world, own_parties, other_parties, limit=400):
    """Every combination of candidate values for a route's parameters (capped, deterministic)."""
    choices = [values_for(name, conv, world, own_parties, other_parties) for name, conv in params]
    return list(itertools.islice(itertools.product(*choices), limit))


# --- collecting routes -------------------------------------------------------------------------------

ROUTE_PARAM = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>")
REGEX_PARAM = re.compile(r"\(\?P<(?P<name>\w+)>[^)]*\)")


def page_routes():
    """(route template, [(param, converter)]) for every page the URL resolver knows, minus admin and API."""
    found = []

    def walk(patterns, prefix):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + _pattern_text(p.pattern))
            elif isinstance(p, URLPattern):
                found.append(prefix + _pattern_text(p.pattern))

    walk(get_resolver().url_patterns, "")
    routes = []
    for template in found:
        if template.startswith(SKIP_PREFIXES):
            continue
        params = [(m["name"], m["conv"] or "str") for m in ROUTE_PARAM.finditer(template)]
        routes.append(("/" + template, params))
    return routes


def _pattern_text(pattern):
    text = str(pattern)
    if type(pattern).__name__ == "RegexPattern":
        text = REGEX_PARAM.sub(lambda m: f"<str:{m['name']}>", text).lstrip("^").rstrip("$").replace("\\", "")
    return text


def api_routes():
    """(method, path template, [(param, type)], body schema or None) for every operation of the agent API."""
    schema = ninja_api.get_openapi_schema()
    components = schema.get("components", {}).get("schemas", {})
    routes = []
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            params = []
            for p in op.get("parameters", []):
                fmt = p.get("schema", {}).get("format") or p.get("schema", {}).get("type", "string")
                params.append((p["name"], p["in"], {"uuid": "uuid", "integer": "int"}.get(fmt, "str")))
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            routes.append((method.upper(), path, params, _resolve(body, components)))
    return routes


def _resolve(schema, components):
    if not schema:
        return None
    if "$ref" in schema:
        return _resolve(components[schema["$ref"].split("/")[-1]], components)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _resolve(schema["allOf"][0], components)
    if schema.get("type") == "array" and "items" in schema:
        return {**schema, "items": _resolve(schema["items"], components)}
    if "properties" in schema:
        return {**schema, "properties": {k: _resolve(v, components) for k, v in schema["properties"].items()}}
    return schema


def body_fillings(schema, world, own_parties, other_parties):
    """JSON bodies for an operation: id-like fields vary over candidates, the rest get plausible values."""
    if not schema:
        return [None]
    props = schema.get("properties", {})
    id_fields = [(n, p) for n, p in props.items() if p.get("format") == "uuid" or n in ("user", "session", "fact")]
    base = {n: _plain_value(n, p) for n, p in props.items() if n not in dict(id_fields)}
    choices = [
        values_for(n, "uuid" if p.get("format") == "uuid" else "str", world, own_parties, other_parties)
        for n, p in id_fields
    ]
    bodies = []
    for combo in itertools.islice(itertools.product(*choices), 200):
        bodies.append(({**base, **{n: v.text for (n, _), v in zip(id_fields, combo, strict=True)}}, combo))
    return bodies


def _plain_value(name, prop):
    kind = prop.get("type")
    if "enum" in prop:
        return prop["enum"][0]
    if kind == "boolean":
        return name == "refresh"
    if kind == "integer":
        return 1
    if kind == "array":
        items = prop.get("items") or {}
        return (
            [{n: _plain_value(n, p) for n, p in items.get("properties", {}).items()}] if "properties" in items else []
        )
    if name == "role":
        return "user"
    return RECALL_MESSAGE


# --- the sweep -------------------------------------------------------------------------------------------


@dataclass
class Sweep:
    actor: str
    secrets: list
    leaks: list = field(default_factory=list)
    requests: int = 0
    ok: dict = field(default_factory=dict)  # route -> count of 2xx answers
    seen_own: set = field(default_factory=set)  # own markers seen (positive control)

    def check(self, label, response, own_markers=(), sent=()):
        self.requests += 1
        body = b"".join(response.streaming_content) if response.streaming else response.content
        text = body.decode("utf-8", "replace")
        text += " " + response.headers.get("Location", "") + " " + response.headers.get("HX-Redirect", "")
        for value in sorted(sent, key=len, reverse=True):
            text = text.replace(value, "")  # an echo of the caller's own input is not a leak
        # A page's CSRF tokens are 64 random letters and digits: one in CI once held "bobZQ" by chance.
        text = CSRF_TOKEN.sub("", text)
        for secret in self.secrets:
            if secret.lower() in text.lower():
                self.leaks.append(f"{self.actor}: {label} -> {response.status_code} contains {secret!r}")
        if 200 <= response.status_code < 300:
            self.ok[label.split(" ")[1]] = self.ok.get(label.split(" ")[1], 0) + 1
        for marker in own_markers:
            if marker.lower() in text.lower():
                self.seen_own.add(marker)
        assert response.status_code < 500, f"{self.actor}: {label} -> {response.status_code}"


def sweep_pages(client, sweep, world, own_parties, other_parties, own_markers):
    for template, params in page_routes():
        for combo in fillings(params, world, own_parties, other_parties):
            path = template
            for (name, _), value in zip(params, combo, strict=True):
                path = ROUTE_PARAM.sub(lambda m, n=name, v=value: v.text if m["name"] == n else m[0], path)
            all_own = all(v.own for v in combo)
            sent = [v.text for v in combo]
            sweep.check(f"GET {template} {path}", client.get(path), own_markers, sent)
            htmx = {"HX-Request": "true"}
            sweep.check(f"GET(htmx) {template} {path}", client.get(path, headers=htmx), own_markers, sent)
            if not all_own:
                # Acting on someone else's object must not work, nor show anything of theirs.
                for data in (
                    {},
                    {"text": "The team likes Leakcheck tea.", "kind": "preference", "decision": "approve"},
                ):
                    sweep.check(f"POST {template} {path}", client.post(path, data), own_markers, sent)
                    response = client.post(path, data, headers=htmx)
                    sweep.check(f"POST(htmx) {template} {path}", response, own_markers, sent)


def sweep_api(client, sweep, world, key, own_parties, other_parties, own_markers):
    headers = {"Authorization": f"Bearer {key}"}
    # Safe operations first, so an accepted write on one's own data cannot hide a later read.
    order = {"GET": 0, "POST": 1, "PUT": 2, "PATCH": 2, "DELETE": 3}
    for method, template, params, body_schema in sorted(api_routes(), key=lambda r: (order.get(r[0], 9), r[1])):
        path_params = [(n, conv) for n, where, conv in params if where == "path"]
        query_params = [(n, conv) for n, where, conv in params if where == "query"]
        for combo in fillings(path_params + query_params, world, own_parties, other_parties, limit=100):
            path = template
            for (name, _), value in zip(path_params, combo[: len(path_params)], strict=True):
                path = path.replace("{" + name + "}", value.text)
            query = {n: v.text for (n, _), v in zip(query_params, combo[len(path_params) :], strict=True)}
            for body, body_combo in (
                body_fillings(body_schema, world, own_parties, other_parties) if body_schema else [(None, ())]
            ):
                all_own = all(v.own for v in (*combo, *body_combo))
                # Writing one's own person's facts changes them legitimately; the snapshot is for others'.
                own_fact_write = method in ("POST", "PATCH") and re.search(r"/facts(/|$)", template)
                if all_own and (method == "DELETE" or SKIP_ON_OWN.search(template) or own_fact_write):
                    continue
                label = f"{method} {template} {path} {json.dumps(body)[:80] if body else ''}"
                if method == "GET":
                    response = client.get(path, query, headers=headers)
                else:
                    response = client.generic(
                        method,
                        path + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""),
                        json.dumps(body) if body is not None else "",
                        content_type="application/json",
                        headers=headers,
                    )
                sweep.check(label, response, own_markers, [v.text for v in (*combo, *body_combo)])


def snapshot(world, parties):
    """What must not change when other people poke at these parties' objects."""
    state = {}
    for name in parties:
        user = world.users.get(name)
        if user is not None:
            state[name] = (
                sorted(map(str, MemoryFact.objects.for_user(user).live().values_list("id", flat=True))),
                sorted(Membership.objects.filter(user=user).values_list("org_id", "role")),
                # Sessions only for Alice: the acting parties' own API calls legitimately open some.
                AgentSession.objects.filter(user=user).count() if name == "alice" else None,
            )
    for org in (world.org_a, world.org_b):
        state[org.slug] = (
            sorted(map(str, MemoryFact.objects.for_org(org).live().values_list("text", flat=True))),
            sorted(OrgFactProposal.objects.filter(org=org).values_list("status", flat=True)),
            ApiKey.objects.filter(org=org, revoked_at__isnull=True).count(),
            Invitation.objects.filter(org=org).pending().count(),
            Organization.objects.filter(id=org.id).exists(),
        )
    return state


# --- the tests --------------------------------------------------------------------------------------------


def test_route_collection_covers_the_fact_pages_and_api():
    """The sweep is only as good as its route list: it must find the known fact-returning routes."""
    pages = {template for template, _ in page_routes()}
    assert {
        "/orgs/<slug:slug>/",
        "/orgs/<slug:slug>/proposals/",
        "/orgs/<slug:slug>/facts/<uuid:fact_id>/edit/",
    } <= pages
    assert len(pages) >= 15
    operations = {(m, t) for m, t, _, _ in api_routes()}
    assert ("POST", "/api/v1/recall") in operations
    assert ("GET", "/api/v1/sessions/{session_id}/recall") in operations


@pytest.mark.slow
def test_no_memory_crosses_between_colleagues_or_organisations(scripted, make_user):
    world = build_world(scripted, make_user)
    users = world.users
    before = snapshot(world, ["alice", "carol", "bob", "dave", "remembered_a"])

    # Recall itself: Bob and Dave get org A's tier but nothing of Alice; Carol gets nothing of org A.
    for name in ("bob", "dave"):
        block = recall.recall(sessions.open_session(world.org_a, users[name]), RECALL_MESSAGE).block
        assert "Pelicanpipeline" in block  # positive control: the org tier is there
        assert not [s for s in ALICE_SECRETS + CAROL_SECRETS + ORG_B_SECRETS if s in block], block
    carol_block = recall.recall(sessions.open_session(world.org_b, users["carol"]), RECALL_MESSAGE).block
    assert "Betaorgtoken" in carol_block and "Carolsecretfig" in carol_block
    assert not [s for s in ALICE_SECRETS + BOB_SECRETS + ORG_A_SECRETS if s in carol_block], carol_block

    sweeps = []
    # Bob (an org A admin) and Dave (a plain member) on every page.
    for name in ("bob", "dave"):
        client = Client()
        client.force_login(users[name])
        sweep = Sweep(f"{name} (pages)", ALICE_SECRETS + CAROL_SECRETS + ORG_B_SECRETS)
        sweep_pages(client, sweep, world, [name, "org_a"], ["alice", "carol", "org_b"], ["Pelicanpipeline"])
        assert sweep.seen_own == {"Pelicanpipeline"}, "the sweep never reached the org A memory page"
        sweeps.append(sweep)

    # Carol on every page, naming org A's and its members' objects.
    client = Client()
    client.force_login(users["carol"])
    sweep = Sweep("carol (pages)", ALICE_SECRETS + BOB_SECRETS + ORG_A_SECRETS)
    sweep_pages(client, sweep, world, ["carol", "org_b"], ["alice", "bob", "dave", "org_a"], ["Betaorgtoken"])
    assert "Betaorgtoken" in sweep.seen_own
    sweeps.append(sweep)

    # The agent API for Bob with org A's key (Alice's own sessions are org A's agent's business, so
    # they are not named here), and for Carol with org B's key naming everything of org A.
    sweep = Sweep("bob (api, org A key)", ALICE_SECRETS + CAROL_SECRETS + ORG_B_SECRETS)
    sweep_api(Client(), sweep, world, world.key_a, ["bob", "org_a"], ["carol", "org_b"], ["Bobsecretmango"])
    assert "Bobsecretmango" in sweep.seen_own, "the API sweep never reached Bob's recall"
    sweeps.append(sweep)
    sweep = Sweep("carol (api, org B key)", ALICE_SECRETS + BOB_SECRETS + ORG_A_SECRETS)
    sweep_api(
        Client(), sweep, world, world.key_b, ["carol", "org_b"], ["alice", "bob", "dave", "org_a"], ["Carolsecretfig"]
    )
    assert "Carolsecretfig" in sweep.seen_own
    sweeps.append(sweep)

    leaks = [leak for s in sweeps for leak in s.leaks]
    assert not leaks, "\n".join(leaks[:30])
    assert sum(s.requests for s in sweeps) > 500
    # Poking at other people's objects changed nothing of theirs.
    after = snapshot(world, ["alice", "carol", "remembered_a"])
    assert {k: after[k] for k in ("alice", "carol", "remembered_a", world.org_b.slug)} == {
        k: before[k] for k in ("alice", "carol", "remembered_a", world.org_b.slug)
    }
    assert after[world.org_a.slug][0] == before[world.org_a.slug][0]

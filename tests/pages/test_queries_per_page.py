"""The number of SQL queries behind a page must not grow with the number of facts (no N+1):
the end user's pages (memory list, search, kind filter, a later page, a fact's history, conversations,
data and privacy), a fact's provenance page in the console, the org memory page (as a member and as
an admin) and the recall API, at 10 and 1,000 facts (the per-user limit) and as many org facts."""

import json
import re

import numpy as np
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from memoryapp import clock, embeddings, sessions, writing
from memoryapp.models import (
    AgentSession,
    ExternalIdentity,
    ExtractionRun,
    FactEvent,
    MemoryFact,
    OrgFactProposal,
    Turn,
)

pytestmark = pytest.mark.django_db

KINDS = ("preference", "constraint", "profile", "goal")


def memory_of(org, make_user, n):
    """A person with `n` live facts (all kinds, all from one session and run) and a replaced fact."""
    user = make_user(f"person-{n}", org=org)
    session = AgentSession.objects.create(user=user, org=org, ended_at=clock.now(), extraction_status="done")
    Turn.objects.create(user=user, session=session, ordinal=1, role="user", content="Lots about me.")
    run = ExtractionRun.objects.create(
        user=user, session=session, backend="scripted", model="scripted", prompt_version="v", input_hash="x"
    )
    rng = np.random.default_rng(n)
    vectors = rng.normal(size=(n, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    facts = MemoryFact.objects.bulk_create(
        MemoryFact(
            user=user,
            text=f"The user noted thing number {i}.",
            kind=KINDS[i % 4],
            embedding=vectors[i],
            embedding_model=embeddings.model_name(),
            source_session=session,
            source_turns=[1],
            extraction_run=run,
        )
        for i in range(n)
    )
    FactEvent.objects.bulk_create(
        FactEvent(fact_id=f.id, user=user, action="created", actor="extractor", session=session) for f in facts
    )
    # One fact replaced by a newer one, so the provenance page has a chain to show.
    newer = MemoryFact.objects.create(
        user=user,
        text="The user noted the newest thing.",
        kind="profile",
        embedding=vectors[0],
        embedding_model=embeddings.model_name(),
        source_session=session,
        source_turns=[1],
        extraction_run=run,
    )
    writing.supersede(facts[0], newer, reason="contradicts", actor=FactEvent.Actor.EXTRACTOR, session=session)
    return user, newer


def org_memory_of(org, admin, proposer, n):
    """`n` more live org facts: some approved from a member's proposal, one a correction of an older one."""
    facts = MemoryFact.objects.bulk_create(
        MemoryFact(
            org=org,
            scope=MemoryFact.Scope.ORG,
            text=f"The team uses tool number {i} ({n}).",
            kind=KINDS[i % 4],
            embedding=np.eye(384, dtype=np.float32)[i % 384],
            embedding_model=embeddings.model_name(),
            origin=MemoryFact.Origin.ORG_ADMIN,
            added_by=admin,
        )
        for i in range(n)
    )
    OrgFactProposal.objects.bulk_create(
        OrgFactProposal(
            org=org,
            proposed_by=proposer,
            text=f.text,
            kind=f.kind,
            fact=f,
            status=OrgFactProposal.Status.APPROVED,
            decided_at=clock.now(),
        )
        for f in facts[::3]
    )
    older = MemoryFact.objects.create(
        org=org,
        scope=MemoryFact.Scope.ORG,
        text=f"The team deploys on Fridays ({n}).",
        kind="profile",
        embedding=np.eye(384, dtype=np.float32)[0],
        embedding_model=embeddings.model_name(),
        origin=MemoryFact.Origin.ORG_ADMIN,
    )
    older.superseded_by = facts[-1]
    older.superseded_at = clock.now()
    older.supersede_reason = "corrected"
    older.save()


def count(request):
    request()  # warm caches that are per process, not per page (content types, key last-used)
    with CaptureQueriesContext(connection) as ctx:
        response = request()
    assert response.status_code == 200, response.content[:500]
    return len(ctx.captured_queries)


@pytest.fixture
def measure(org, make_user):
    staff = make_user("support-person", is_staff=True)
    admin = make_user("org-admin", org=org, role="admin")
    _, key = sessions.create_api_key(org, "queries")

    def pages(n):
        user, fact = memory_of(org, make_user, n)
        org_memory_of(org, admin, user, n)
        as_user, as_staff, as_admin, agent = Client(), Client(), Client(), Client()
        as_user.force_login(user)
        as_staff.force_login(staff)
        as_admin.force_login(admin)
        # The agent reaches the person through an id they linked to their account, as in production.
        ExternalIdentity.objects.create(org=org, user=user, external_id=f"ext-{n}", linked_at=clock.now())
        agent_session = sessions.open_session(org, user)
        body = json.dumps({"session": str(agent_session.id), "message": "what did I note?", "refresh": True})
        return {
            "my memory": count(lambda: as_user.get(reverse("me:memory"))),
            "my memory, search": count(lambda: as_user.get(reverse("me:memory"), {"q": "thing"})),
            "my memory, kind filter": count(lambda: as_user.get(reverse("me:memory"), {"kind": "goal"})),
            "fact history": count(lambda: as_user.get(reverse("me:fact", args=[fact.id]))),
            "conversations": count(lambda: as_user.get(reverse("me:conversations"))),
            "conversation": count(lambda: as_user.get(reverse("me:conversation", args=[fact.source_session_id]))),
            "data and privacy": count(lambda: as_user.get(reverse("me:data"))),
            "fact provenance": count(lambda: as_staff.get(reverse("console-fact", args=[fact.id]))),
            "org memory, member": count(lambda: as_user.get(reverse("org-memory", args=[org.slug]))),
            "org memory, admin": count(lambda: as_admin.get(reverse("org-memory", args=[org.slug]))),
            "recall API": count(
                lambda: agent.post(
                    "/api/v1/recall", body, content_type="application/json", headers={"Authorization": f"Bearer {key}"}
                )
            ),
        }

    return pages


@pytest.mark.slow
def test_queries_per_page_do_not_depend_on_fact_count(measure):
    few, many = measure(10), measure(1000)
    assert few == many, f"queries per page with 10 facts {few} vs 1000 facts {many}"
    assert all(n > 0 for n in few.values())


def test_a_full_memory_is_shown_a_page_at_a_time_and_search_covers_all(org, make_user):
    from memoryapp.pages.me.views import FACTS_PER_PAGE

    user, _ = memory_of(org, make_user, 1000)
    client = Client()
    client.force_login(user)
    first = client.get(reverse("me:memory")).content.decode()
    assert first.count('<li class="fact') == FACTS_PER_PAGE
    assert re.search(r"All <span class=\"n\">1000</span>", first) and "Next →" in first
    # The last fact in the list order is found by search and by its kind, not only on the last page.
    found = client.get(reverse("me:memory"), {"q": "thing number 999."}).content.decode()
    assert found.count('<li class="fact') == 1 and "You noted thing number 999." in found
    # Every goal is reached by following "Next →", each once.
    seen, after = [], ""
    for _ in range(6):
        page = client.get(reverse("me:memory"), {"kind": "goal", "after": after}).context["page"]
        seen += [f.id for f in page.rows]
        after = page.next_cursor
        if not after:
            break
    assert len(seen) == len(set(seen)) == 250

"""The read path: two tiers under a budget, once per session, explainable, and never a stale fact."""

import importlib
import re
from datetime import timedelta
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memoryapp import clock, embeddings, extraction, pending, recall, sessions, writing
from memoryapp.models import AgentSession, ExternalIdentity, FactEvent, Membership, MemoryFact, RecallLog
from memoryapp.vocabulary import FACT_MAX_CHARS
from tests.conftest import Api

pytestmark = pytest.mark.django_db

ONPREM = "The user's company runs everything on-prem by contract and cannot use cloud services."


def _error(response, status):
    assert response.status_code == status, response.content
    return response.json()["error"]


def _run_session(api, scripted, user, text, facts):
    """One whole agent session over the API; its extraction runs as the worker would run it."""
    sid = api.post("/v1/sessions", {"user": user}).json()["id"]
    assert api.post(f"/v1/sessions/{sid}/turns", {"turns": [{"role": "user", "content": text}]}).status_code == 202
    scripted.extract_answer = {"facts": facts}
    assert api.post(f"/v1/sessions/{sid}/end").status_code == 202
    extraction.extract_session(sid)
    return sid


def _user(org, name="alice"):
    return sessions.get_or_create_user(org, name)


def _fact(user, text, kind, **extra):
    fact = MemoryFact.objects.create(
        user=user, text=text, kind=kind, embedding=embeddings.embed(text), embedding_model=embeddings.model_name()
    )
    if extra:
        MemoryFact.objects.filter(id=fact.id).update(**extra)
        fact.refresh_from_db()
    return fact


def _fact_lines(block):
    return [line for line in block.splitlines() if line.startswith("- [")]


# --- the seed's test -------------------------------------------------------------------------


def test_onprem_constraint_survives_three_unrelated_sessions(api, scripted):
    _run_session(
        api,
        scripted,
        "alice",
        "We're on-prem, contractually. Never propose cloud services.",
        [{"text": ONPREM, "kind": "constraint"}],
    )
    for _ in range(3):
        _run_session(api, scripted, "alice", "Explain the difference between a mutex and a semaphore.", [])

    sid = api.post("/v1/sessions", {"user": "alice"}).json()["id"]
    body = api.post(
        "/v1/recall", {"session": sid, "message": "How should we handle file storage for the new module?"}
    ).json()

    assert "on-prem" in body["block"]
    assert "earlier sessions" in body["block"]
    # The header frames the notes as information that may be stale, never as orders or permissions.
    assert "may be outdated" in body["block"] and "the user is right" in body["block"]
    assert "not instructions" in body["block"] and "grant no permission" in body["block"]
    assert "follow them" not in body["block"]
    [fact] = body["facts"]
    assert fact["text"] == ONPREM and fact["kind"] == "constraint" and fact["tier"] == "always"
    assert fact["scope"] == "personal" and body["cached"] is False
    # The message never mentions clouds: the fact is there because constraints are always on.
    assert embeddings.embed(ONPREM) @ embeddings.embed("How should we handle file storage?") < 0.5


# --- what may appear -----------------------------------------------------------------------------


def test_superseded_and_expired_facts_never_appear(org, scripted):
    alice = _user(org)
    scripted.verdict_map = {"postgresql": "CONTRADICTS"}
    old = writing.store(alice, "The user's database is PostgreSQL.", "profile").fact
    new = writing.store(alice, "The user's database is PlanetScale.", "profile").fact
    old.refresh_from_db()
    assert old.superseded_by_id == new.id
    expired = _fact(alice, "The user wants to learn the Rust programming language.", "goal")
    MemoryFact.objects.filter(id=expired.id).update(expired_at=clock.now(), expired_rule="stale_goal")

    for message in ("Which database do we use, PostgreSQL?", "Should I learn the Rust programming language?"):
        result = recall.recall(sessions.open_session(org, alice), message)
        ids = {s.fact.id for s in result.facts}
        assert old.id not in ids and expired.id not in ids and new.id in ids
        assert "PostgreSQL" not in result.block and "Rust" not in result.block
        assert "PlanetScale" in result.block


def test_tier_two_is_similar_facts_above_the_floor_and_tier_one_is_always_on(org):
    alice = _user(org)
    tabs = _fact(alice, "The user prefers tabs over spaces when writing Python code.", "preference")
    _fact(alice, "The user enjoys hiking in the Alps on weekends.", "preference")
    role = _fact(alice, "The user is a backend engineer at a logistics company.", "profile")

    result = recall.recall(sessions.open_session(org, alice), "How should I indent this Python function?")

    by_id = {s.fact.id: s for s in result.facts}
    assert set(by_id) == {tabs.id, role.id}
    assert by_id[role.id].tier == "always" and by_id[role.id].score is None
    assert by_id[tabs.id].tier == "relevant" and by_id[tabs.id].score >= embeddings.floor("recall")
    assert "hiking" not in result.block


def test_tier_one_takes_the_most_confirmed_first_and_recency_breaks_ties(org, settings):
    settings.MEMORY = {**settings.MEMORY, "TIER1_LIMIT": 2, "TIER2_LIMIT": 0}
    alice = _user(org)
    now = clock.now()
    # Team 0 is the oldest but was confirmed in three sessions; teams 1-3 were said once each.
    counts = [3, 1, 1, 1]
    facts = [
        _fact(
            alice,
            f"The user works in team number {i}.",
            "profile",
            last_confirmed_at=now - timedelta(days=10 - i),
            confirmation_count=counts[i],
        )
        for i in range(4)
    ]
    result = recall.recall(sessions.open_session(org, alice), "hello")
    assert {s.fact.id for s in result.facts} == {facts[0].id, facts[3].id}

    settings.MEMORY = {**settings.MEMORY, "TIER1_ORDER": "recent"}
    result = recall.recall(sessions.open_session(org, alice), "hello")
    assert {s.fact.id for s in result.facts} == {facts[3].id, facts[2].id}


def test_constraints_always_come_first_and_a_few_profile_facts_keep_tier_one(org, settings):
    """With many profile facts, tier 1 is every constraint plus the most-confirmed profile facts;
    the other profile facts compete by similarity, and similar facts fill the rest of the cap."""
    settings.MEMORY = {**settings.MEMORY, "TIER1_KINDS": {"constraint": 12, "profile": 2}, "RECALL_FLOOR": -1}
    alice = _user(org)
    hobbies = ["chess", "sailing", "pottery", "birdwatching", "rowing", "baking", "juggling", "origami"]
    for i, hobby in enumerate(hobbies * 4):
        _fact(alice, f"The user's hobby number {i} is {hobby}.", "profile", confirmation_count=1 + i % 3)
    confirmed = MemoryFact.objects.filter(user=alice).order_by("-confirmation_count", "-last_confirmed_at", "id")
    top_two = {f.id for f in confirmed[:2]}
    rules = [
        _fact(alice, "The user's company forbids sending customer data to third-party services.", "constraint"),
        _fact(alice, "The user must not deploy on Fridays.", "constraint"),
    ]
    dog = _fact(alice, "The user has a golden retriever called Biscuit.", "profile")

    result = recall.recall(sessions.open_session(org, alice), "What should I feed my golden retriever?")

    always = [s for s in result.facts if s.tier == "always"]
    assert {s.fact.id for s in always} == {r.id for r in rules} | top_two
    relevant = {s.fact.id: s for s in result.facts if s.tier == "relevant"}
    assert dog.id in relevant
    assert max(relevant.values(), key=lambda s: s.score).fact.id == dog.id
    # Tier 2 is no longer held to 8: it fills what tier 1 leaves of the cap.
    assert (len(always), len(relevant), len(result.facts)) == (4, 16, 20)


def test_cap_holds_with_500_live_facts(org, other_org, settings):
    alice = _user(org)
    message = "Which editor settings should I use for Python?"
    close = embeddings.embed("The user likes editor settings for Python.")
    model = embeddings.model_name()
    kinds = ["constraint", "profile", "preference", "goal", "preference"]
    MemoryFact.objects.bulk_create(
        MemoryFact(
            user=alice,
            text=f"The user has preference number {i}.",
            kind=kinds[i % 5],
            embedding=close,
            embedding_model=model,
        )
        for i in range(500)
    )
    for i in range(5):
        MemoryFact.objects.create(
            org=org,
            scope="org",
            text=f"The team has rule number {i}.",
            kind="constraint",
            embedding=close,
            embedding_model=model,
        )

    result = recall.recall(sessions.open_session(org, alice), message)

    tiers = [s.tier for s in result.facts]
    assert len(result.facts) == 20 == len(_fact_lines(result.block))
    assert tiers.count("always") == 12 and tiers.count("relevant") == 8 and "org" not in tiers
    assert RecallLog.objects.filter(user=alice).count() == 20
    assert MemoryFact.objects.filter(user=alice).with_last_recalled().filter(last_recall__isnull=False).count() == 20

    # The limits are settings.
    settings.MEMORY = {**settings.MEMORY, "RECALL_CAP": 7, "TIER1_LIMIT": 3, "TIER2_LIMIT": 3}
    result = recall.recall(sessions.open_session(org, alice), message)
    tiers = [s.tier for s in result.facts]
    assert (tiers.count("always"), tiers.count("relevant"), tiers.count("org")) == (3, 3, 1)


def test_a_fact_embedded_by_another_model_is_never_compared_but_stays_always_on(org):
    """After a switch of embedding model, old vectors (another size) are not compared with the message's;
    an always-on fact still reaches the block, a preference waits until it is re-embedded."""
    alice = _user(org)
    _fact(alice, "The user writes Python.", "preference")
    for text, kind in (
        ("The user is allergic to peanuts.", "constraint"),
        ("The user likes Python tooling.", "preference"),
    ):
        MemoryFact.objects.create(
            user=alice, text=text, kind=kind, embedding=[0.5] * 256, embedding_model="voyage-3.5-lite"
        )

    result = recall.recall(sessions.open_session(org, alice), "Which Python tooling should I use?")

    texts = {s.fact.text: s.tier for s in result.facts}
    assert texts == {"The user is allergic to peanuts.": "always", "The user writes Python.": "relevant"}


def test_org_facts_come_after_personal_ones_in_their_own_labelled_section(org, settings):
    settings.MEMORY = {**settings.MEMORY, "RECALL_CAP": 3}
    alice = _user(org)
    _fact(alice, "The user prefers short answers.", "profile")
    _fact(alice, "The user is on-prem by contract.", "constraint")
    for text in ("The team deploys on Fridays.", "The team writes Go."):
        MemoryFact.objects.create(
            org=org,
            scope="org",
            text=text,
            kind="profile",
            embedding=embeddings.embed(text),
            embedding_model=embeddings.model_name(),
        )

    block = recall.recall(sessions.open_session(org, alice), "How do we deploy?").block

    personal, org_part = block.split(recall.ORG_HEADER.format(name=org.name))
    assert "on-prem" in personal and "short answers" in personal
    assert "<user_memory>" in personal and "</organisation_memory>" in org_part
    assert len(_fact_lines(org_part)) == 1  # the cap of 3 leaves room for one org fact
    assert "the user is right" in personal and "not instructions" in personal
    assert "describe the organisation, not this user" in org_part or "not this user" in recall.ORG_HEADER
    assert "not instructions" in recall.ORG_HEADER and "grant no permission" in recall.ORG_HEADER

    # Someone the organisation neither has as a member nor knows by an id never sees its facts.
    ExternalIdentity.objects.filter(user=alice, org=org).delete()
    Membership.objects.filter(user=alice, org=org).delete()
    block = recall.recall(sessions.open_session(org, alice), "How do we deploy?").block
    assert "Fridays" not in block and "Go." not in block and "on-prem" in block


# --- once per session -------------------------------------------------------------------------------


def test_two_recalls_give_identical_bytes_and_refresh_recomputes(api, org):
    alice = _user(org)
    _fact(alice, "The user is on-prem by contract.", "constraint")
    sid = api.post("/v1/sessions", {"user": "alice"}).json()["id"]
    first = api.post("/v1/recall", {"session": sid, "message": "storage?"}).json()
    _fact(alice, "The user is a data engineer.", "profile")

    second = api.post("/v1/recall", {"session": sid, "message": "something else entirely"}).json()
    assert second["block"].encode() == first["block"].encode()
    assert second["cached"] is True and first["cached"] is False
    assert [f["id"] for f in second["facts"]] == [f["id"] for f in first["facts"]]
    assert RecallLog.objects.filter(session_id=sid).count() == 1

    refreshed = api.post("/v1/recall", {"session": sid, "message": "storage?", "refresh": True}).json()
    assert refreshed["cached"] is False and "data engineer" in refreshed["block"]
    assert AgentSession.objects.get(id=sid).memory_block == refreshed["block"]
    assert api.post("/v1/recall", {"session": sid, "message": "x"}).json()["block"] == refreshed["block"]


def test_same_facts_give_byte_identical_blocks_whatever_the_order_they_were_picked_in(org, scripted, travel):
    alice = _user(org)
    _fact(alice, "The user is on-prem by contract.", "constraint")
    _fact(alice, "The user is a data engineer.", "profile")
    _fact(alice, "The user lives in Lisbon.", "profile")
    first = recall.recall(sessions.open_session(org, alice), "storage?").block

    travel(timedelta(days=1))
    scripted.verdict_map = {"lisbon": "DUPLICATE"}  # re-confirming moves it to the front of tier 1
    assert writing.store(alice, "The user lives in Lisbon.", "profile").outcome == "confirmed"
    second = recall.recall(sessions.open_session(org, alice), "a different question").block

    assert second.encode() == first.encode() and len(_fact_lines(first)) == 3


def test_a_fact_deleted_or_corrected_mid_session_leaves_the_cached_block(org):
    alice = _user(org)
    secret = _fact(alice, "The user is being treated for an illness.", "profile")
    role = _fact(alice, "The user is a data engineer.", "profile")
    session = sessions.open_session(org, alice)
    assert "illness" in recall.recall(session, "hi").block

    writing.delete_fact(secret, actor=FactEvent.Actor.USER, actor_user=alice)
    after_delete = recall.recall(session, "hi")
    assert "illness" not in after_delete.block and "data engineer" in after_delete.block

    writing.correct_fact(role, "The user is a platform engineer.", "profile", actor_user=alice)
    after_correction = recall.recall(session, "hi").block
    assert "platform engineer" in after_correction and "data engineer" not in after_correction


def test_a_racing_first_recall_keeps_the_winners_block(org):
    alice = _user(org)
    _fact(alice, "The user is on-prem by contract.", "constraint")
    session = sessions.open_session(org, alice)
    stale = AgentSession.objects.get(id=session.id)  # read before the other recall stored its block

    winner = recall.recall(session, "storage?")
    _fact(alice, "The user is a data engineer.", "profile")
    loser = recall.recall(stale, "something else")

    assert loser.block == winner.block and loser.cached is True
    assert RecallLog.objects.filter(session=session).count() == 1


# --- memory off ---------------------------------------------------------------------------------------


def test_memory_off_sessions_and_switched_off_users_get_nothing_and_leave_no_trace(api, org):
    alice = _user(org)
    fact = _fact(alice, "The user is on-prem by contract.", "constraint")
    off = api.post("/v1/sessions", {"user": "alice", "memory": "off"}).json()["id"]
    assert api.post("/v1/recall", {"session": off, "message": "storage?"}).json() == {
        "block": "",
        "facts": [],
        "cached": False,
    }
    system = api.post("/v1/prompt", {"session": off, "message": "x", "instructions": "Be brief."}).json()["system"]
    assert system == [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]

    on = api.post("/v1/sessions", {"user": "alice"}).json()["id"]
    writing.set_memory_switch(alice, False)
    assert api.post("/v1/recall", {"session": on, "message": "storage?"}).json()["block"] == ""
    later = api.post("/v1/sessions", {"user": "alice"}).json()["id"]
    assert api.post("/v1/recall", {"session": later, "message": "storage?"}).json()["block"] == ""

    assert not RecallLog.objects.exists()
    assert MemoryFact.objects.get(id=fact.id).last_recalled_at is None


def test_nothing_to_recall_is_an_empty_string(api):
    sid = api.post("/v1/sessions", {"user": "newcomer"}).json()["id"]
    body = api.post("/v1/recall", {"session": sid, "message": "Hello there"}).json()
    assert body == {"block": "", "facts": [], "cached": False}
    assert api.post("/v1/recall", {"session": sid, "message": "Hello again"}).json()["cached"] is True


# --- marking and logging ---------------------------------------------------------------------------


def test_a_recall_logs_each_fact_and_rewrites_no_fact_row(org, travel):
    alice = _user(org)
    _fact(alice, "The user is on-prem by contract.", "constraint")
    _fact(alice, "The user prefers tabs over spaces when writing Python code.", "preference")
    _fact(alice, "The user enjoys writing Python scripts for automation.", "preference")
    session = sessions.open_session(org, alice)
    travel(timedelta(hours=1))

    with CaptureQueriesContext(connection) as queries:
        result = recall.recall(session, "How should I indent my Python code?")

    # The read path writes the session's block and the log, never the wide fact rows.
    sql = [q["sql"].lower().replace('"', "") for q in queries]
    assert not [q for q in sql if "update memoryapp_memoryfact" in q]
    assert len(result.facts) == 3
    # "Last used" on /me/ and in the API comes from the log: every fact shows this recall.
    used = MemoryFact.objects.filter(user=alice).with_last_recalled().values_list("last_recall", flat=True)
    assert set(used) == {session.memory_block_at}
    assert abs(session.memory_block_at - clock.now()) < timedelta(seconds=5)
    logs = list(RecallLog.objects.filter(session=session).order_by("position"))
    assert [(log.fact_id, log.tier, log.score) for log in logs] == [(s.fact.id, s.tier, s.score) for s in result.facts]
    assert {log.tier for log in logs} == {"always", "relevant"}
    assert all(log.score is None for log in logs if log.tier == "always")
    assert all(0 < log.score <= 1 for log in logs if log.tier == "relevant")


# --- explaining a session -------------------------------------------------------------------------


def test_session_recall_explains_what_was_injected_and_why(api, org):
    alice = _user(org)
    _fact(alice, "The user is on-prem by contract.", "constraint")
    _fact(alice, "The user prefers tabs over spaces when writing Python code.", "preference")
    sid = api.post("/v1/sessions", {"user": "alice"}).json()["id"]
    assert api.get(f"/v1/sessions/{sid}/recall").json()["injected"] == []
    api.post("/v1/recall", {"session": sid, "message": "How should I indent my Python code?"})

    body = api.get(f"/v1/sessions/{sid}/recall").json()
    assert body["session"] == sid and "on-prem" in body["block"]
    why = {i["text"]: i for i in body["injected"]}
    assert why["The user is on-prem by contract."]["tier"] == "always"
    tabs = why["The user prefers tabs over spaces when writing Python code."]
    assert tabs["tier"] == "relevant" and tabs["score"] > embeddings.floor("recall")
    assert tabs["kind"] == "preference" and tabs["scope"] == "personal" and tabs["recalled_at"]
    assert body["memory"] == "on" and body["block_at"] and all(i["in_current_block"] for i in body["injected"])

    # After a refresh the history stays, and says which entries the current block holds.
    api.post("/v1/recall", {"session": sid, "message": "Where do we host things?", "refresh": True})
    body = api.get(f"/v1/sessions/{sid}/recall").json()
    current = [i["text"] for i in body["injected"] if i["in_current_block"]]
    earlier = [i["text"] for i in body["injected"] if not i["in_current_block"]]
    assert current == ["The user is on-prem by contract."] and len(earlier) == 2


def test_another_orgs_session_is_404_for_every_read_path_endpoint(api, other_org):
    _, their_key = sessions.create_api_key(other_org, "theirs")
    theirs = Api(their_key)
    sid = theirs.post("/v1/sessions", {"user": "bob"}).json()["id"]
    theirs.post("/v1/recall", {"session": sid, "message": "hi"})

    assert _error(api.get(f"/v1/sessions/{sid}/recall"), 404)["code"] == "not_found"
    assert _error(api.post("/v1/recall", {"session": sid, "message": "hi"}), 404)["code"] == "not_found"
    assert _error(api.post("/v1/prompt", {"session": sid, "message": "hi"}), 404)["code"] == "not_found"


@pytest.mark.parametrize(
    "payload, status",
    [
        ({"message": "hi"}, 422),
        ({"session": "not-a-uuid", "message": "hi"}, 422),
        ({"session": "00000000-0000-0000-0000-000000000000", "message": "hi"}, 404),
        ({"session": "00000000-0000-0000-0000-000000000000", "message": ["a list"]}, 422),
        ({"session": "00000000-0000-0000-0000-000000000000", "message": "x" * 40000}, 422),
        ({"session": "00000000-0000-0000-0000-000000000000", "refresh": "maybe"}, 422),
    ],
)
def test_bad_recall_input_is_a_clear_4xx(api, payload, status):
    for path in ("/v1/recall", "/v1/prompt"):
        error = _error(api.post(path, payload), status)
        assert error["message"]
    assert _error(api.post("/v1/recall", raw="{not json"), 400)["code"] == "malformed_json"
    assert _error(api.get("/v1/sessions/not-a-uuid/recall"), 422)["message"]


def test_tier_two_is_hybrid_a_shared_word_recalls_a_fact_the_vectors_miss(org, settings):
    """Full-text rank is fused with cosine rank: with the vector side shut off by an impossible floor,
    a fact sharing a word with the message is still recalled, and an unrelated one is not."""
    settings.MEMORY = {**settings.MEMORY, "RECALL_FLOOR": "0.999"}
    alice = _user(org)
    gardening = _fact(alice, "The user grows tomatoes on an allotment.", "preference")
    _fact(alice, "The user prefers dark mode in every editor.", "preference")
    chosen = recall.select(alice, "When should I plant my tomatoes this year?")
    assert [s.fact.id for s in chosen] == [gardening.id]
    assert chosen[0].tier == "relevant" and chosen[0].score < 0.999
    assert recall.select(alice, "What is a monad?") == []


def test_words_rank_a_fact_matching_more_of_the_message_above_one_repeating_a_word(org, settings):
    """The text side ranks by ts_rank: two of the message's words beat one word said three times."""
    settings.MEMORY = {**settings.MEMORY, "RECALL_FLOOR": "0.999"}  # the vector side shut off
    alice = _user(org)
    repeats = _fact(alice, "The user grows tomatoes, cans tomatoes and gives tomatoes away.", "preference")
    both = _fact(alice, "The user will plant tomatoes in spring.", "preference")
    chosen = recall.select(alice, "When should I plant my tomatoes this year?")
    assert [s.fact.id for s in chosen] == [both.id, repeats.id]


def test_words_match_without_their_accents_in_recall_search_and_the_reference(org, settings):
    """A message written without accents recalls the accented fact (and the other way round); the
    page's search does the same, and the independent reference agrees."""
    from bench import reference
    from memoryapp import search

    settings.MEMORY = {**settings.MEMORY, "RECALL_FLOOR": "0.999"}  # the vector side shut off
    alice = _user(org)
    cafe = _fact(alice, "The user works from a café in Zürich.", "preference")
    naive = _fact(alice, "The user finds the naive approach best.", "preference")
    assert [s.fact.id for s in recall.select(alice, "Any cafe near Zurich open late?") if s.tier == "relevant"] == [
        cafe.id
    ]
    assert [s.fact.id for s in recall.select(alice, "Is the naïve approach enough?") if s.tier == "relevant"] == [
        naive.id
    ]
    assert list(search.matching(MemoryFact.objects.for_user(alice), "zurich cafe")) == [cafe]
    assert reference.query_lexemes("Zürich") == reference.query_lexemes("zurich") == {"zurich"}


def test_message_words_cannot_inject_tsquery_syntax():
    assert recall.message_words("a & b | !c <-> d:* 'x' (tomatoes)") == "tomatoes"
    assert recall.message_words("") == ""


def _recall_plans():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0) FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            ["%WITH mine AS MATERIALIZED%"],
        )
        return cursor.fetchone()


def test_the_recall_statement_is_planned_once_per_connection(org):
    """Planning the selection cost as much as running it: it is prepared and reused with a generic plan."""
    alice, bob = _user(org), _user(org, "bob")
    _fact(alice, "The user is on-prem by contract.", "constraint")
    _fact(bob, "The user writes Rust at work.", "profile")
    generic, custom = _recall_plans()

    for person, message in [(alice, "Where do we deploy?"), (bob, "Which language?"), (alice, "Any limits?")]:
        recall.recall(sessions.open_session(org, person), message)

    # Three recalls for two people: every execution used the one generic plan, none was planned anew.
    assert _recall_plans() == (generic + 3, custom)


# --- a change of embedding model ------------------------------------------------------------------


def _old_model_fact(user, text):
    vector = embeddings.embed_many([text], model=embeddings.minilm())[0]
    return MemoryFact.objects.create(
        user=user, text=text, kind="preference", embedding=vector, embedding_model=embeddings.MINILM_NAME
    )


def test_facts_of_another_embedding_model_are_found_by_similarity_again_after_reembed_facts(org):
    alice = _user(org)
    fact = _old_model_fact(alice, "The user's code editor is Neovim.")
    question = embeddings.embed("Which editor should I set up?")
    assert embeddings.model_name() != embeddings.MINILM_NAME
    assert list(MemoryFact.objects.for_user(alice).live().nearest(question)) == []  # never compared across models

    out = StringIO()
    call_command("reembed_facts", stdout=out)

    assert list(MemoryFact.objects.for_user(alice).live().nearest(question)) == [fact]
    fact.refresh_from_db()
    assert fact.embedding_model == embeddings.model_name()
    assert "1 fact re-embedded" in out.getvalue()
    call_command("reembed_facts", stdout=(again := StringIO()))
    assert "0 facts re-embedded" in again.getvalue()


def test_a_fact_corrected_while_it_is_being_reembedded_keeps_no_vector_of_its_old_text(org, monkeypatch):
    alice = _user(org)
    fact = _old_model_fact(alice, "The user lives in Lisbon.")
    embed_many = embeddings.embed_many

    def correction_meanwhile(texts, *args, **kwargs):
        MemoryFact.objects.filter(id=fact.id).update(text="The user lives in Porto.")
        return embed_many(texts, *args, **kwargs)

    monkeypatch.setattr(embeddings, "embed_many", correction_meanwhile)
    assert writing.reembed_facts() == 0
    fact.refresh_from_db()
    assert fact.embedding_model == embeddings.MINILM_NAME  # left for the next run, which embeds "Porto"
    monkeypatch.setattr(embeddings, "embed_many", embed_many)
    assert writing.reembed_facts() == 1
    fact.refresh_from_db()
    assert float(np.array(fact.embedding, dtype=np.float32) @ embeddings.embed("The user lives in Porto.")) > 0.999


# --- reading a cold user cheaply ------------------------------------------------------------------


def test_every_column_recall_ranks_by_is_in_the_covering_index():
    """The user's live facts are read by an index-only scan (a few leaf pages, not one scattered heap page
    per fact) only while `mine` names no column outside fact_user_recall_idx; docs/benchmarks.md has the plan."""
    mine = recall.SELECT_SQL.split("mine AS MATERIALIZED (")[1].split("), always AS")[0]
    read = set(re.findall(r"\bf\.(\w+)", mine))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.attname FROM pg_index x JOIN pg_attribute a"
            " ON a.attrelid = x.indrelid AND a.attnum = ANY(x.indkey)"
            " WHERE x.indexrelid = 'fact_user_recall_idx'::regclass"
        )
        covered = {name for (name,) in cursor.fetchall()}
        cursor.execute(
            "SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indexrelid = 'fact_user_recall_idx'::regclass"
        )
        predicate = cursor.fetchone()[0]
    assert {"user_id", "kind", "embedding_half", "search_vector"} <= read
    # Columns the index's predicate already settles need not be stored in it.
    assert read - covered <= {"superseded_at", "expired_at"} and all(c in predicate for c in read - covered)


def test_the_half_precision_copy_follows_the_vector_however_a_fact_is_written(org):
    """Recall ranks `embedding_half`, which PostgreSQL fills from `embedding` on every write: through the
    write path, a row planted directly, and a vector changed later. A copy left behind would rank a fact
    by a vector it no longer has."""
    alice = _user(org)
    stored = writing.store(alice, "The user lives in Lisbon.", "profile").fact
    planted = MemoryFact.objects.create(
        user=alice,
        text="The user plays the cello.",
        kind="preference",
        embedding=embeddings.embed("The user plays the cello."),
        embedding_model=embeddings.model_name(),
    )
    MemoryFact.objects.filter(id=planted.id).update(embedding=embeddings.embed("The user lives in Lisbon."))
    MemoryFact.objects.filter(id=stored.id).update(embedding_half=embeddings.embed("The user plays the cello."))
    for fact in MemoryFact.objects.filter(id__in=[stored.id, planted.id]):
        assert np.allclose(np.asarray(fact.embedding_half), fact.embedding, atol=1e-3)
    nearest = list(MemoryFact.objects.filter(user=alice).nearest(embeddings.embed("The user lives in Lisbon.")))
    assert [f.id for f in nearest[:2]] in ([stored.id, planted.id], [planted.id, stored.id])
    assert all(f.distance < 1e-3 for f in nearest[:2])


def test_facts_stored_before_the_upgrade_get_their_copy_and_are_recalled(org):
    """Migration 0017 fills `embedding_half` for rows written before its trigger existed; until then such a
    fact has no distance, and recall would never rank it as relevant."""
    alice = _user(org)
    old = writing.store(alice, "The user keeps bees on the roof.", "profile").fact
    with connection.cursor() as cursor:  # as the row was before the upgrade: no copy, no trigger to add one
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # ALTER TABLE waits for no deferred check
        cursor.execute("ALTER TABLE memoryapp_memoryfact DISABLE TRIGGER fact_half")
        cursor.execute("UPDATE memoryapp_memoryfact SET embedding_half = NULL WHERE id = %s", [old.id])
        cursor.execute("ALTER TABLE memoryapp_memoryfact ENABLE TRIGGER fact_half")
    assert not MemoryFact.objects.filter(user=alice).nearest(embeddings.embed("bees")).exclude(distance=None).exists()

    migration = importlib.import_module("memoryapp.migrations.0017_fact_half_vectors")
    with connection.schema_editor(atomic=False) as editor:
        migration.fill_old_rows(None, editor)
    nearest = MemoryFact.objects.filter(user=alice).nearest(embeddings.embed("The user keeps bees on the roof."))
    assert [(f.id, f.distance < 1e-3) for f in nearest] == [(old.id, True)]


def test_the_bulkiest_fact_fits_its_index_row_and_is_stored(org, api):
    """An index row holds at most 2,704 bytes: the half-precision vector (776 bytes for MiniLM's 384
    dimensions), the text and its search words. The bulkiest 200 characters (a hundred distinct
    one-letter words of four UTF-8 bytes each: 499 bytes of text, about 1,200 of search words) fit, so
    no fact is refused for its size in the index; a full-precision vector (1,544 bytes) would not fit."""
    alice = _user(org)
    words = " ".join(f"{a}{b}q" for a in "abcdefghijklmnopqrstuvwxyz" for b in "aeiou")[:FACT_MAX_CHARS].strip()
    result = writing.store(alice, words, "profile")
    if result.outcome == "pending":  # the judge may hold text it reads badly: the person's word stores it
        result = pending.keep(result.candidate, alice)
    assert result.fact.text == words
    wordy = " ".join(chr(0x4E00 + 7 * i) for i in range(100))[:FACT_MAX_CHARS]
    response = api.post("/v1/users/alice/facts", {"text": wordy, "kind": "profile"})
    assert response.status_code in (201, 202), response.content  # stored, or waiting for the person's word

    bulkiest = " ".join(chr(0x20000 + 7 * i) for i in range(100))[:FACT_MAX_CHARS]
    assert len(bulkiest.encode()) == 499
    planted = MemoryFact.objects.create(
        user=alice, text=bulkiest, kind="profile", embedding=embeddings.embed(bulkiest), embedding_model="m" * 80
    )
    assert MemoryFact.objects.live().filter(user=alice, id=planted.id).exists()

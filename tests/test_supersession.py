"""Supersession: contradictions replace, duplicates confirm, a person's own corrections stand."""

from datetime import timedelta

import pytest
from django.test import override_settings

from memoryapp import backends, embeddings, extraction, pending, recall, sessions, writing
from memoryapp.backends import offline
from memoryapp.models import AgentSession, FactCandidate, FactEvent, MemoryFact

pytestmark = pytest.mark.django_db

POSTGRES = "The user's database is PostgreSQL."
PLANETSCALE = "The user's database is PlanetScale."


def run_session(org, scripted, said, facts, user="ext-1"):
    """One whole session: open, say `said`, end, extract `facts` (text, kind) with the scripted model."""
    person = sessions.get_or_create_user(org, user)
    session = sessions.open_session(org, person)
    sessions.add_turns(session, [("user", said)])
    sessions.end_session(session)
    scripted.extract_answer = {"facts": [{"text": t, "kind": k} for t, k in facts]}
    extraction.extract_session(session.id)
    return session


def test_postgres_to_planetscale_end_to_end(api, scripted, travel):
    sid = api.post("/v1/sessions", {"user": "alice"}).json()["id"]
    api.post(f"/v1/sessions/{sid}/turns", {"turns": [{"role": "user", "content": "We're on Postgres."}]})
    scripted.extract_answer = {"facts": [{"text": POSTGRES, "kind": "profile"}]}
    api.post(f"/v1/sessions/{sid}/end")
    extraction.extract_session(sid)

    travel(timedelta(days=150))  # April -> September
    sid2 = api.post("/v1/sessions", {"user": "alice"}).json()["id"]
    api.post(f"/v1/sessions/{sid2}/turns", {"turns": [{"role": "user", "content": "We migrated to PlanetScale."}]})
    scripted.extract_answer = {"facts": [{"text": PLANETSCALE, "kind": "profile"}]}
    scripted.verdict_map = {"postgresql": "CONTRADICTS"}
    api.post(f"/v1/sessions/{sid2}/end")
    extraction.extract_session(sid2)

    old = MemoryFact.objects.get(text=POSTGRES)  # still in the table
    new = MemoryFact.objects.get(text=PLANETSCALE)
    assert old.superseded_at >= new.created_at and old.superseded_by_id == new.id
    assert old.supersede_reason == "contradicts" and new.superseded_at is None
    assert writing.chain_of(new) == [old, new] and writing.chain_of(old) == [old, new]
    assert [f.text for f in MemoryFact.objects.for_user(new.user).live()] == [PLANETSCALE]
    event = FactEvent.objects.get(fact_id=old.id, action="superseded")
    assert (event.related_fact_id, str(event.session_id)) == (new.id, sid2)

    s3 = AgentSession.objects.get(id=api.post("/v1/sessions", {"user": "alice"}).json()["id"])
    result = recall.recall(s3, "which database do we use?")
    assert "PlanetScale" in result.block and "PostgreSQL" not in result.block
    assert [s.fact.id for s in result.facts] == [new.id]

    status = api.get(f"/v1/sessions/{sid2}").json()
    assert status["facts_written"] == [str(new.id)] and status["facts_superseded"] == [str(old.id)]


def test_duplicate_confirms_without_a_new_row(org, scripted, travel):
    run_session(org, scripted, "We're on Postgres.", [(POSTGRES, "profile")])
    fact = MemoryFact.objects.get()
    travel(timedelta(days=3))
    scripted.verdict_map = {"postgresql": "DUPLICATE"}
    session = run_session(org, scripted, "Postgres again.", [("The user's team runs PostgreSQL.", "profile")])
    assert MemoryFact.objects.count() == 1
    confirmed = MemoryFact.objects.get()
    assert confirmed.text == POSTGRES and confirmed.confirmation_count == 2
    assert confirmed.last_confirmed_at - fact.last_confirmed_at >= timedelta(days=3)
    assert confirmed.created_at == fact.created_at
    event = FactEvent.objects.get(action="confirmed")
    assert (event.fact_id, event.session_id) == (fact.id, session.id)


def test_ten_sessions_restating_one_fact_leave_one_row_with_ten_confirmations(org, scripted, travel):
    scripted.verdict_map = {"postgresql": "DUPLICATE"}
    for _ in range(10):
        travel(timedelta(days=1))
        run_session(org, scripted, "As always, we're on Postgres.", [(POSTGRES, "profile")])
    assert MemoryFact.objects.count() == 1
    fact = MemoryFact.objects.get()
    assert fact.confirmation_count == 10 and fact.superseded_at is None
    assert fact.last_confirmed_at - fact.created_at >= timedelta(days=9)
    assert FactEvent.objects.filter(action="confirmed").count() == 9


def offline_sessions(org, *said):
    """One ended and extracted session per user turn in `said`, for one person, with the offline backend."""
    with override_settings(EXTRACTION_BACKEND=backends.OfflineBackend()):
        person = sessions.get_or_create_user(org, "ext-1")
        for line in said:
            session = sessions.open_session(org, person)
            sessions.add_turns(session, [("user", line)])
            sessions.end_session(session)
            extraction.extract_session(session.id)


def test_ten_sessions_with_the_offline_backend_too(org):
    offline_sessions(org, *["I use Neovim."] * 10)
    fact = MemoryFact.objects.get()
    assert fact.text == "The user uses Neovim." and fact.confirmation_count == 10


def test_the_offline_backend_keeps_a_new_event_on_a_familiar_topic(org):
    # Before the similarity bar on DUPLICATE, the second session was "confirmed" into the first
    # fact and what the person said about their novel was lost.
    offline_sessions(org, "My laptop crashed last week.", "I finished writing my novel last week.")
    texts = sorted(MemoryFact.objects.live().values_list("text", flat=True))
    assert len(texts) == 2 and any("novel" in t for t in texts) and any("laptop" in t for t in texts)


def test_hating_what_you_loved_replaces_the_old_feeling_offline(org):
    # Before, the offline verdict was DUPLICATE: "loves Python" stayed live and was confirmed.
    offline_sessions(org, "I love Python.", "I hate Python.")
    assert list(MemoryFact.objects.live().values_list("text", flat=True)) == ["The user hates Python."]
    old = MemoryFact.objects.get(text="The user loves Python.")
    assert old.superseded_by.text == "The user hates Python."


def test_what_someone_else_in_their_life_does_never_replaces_the_users_own_fact_offline(org):
    offline_sessions(org, "I work at SAP.", "My colleague Tom works at Google now.", "I'm 34.", "My daughter is 7.")
    live = set(MemoryFact.objects.live().values_list("text", flat=True))
    assert {"The user works at SAP.", "The user's colleague Tom works at Google now."} <= live
    assert not MemoryFact.objects.filter(superseded_at__isnull=False).exists()


@pytest.mark.parametrize(
    "old, new, verdict",
    [
        ("The user uses a Mac for work.", "The user's boss uses Windows.", "INDEPENDENT"),  # another person
        ("The user is 34 years old.", "The user's daughter is 7 years old.", "INDEPENDENT"),
        ("The user's colleague Tom works at Google.", "The user's colleague Anna works at Apple.", "INDEPENDENT"),
        ("The user's colleague Tom works at Google.", "The user's colleague Tom works at Apple now.", "CONTRADICTS"),
        ("The user owns a piano.", "The user owns a violin.", "INDEPENDENT"),  # the model's 0.86 is too unsure
        ("The user lives in Berlin.", "The user lives in Hamburg.", "CONTRADICTS"),
        # Someone named first, or after a word saying who they are to the user, is not the user.
        ("The user lives in Chicago.", "Jake now lives in Seattle.", "INDEPENDENT"),
        ("The user lives in Chicago.", "The user's buddy Jake now lives in Seattle.", "INDEPENDENT"),
        # Liking one thing leaves liking another; a liking that says it changed replaces it.
        ("The user likes pears.", "The user likes figs.", "INDEPENDENT"),
        ("The user likes tea.", "The user now likes coffee.", "CONTRADICTS"),
    ],
)
def test_offline_verdicts_supersede_only_the_same_persons_fact_and_only_when_sure(old, new, verdict):
    assert offline.judge(new, [old]) == [verdict]


def test_rules_about_different_things_are_all_kept_offline():
    # Before, a rule with one word swapped counted as a rewording of the first (cosine 0.76-0.79 against the
    # rules' bar of 0.75): gluten, dairy and caffeine were answered "confirmed" and never stored.
    first = "The user must never eat peanuts because of a severe allergy."
    for new in (
        "The user must never eat gluten because of a severe allergy.",
        "The user must never eat dairy because of a severe allergy.",
    ):
        assert offline.judge(new, [first]) == ["INDEPENDENT"]
    chocolate = "The user must avoid chocolate because it triggers migraines."
    assert offline.judge("The user must avoid caffeine because it triggers migraines.", [chocolate]) == ["INDEPENDENT"]
    # A real rewording of one rule is still one rule.
    cloud = "The user does not want the assistant to propose cloud services."
    assert offline.judge("The user does not want the assistant to suggest cloud services.", [cloud]) == ["DUPLICATE"]


def test_an_unsure_contradiction_keeps_both_facts_and_never_drops_the_new_one():
    # The model's CONTRADICTS is 0.64 here; its next answer, DUPLICATE, would have lost "three kids".
    assert offline.judge("The user has three kids.", ["The user has two kids."]) != ["DUPLICATE"]


def keep_what_waits():
    """The person keeps every candidate the judge held (words to the assistant and rules read as orders
    may wait for their one click): supersession then runs as for any fact."""
    for candidate in FactCandidate.objects.pending().order_by("created_at", "id"):
        pending.keep(candidate, candidate.user)


def test_a_teams_rules_pile_up_offline_and_a_reworded_rule_confirms(org):
    # Before, the model (trained on chit-chat) called the second rule DUPLICATE of the first and
    # dropped it, and "after 4pm" superseded "on Fridays" through a guessed one-value relation.
    offline_sessions(
        org,
        "We must not deploy on Fridays.",
        "Every deployment must be announced in the ops channel first.",
        "Every deployment must record who pushed it.",
        "Deployments must not happen after 4pm.",
        "Never propose cloud services.",
        "Don't suggest cloud services.",
    )
    keep_what_waits()
    live = sorted(MemoryFact.objects.live().values_list("text", flat=True))
    assert len(live) == 5 and not MemoryFact.objects.filter(superseded_at__isnull=False).exists()
    assert any("Fridays" in t for t in live) and any("4pm" in t for t in live)
    assert any("announced" in t for t in live) and any("who pushed it" in t for t in live)
    cloud = MemoryFact.objects.get(text__contains="cloud services")
    assert cloud.confirmation_count == 2  # the rewording confirmed the wish instead of adding a second


def test_a_new_language_or_name_for_the_assistant_replaces_the_old_one_offline(org):
    # Before, "answer in English" sat beside "answer in German" (INDEPENDENT), and every block held both.
    offline_sessions(org, "Answer in German from now on.", "From now on, call me Sam.")
    keep_what_waits()
    offline_sessions(org, "Please reply in English from now on.", "From now on, call me Alex.")
    keep_what_waits()
    live = sorted(MemoryFact.objects.live().values_list("text", flat=True))
    assert live == [
        "The user wants the assistant to call them Alex.",
        "The user wants the assistant to reply in English.",
    ]
    german = MemoryFact.objects.get(text__contains="German")
    assert german.superseded_by.text == "The user wants the assistant to reply in English."


def test_one_verdict_call_covers_every_neighbour(org, scripted):
    person = sessions.get_or_create_user(org, "ext-1")
    for text in (POSTGRES, "The user's database host is AWS RDS.", "The user's database backups run nightly."):
        writing.store(person, text, "profile", judge=scripted.verdicts)
    scripted.verdict_requests.clear()
    result = writing.store(person, PLANETSCALE, "profile", judge=scripted.verdicts)
    assert len(scripted.verdict_requests) == 1 and result.judge_calls == 1
    new_text, neighbours = scripted.verdict_requests[0]
    assert new_text == PLANETSCALE and POSTGRES in neighbours and 1 <= len(neighbours) <= 5


def test_at_most_five_neighbours_are_judged(org, scripted):
    person = sessions.get_or_create_user(org, "ext-1")
    for lang in ("Python", "Go", "Rust", "Kotlin", "Swift", "Elixir", "Haskell"):
        writing.store(person, f"The user writes {lang} at work.", "profile", judge=scripted.verdicts)
    scripted.verdict_requests.clear()
    writing.store(person, "The user writes Ruby at work.", "profile", judge=scripted.verdicts)
    assert len(scripted.verdict_requests) == 1 and len(scripted.verdict_requests[0][1]) == 5


def test_no_verdict_call_when_no_neighbour_passes_the_floor(org, scripted):
    person = sessions.get_or_create_user(org, "ext-1")
    first = writing.store(person, POSTGRES, "profile", judge=scripted.verdicts)
    unrelated = "The user prefers dark mode in every editor."
    similarity = float(embeddings.embed(POSTGRES) @ embeddings.embed(unrelated))
    assert similarity < embeddings.floor("neighbour")  # the premise of this test
    second = writing.store(person, unrelated, "preference", judge=scripted.verdicts)
    assert first.judge_calls == second.judge_calls == 0 and scripted.verdict_requests == []
    assert MemoryFact.objects.live().count() == 2


def test_a_fact_announcing_a_change_is_judged_against_a_value_worded_far_from_it(org):
    # "now uses PlanetScale" and "now uses MySQL" sit under the usual floor (MiniLM: about 0.40):
    # without the lower floor for changes, both stayed live and recall handed the model both databases.
    person = sessions.get_or_create_user(org, "ext-1")
    mysql, planetscale = "The user's team now uses MySQL.", "The user's team now uses PlanetScale."
    similarity = float(embeddings.embed(mysql) @ embeddings.embed(planetscale))
    assert embeddings.floor("change") <= similarity < embeddings.floor("neighbour")  # the premise
    old = writing.store(person, mysql, "profile").fact
    result = writing.store(person, planetscale, "profile")
    assert result.judge_calls == 1 and [f.id for f in result.superseded] == [old.id]
    assert list(MemoryFact.objects.for_user(person).live().values_list("text", flat=True)) == [planetscale]


def test_a_move_replaces_the_old_home_and_leaves_the_job_alone(org):
    # "lives in Porto now" reaches "works as a nurse" only through the lower floor (MiniLM: 0.35),
    # and the model alone called that pair CONTRADICTS: the nurse fact disappeared from recall.
    person = sessions.get_or_create_user(org, "ext-1")
    lisbon = writing.store(person, "The user lives in Lisbon.", "profile").fact
    nurse = writing.store(person, "The user works as a nurse at the city hospital.", "profile").fact
    result = writing.store(person, "The user lives in Porto now.", "profile")
    assert result.judge_calls == 1 and {n for n, _, _ in result.verdicts} == {lisbon.id, nurse.id}
    assert [f.id for f in result.superseded] == [lisbon.id]
    live = set(MemoryFact.objects.for_user(person).live().values_list("text", flat=True))
    assert live == {"The user works as a nurse at the city hospital.", "The user lives in Porto now."}


@pytest.mark.parametrize(
    "text, which",
    [
        ("The user's team now uses PlanetScale.", "change"),
        ("The user no longer eats meat.", "change"),
        ("The user doesn't drink coffee anymore.", "change"),
        ("The user moved to Denver.", "change"),
        ("The user knows Rust well.", "neighbour"),
        ("The user is cooking shawarma right now.", "neighbour"),
        ("The user's team uses Postgres.", "neighbour"),
    ],
)
def test_only_a_fact_that_announces_a_change_gets_the_lower_floor(text, which):
    assert writing.neighbour_floor(text) == embeddings.floor(which)
    assert embeddings.floor("change") < embeddings.floor("neighbour")


def test_run_counts_its_verdict_calls(org, scripted):
    run_session(org, scripted, "We're on Postgres.", [(POSTGRES, "profile")])
    scripted.verdict_map = {"postgresql": "CONTRADICTS"}
    session = run_session(
        org,
        scripted,
        "We moved to PlanetScale; I like dark mode.",
        [(PLANETSCALE, "profile"), ("The user prefers dark mode in every editor.", "preference")],
    )
    assert session.extraction_runs.get().verdict_calls == 1


def test_independent_facts_both_stay_live(org, scripted):
    run_session(org, scripted, "We use Postgres.", [("The user's team uses Postgres.", "profile")])
    run_session(org, scripted, "We use Redis.", [("The user's team uses Redis.", "profile")])
    assert MemoryFact.objects.live().count() == 2


@pytest.mark.parametrize(
    "old, new, verdict",
    [
        ("The user's team uses Postgres.", "The user's team uses Redis.", "INDEPENDENT"),
        (POSTGRES, PLANETSCALE, "CONTRADICTS"),
        ("The user prefers tabs.", "The user prefers tabs.", "DUPLICATE"),
        ("The user lives in Lisbon.", "The user lives in Berlin.", "CONTRADICTS"),
        ("The user's team uses Postgres.", "The user's team now uses PlanetScale.", "CONTRADICTS"),
        ("The user likes Rust.", "The user does not like Rust.", "CONTRADICTS"),
        ("The user is a backend engineer.", "The user has two cats.", "INDEPENDENT"),
        ("The user is a parent.", "The user is a backend engineer.", "INDEPENDENT"),
        ("The user's editor is Vim.", "The user's editor is Neovim.", "CONTRADICTS"),
    ],
)
def test_offline_verdicts_are_strict(old, new, verdict):
    assert offline.classify(old, new) == verdict


# --- a person's own correction stands ----------------------------------------------------------


def _corrected(org, scripted):
    run_session(org, scripted, "We're on Postgres.", [(POSTGRES, "profile")])
    extracted = MemoryFact.objects.get()
    return writing.correct_fact(extracted, "The user's database is MySQL.", "profile", actor_user=extracted.user).fact


def test_extracted_fact_without_a_newer_statement_cannot_override_a_correction(org, scripted, travel):
    person = sessions.get_or_create_user(org, "ext-1")
    first = writing.store(person, POSTGRES, "profile", judge=scripted.verdicts)
    # A session whose user last spoke before the correction, and which ends after it.
    session = sessions.open_session(org, person)
    sessions.add_turns(session, [("user", "We're on Postgres.")])
    travel(timedelta(minutes=5))
    correction = writing.correct_fact(first.fact, "The user's database is MySQL.", "profile", actor_user=person).fact
    travel(timedelta(minutes=30))
    sessions.end_session(session)
    scripted.extract_answer = {"facts": [{"text": POSTGRES, "kind": "profile"}]}
    scripted.verdict_map = {"mysql": "CONTRADICTS"}
    run = extraction.extract_session(session.id)

    correction.refresh_from_db()
    assert run.status == "succeeded" and correction.superseded_at is None and correction.origin == "user"
    assert [f.text for f in MemoryFact.objects.live()] == ["The user's database is MySQL."]
    assert MemoryFact.objects.filter(text=POSTGRES).count() == 1  # only the original, superseded


def test_a_newer_statement_by_the_user_does_replace_their_correction(org, scripted, travel):
    correction = _corrected(org, scripted)
    travel(timedelta(days=30))
    scripted.verdict_map = {"mysql": "CONTRADICTS"}
    session = run_session(org, scripted, "We migrated to PlanetScale.", [(PLANETSCALE, "profile")])
    correction.refresh_from_db()
    new = MemoryFact.objects.get(text=PLANETSCALE)
    assert correction.superseded_by_id == new.id and new.source_session_id == session.id
    assert [f.text for f in MemoryFact.objects.live()] == [PLANETSCALE]


def test_restating_a_correction_confirms_it(org, scripted, travel):
    correction = _corrected(org, scripted)
    travel(timedelta(days=1))
    scripted.verdict_map = {"mysql": "DUPLICATE"}
    run_session(org, scripted, "We're on MySQL.", [("The user's team runs MySQL.", "profile")])
    correction.refresh_from_db()
    assert correction.superseded_at is None and correction.confirmation_count == 2
    assert MemoryFact.objects.live().count() == 1


def test_deleting_a_fact_removes_its_text_from_run_output_and_cached_blocks(api, scripted):
    """Deletion is for real: the text leaves the raw model output and the session's memory block too."""
    from memoryapp.models import ExtractionRun

    sid = api.post("/v1/sessions", {"user": "ann"}).json()["id"]
    api.post(f"/v1/sessions/{sid}/turns", {"turns": [{"role": "user", "content": "I'm training for a marathon."}]})
    secret = "The user is training for a marathon."
    scripted.extract_answer = {"facts": [{"text": secret, "kind": "goal"}]}
    api.post(f"/v1/sessions/{sid}/end")
    extraction.extract_session(sid)
    fact = MemoryFact.objects.get(text=secret)
    later = AgentSession.objects.get(id=api.post("/v1/sessions", {"user": "ann"}).json()["id"])
    assert secret in recall.recall(later, "marathon training plan").block

    writing.delete_fact(fact, actor=FactEvent.Actor.USER)

    assert not MemoryFact.objects.filter(id=fact.id).exists()
    assert secret not in ExtractionRun.objects.get(session_id=sid).raw_output
    later.refresh_from_db()
    assert secret not in later.memory_block
    assert [e.action for e in FactEvent.objects.filter(fact_id=fact.id)] == ["deleted"]

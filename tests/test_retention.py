"""Retention of turns: a session that taught nothing keeps none; sources of live facts are kept;
everything else goes after MEMORY["TURN_RETENTION_DAYS"]."""

from datetime import timedelta

import pytest

from memoryapp import extraction, forgetting, sessions, writing
from memoryapp.backends import ModelUnavailable
from memoryapp.models import Turn

DAYS_31 = timedelta(days=31)


def ended_session(org, user, turns):
    s = sessions.open_session(org, user)
    sessions.add_turns(s, turns)
    sessions.end_session(s)
    return s


def ordinals(session):
    return list(Turn.objects.filter(session=session).values_list("ordinal", flat=True))


@pytest.fixture
def alice(org):
    return sessions.get_or_create_user(org, "alice")


def test_a_session_that_produced_no_facts_keeps_no_turns(org, alice, scripted):
    s = ended_session(org, alice, [("user", "What is the capital of Peru?"), ("assistant", "Lima.")])
    scripted.extract_answer = {"facts": []}
    extraction.extract_session(s.id)
    assert ordinals(s) == []


def test_a_failed_extraction_keeps_the_turns_for_the_retry(org, alice, scripted):
    s = ended_session(org, alice, [("user", "I write everything in British English.")])
    scripted.extract_answer = ModelUnavailable("overloaded")
    extraction.extract_session(s.id)
    assert ordinals(s) == [1]


def test_source_turns_of_live_facts_stay_and_the_rest_go_after_the_period(org, alice, scripted, travel):
    s = ended_session(
        org,
        alice,
        [
            ("user", "I always write in British English, please."),
            ("assistant", "Understood, British spelling from now on."),
            ("user", "Now, what's a good name for a goldfish?"),
        ],
    )
    scripted.extract_answer = {"facts": [{"text": "The user writes in British English.", "kind": "preference"}]}
    extraction.extract_session(s.id)
    assert ordinals(s) == [1, 2, 3]  # kept while young
    assert forgetting.apply_retention() == 0

    travel(DAYS_31)
    deleted = forgetting.apply_retention()

    assert deleted == 2
    assert ordinals(s) == [1]  # the user turn the live fact came from
    assert Turn.objects.get(session=s, ordinal=1).content.startswith("I always write")


def test_turns_go_once_their_fact_is_no_longer_live(org, alice, scripted, travel):
    s = ended_session(org, alice, [("user", "My editor is Vim.")])
    scripted.extract_answer = {"facts": [{"text": "The user's editor is Vim.", "kind": "preference"}]}
    extraction.extract_session(s.id)
    fact = s.source_of.get()
    travel(DAYS_31)
    forgetting.apply_retention()
    assert ordinals(s) == [1]

    # A correction carries the provenance over: the turn is still the source of a live fact.
    new = writing.correct_fact(fact, "The user's editor is Helix.", "preference", actor_user=alice).fact
    forgetting.apply_retention()
    assert ordinals(s) == [1]

    writing.delete_fact(new, actor="user", actor_user=alice)
    forgetting.apply_retention()
    assert ordinals(s) == []


def test_turns_of_a_session_still_waiting_for_extraction_are_kept(org, alice, travel):
    s = ended_session(org, alice, [("user", "I am vegetarian.")])  # ended, extraction queued
    travel(DAYS_31)
    assert forgetting.apply_retention() == 0
    assert ordinals(s) == [1]


def test_retention_walks_in_batches(org, alice, scripted, travel):
    scripted.extract_answer = ModelUnavailable("down")  # failed runs keep their turns
    for i in range(5):
        s = ended_session(org, alice, [("user", f"Question {i}"), ("assistant", f"Answer {i}")])
        extraction.extract_session(s.id)
    travel(DAYS_31)
    assert forgetting.apply_retention(batch=3) == 10
    assert not Turn.objects.exists()

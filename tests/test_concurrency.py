"""Writes for one user are serialised: two sessions ending together never duplicate or double-supersede."""

import threading
import time

import pytest
from django.test import override_settings

from memoryapp import backends, extraction, sessions, writing
from memoryapp.models import FactEvent, MemoryFact
from tests.conftest import in_thread, wait_for

POSTGRES = "The user's database is PostgreSQL."
PLANETSCALE = "The user's database is PlanetScale."


class InLockstep(backends.ScriptedBackend):
    """Scripted answers, but every extraction waits until all of them have reached the model call,
    so the writes that follow really do race."""

    def __init__(self, parties, **kwargs):
        super().__init__(**kwargs)
        self.barrier = threading.Barrier(parties)

    def extract(self, text):
        self.barrier.wait(timeout=20)
        return super().extract(text)


def two_ended_sessions(org, said):
    person = sessions.get_or_create_user(org, "ext-1")
    out = []
    for _ in range(2):
        session = sessions.open_session(org, person)
        sessions.add_turns(session, [("user", said)])
        sessions.end_session(session)
        out.append(session)
    return person, out


def extract_concurrently(session_ids):
    results = {}
    threads = [in_thread(lambda sid=sid: extraction.extract_session(sid), results, sid) for sid in session_ids]
    for t in threads:
        t.join(timeout=60)
    assert [r for r in results.values() if isinstance(r, BaseException)] == []


@pytest.mark.django_db(transaction=True)
def test_same_fact_from_two_sessions_at_once_is_one_row(org):
    backend = InLockstep(
        2, extract={"facts": [{"text": POSTGRES, "kind": "profile"}]}, verdicts={"postgresql": "DUPLICATE"}
    )
    with override_settings(EXTRACTION_BACKEND=backend):
        _, both = two_ended_sessions(org, "We're on Postgres.")
        extract_concurrently([s.id for s in both])
    fact = MemoryFact.objects.get()
    assert fact.text == POSTGRES and fact.confirmation_count == 2
    assert sorted(FactEvent.objects.values_list("action", flat=True)) == ["confirmed", "created"]
    assert {s.extraction_runs.get().status for s in both} == {"succeeded"}


@pytest.mark.django_db(transaction=True)
def test_a_fact_is_never_superseded_twice(org):
    person = sessions.get_or_create_user(org, "ext-1")
    old = writing.store(person, POSTGRES, "profile", judge=backends.ScriptedBackend().verdicts).fact
    backend = InLockstep(
        2,
        extract={"facts": [{"text": PLANETSCALE, "kind": "profile"}]},
        verdicts={"postgresql": "CONTRADICTS", "planetscale": "DUPLICATE"},
    )
    with override_settings(EXTRACTION_BACKEND=backend):
        _, both = two_ended_sessions(org, "We migrated to PlanetScale.")
        extract_concurrently([s.id for s in both])

    new = MemoryFact.objects.get(text=PLANETSCALE)  # one row, not two
    old.refresh_from_db()
    assert old.superseded_by_id == new.id and new.superseded_at is None and new.confirmation_count == 2
    assert FactEvent.objects.filter(fact_id=old.id, action="superseded").count() == 1
    assert list(MemoryFact.objects.live().values_list("text", flat=True)) == [PLANETSCALE]


@pytest.mark.slow
@pytest.mark.queue
@pytest.mark.django_db(transaction=True)
def test_two_real_workers_ending_two_sessions_of_one_user(api, celery_workers):
    celery_workers(2)
    ids = []
    for _ in range(2):
        sid = api.post("/v1/sessions", {"user": "ext-twins"}).json()["id"]
        api.post(
            f"/v1/sessions/{sid}/turns", {"turns": [{"role": "user", "content": "I use Neovim. I live in Porto."}]}
        )
        ids.append(sid)
    for sid in ids:  # back to back: both workers pick one up at the same moment
        assert api.post(f"/v1/sessions/{sid}/end").status_code == 202

    wait_for(
        lambda: all(api.get(f"/v1/sessions/{sid}").json()["extraction_status"] == "done" for sid in ids),
        message="both extractions to finish",
    )
    live = sorted(MemoryFact.objects.live().values_list("text", "confirmation_count"))
    assert live == [("The user lives in Porto.", 2), ("The user uses Neovim.", 2)]
    assert MemoryFact.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_as_many_agents_as_judge_attempts_racing_for_a_new_person_leave_one_live_value(org):
    """Six agents tell a new person's memory six home cities at once: each is judged, one city stays live."""
    person = sessions.get_or_create_user(org, "racer")
    scripted = backends.ScriptedBackend(verdicts={"home city": "CONTRADICTS"})
    cities = ["Lisbon", "Oslo", "Quito", "Porto", "Lyon", "Turin"]  # as many as writing.JUDGE_ATTEMPTS
    barrier = threading.Barrier(len(cities))

    def slow_judge(new_text, old_texts):
        time.sleep(0.05)  # the model thinking: long enough for the others to write meanwhile
        return scripted.verdicts(new_text, old_texts)

    def write(city):
        barrier.wait(timeout=20)
        return writing.store(person, f"The user's home city is {city}.", "profile", judge=slow_judge)

    results = {}
    threads = [in_thread(lambda c=c: write(c), results, c) for c in cities]
    for t in threads:
        t.join(timeout=60)

    assert [r for r in results.values() if isinstance(r, BaseException)] == []
    mine = MemoryFact.objects.for_user(person)
    assert mine.live().count() == 1, list(mine.live().values_list("text", flat=True))
    assert mine.filter(superseded_by__isnull=False).count() == len(cities) - 1  # replaced, none dropped
    assert not FactEvent.objects.filter(reason__contains="unjudged").exists()

"""Session end: explicit, idle, capped; the sweeper claims each session exactly once."""

import threading
from datetime import timedelta

import pytest
from django.db import connection

from memoryapp import extraction, sessions, tasks
from memoryapp.models import AgentSession, Turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def enqueued(monkeypatch):
    """Session ids handed to the broker (thread-safe); nothing is really published."""
    ids, lock = [], threading.Lock()

    def fake_delay(session_id, user_id=None):
        with lock:
            ids.append(session_id)

    monkeypatch.setattr(tasks.extract_session, "delay", fake_delay)
    return ids


def open_with_turn(org, user="ext-1", memory="on"):
    session = sessions.open_session(org, sessions.get_or_create_user(org, user), memory=memory)
    sessions.add_turns(session, [("user", "I prefer tabs.")])
    return session


def test_explicit_end(org, enqueued, django_capture_on_commit_callbacks):
    session = open_with_turn(org)
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions.end_session(session) is True
        assert sessions.end_session(session) is False
    session.refresh_from_db()
    assert session.end_reason == "explicit" and enqueued == [str(session.id)]


def test_thirty_idle_minutes_end_a_session(org, enqueued, django_capture_on_commit_callbacks, travel):
    session = open_with_turn(org)
    travel(timedelta(minutes=29))
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions.sweep()["ended"] == 0
    assert AgentSession.objects.get(id=session.id).ended_at is None
    travel(timedelta(minutes=2))
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions.sweep()["ended"] == 1
    session.refresh_from_db()
    assert (session.end_reason, session.extraction_status) == ("idle", "queued")
    assert enqueued == [str(session.id)]


def test_a_new_turn_restarts_the_idle_window(org, enqueued, django_capture_on_commit_callbacks, travel):
    session = open_with_turn(org)
    travel(timedelta(minutes=25))
    sessions.add_turns(session, [("user", "still here")])
    travel(timedelta(minutes=25))
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions.sweep()["ended"] == 0
    assert AgentSession.objects.get(id=session.id).ended_at is None


def test_eight_hours_cap_a_busy_session(org, enqueued, django_capture_on_commit_callbacks, travel):
    session = open_with_turn(org)
    for _ in range(7 * 3):  # a turn every 20 minutes for 7 hours: never idle
        travel(timedelta(minutes=20))
        sessions.add_turns(session, [("user", "more")])
        with django_capture_on_commit_callbacks(execute=True):
            sessions.sweep()
    assert AgentSession.objects.get(id=session.id).ended_at is None
    travel(timedelta(hours=1))
    sessions.add_turns(session, [("user", "one more")])
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions.sweep()["ended"] == 1
    assert AgentSession.objects.get(id=session.id).end_reason == "cap"
    with pytest.raises(sessions.SessionEnded):
        sessions.add_turns(session, [("user", "too late")])


def test_windows_are_configurable(org, settings, enqueued, django_capture_on_commit_callbacks, travel):
    settings.MEMORY = {**settings.MEMORY, "INACTIVITY_MINUTES": 5, "HARD_CAP_HOURS": 1}
    idle, busy = open_with_turn(org, "a"), open_with_turn(org, "b")
    travel(timedelta(minutes=4))
    sessions.add_turns(busy, [("user", "x")])
    travel(timedelta(minutes=2))
    with django_capture_on_commit_callbacks(execute=True):
        sessions.sweep()
    assert AgentSession.objects.get(id=idle.id).end_reason == "idle"
    assert AgentSession.objects.get(id=busy.id).ended_at is None
    for _ in range(14):
        travel(timedelta(minutes=4))
        sessions.add_turns(busy, [("user", "x")])
    with django_capture_on_commit_callbacks(execute=True):
        sessions.sweep()
    assert AgentSession.objects.get(id=busy.id).end_reason == "cap"


def test_idle_memory_off_session_is_skipped_and_its_turns_go(org, enqueued, django_capture_on_commit_callbacks, travel):
    session = open_with_turn(org, memory="off")
    travel(timedelta(minutes=31))
    with django_capture_on_commit_callbacks(execute=True):
        sessions.sweep()
    session.refresh_from_db()
    assert (session.end_reason, session.extraction_status) == ("idle", "skipped")
    assert not Turn.objects.filter(session=session).exists() and enqueued == []


def test_lost_queue_message_is_re_enqueued_after_the_lease(org, enqueued, django_capture_on_commit_callbacks, travel):
    session = open_with_turn(org)
    with django_capture_on_commit_callbacks(execute=False):
        sessions.end_session(session)  # the broker never got it
    assert enqueued == []
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions.sweep()["enqueued"] == 0  # still within the lease
    travel(sessions.QUEUE_LEASE + timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions.sweep()["enqueued"] == 1
        assert sessions.sweep()["enqueued"] == 0  # a fresh lease
    assert enqueued == [str(session.id)]


def test_broker_down_never_breaks_the_end(org, monkeypatch, django_capture_on_commit_callbacks):
    from kombu.exceptions import OperationalError

    def refuse(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(tasks.extract_session, "apply_async", refuse)
    session = open_with_turn(org)
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions.end_session(session) is True
    assert AgentSession.objects.get(id=session.id).extraction_status == "queued"  # the sweeper will retry


def test_sweep_task_is_thin(org, enqueued, django_capture_on_commit_callbacks, travel):
    open_with_turn(org)
    travel(timedelta(hours=9))
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.sweep_sessions() == {"ended": 1, "enqueued": 0}


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_sweeps_claim_each_session_exactly_once(org, enqueued, travel):
    ids = {str(open_with_turn(org, f"user-{i}").id) for i in range(30)}
    travel(timedelta(minutes=45))
    barrier = threading.Barrier(3)
    results, errors = [], []

    def sweeper():
        try:
            barrier.wait(timeout=10)
            for _ in range(3):
                results.append(sessions.sweep(batch=1000)["ended"])
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweeper) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert sum(results) == 30
    assert sorted(enqueued) == sorted(ids)  # each session queued once, by exactly one sweeper
    assert AgentSession.objects.filter(ended_at__isnull=False, end_reason="idle").count() == 30


@pytest.mark.django_db(transaction=True)
def test_concurrent_explicit_ends_of_one_session_enqueue_once(org, enqueued):
    session = open_with_turn(org)
    barrier = threading.Barrier(4)
    claimed = []

    def ender():
        try:
            barrier.wait(timeout=10)
            claimed.append(sessions.end_session(AgentSession(id=session.id)))
        finally:
            connection.close()

    threads = [threading.Thread(target=ender) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(claimed) == [False, False, False, True] and enqueued == [str(session.id)]
    assert extraction.extract_session(session.id) is not None

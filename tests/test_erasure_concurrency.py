"""An extraction running while the person is erased must not resurrect anything (threads, real connections)."""

import threading
import time

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings

from memoryapp import backends, erasure, extraction, sessions
from memoryapp.models import AgentSession, ExtractionRun, MemoryFact, Turn
from tests.conftest import in_thread

pytestmark = pytest.mark.django_db(transaction=True)

FACT = "The user's tortoise is named Quimby Brackenfold."


class SlowModel(backends.ScriptedBackend):
    """Answers only when the test says so, like a model call that takes a while."""

    def __init__(self):
        super().__init__(extract={"facts": [{"text": FACT, "kind": "profile"}]})
        self.called = threading.Event()
        self.release = threading.Event()

    def extract(self, text):
        self.called.set()
        assert self.release.wait(30)
        return super().extract(text)


def wait_until_blocked_on_a_lock(timeout=20):
    """Until another connection of this test database waits on a row or advisory lock."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if cur.fetchone()[0]:
                return
        time.sleep(0.05)  # polling real time for another thread, not the app clock
    raise AssertionError("nothing ever waited on a lock")


def test_erasure_while_the_extraction_model_is_thinking_answers_at_once_and_nothing_comes_back(api):
    sid = api.post("/v1/sessions", {"user": "tess"}).json()["id"]
    said = [{"role": "user", "content": "My tortoise is Quimby Brackenfold."}]
    api.post(f"/v1/sessions/{sid}/turns", {"turns": said})
    assert api.post(f"/v1/sessions/{sid}/end").status_code == 202
    model = SlowModel()
    results = {}

    with override_settings(EXTRACTION_BACKEND=model):
        worker = in_thread(lambda: extraction.extract_session(sid), results, "run")
        try:
            assert model.called.wait(20)  # the worker is inside the model call
            started = time.monotonic()
            response = api.delete("/v1/users/tess")
            took = time.monotonic() - started
        finally:
            model.release.set()  # the model answers only after the erasure has finished
            worker.join(30)

    assert response.status_code == 202, response.content
    assert took < 5, f"the erasure waited {took:.1f}s for a model call"
    assert response.json()["counts"]["extraction_runs"] == 1  # the running attempt was visible, and erased
    assert results["run"] is None  # the extraction found its session gone and wrote nothing
    assert not MemoryFact.objects.filter(text=FACT).exists()
    assert not AgentSession.objects.exists() and not Turn.objects.exists() and not ExtractionRun.objects.exists()

    # The same task delivered again (a retry) finds nothing and writes nothing.
    with override_settings(
        EXTRACTION_BACKEND=backends.ScriptedBackend(extract={"facts": [{"text": FACT, "kind": "profile"}]})
    ):
        assert extraction.extract_session(sid) is None
    assert not MemoryFact.objects.exists() and not ExtractionRun.objects.exists()


def test_extraction_starting_while_erasure_holds_the_session_writes_nothing(org):
    user = sessions.get_or_create_user(org, "uma")
    session = sessions.open_session(org, user)
    sessions.add_turns(session, [("user", "My tortoise is Quimby Brackenfold.")])
    sessions.end_session(session)
    results = {}
    erasing = threading.Event()
    finish = threading.Event()
    real_lock = erasure.writing.lock_user

    def slow_lock(user_id):
        # Pause the erasure after it has taken the session locks, before it deletes anything.
        real_lock(user_id)
        erasing.set()
        assert finish.wait(30)

    erasure.writing.lock_user = slow_lock
    try:
        eraser = in_thread(lambda: erasure.erase_user(user, requested_via="self"), results, "receipt")
        assert erasing.wait(20)
        with override_settings(
            EXTRACTION_BACKEND=backends.ScriptedBackend(extract={"facts": [{"text": FACT, "kind": "profile"}]})
        ):
            worker = in_thread(lambda: extraction.extract_session(session.id), results, "run")
            # The claim (an UPDATE of the session row) waits for the erasure's short transaction...
            wait_until_blocked_on_a_lock()
            finish.set()
            eraser.join(30)
            worker.join(30)
    finally:
        finish.set()
        erasure.writing.lock_user = real_lock

    # ...and then finds the session gone: nothing claimed, nothing written.
    assert results["run"] is None
    assert isinstance(results["receipt"], erasure.ErasureReceipt), results["receipt"]
    assert not MemoryFact.objects.exists() and not ExtractionRun.objects.exists() and not AgentSession.objects.exists()


def test_two_admins_erasing_themselves_at_once_leave_the_org_one_admin(org, make_user, monkeypatch):
    """Each admin alone sees another admin; without the org lock both erasures would pass the check."""
    first, second = make_user("ann", org, role="admin"), make_user("ben", org, role="admin")
    checked_first, release_first = threading.Event(), threading.Event()
    original = erasure._refuse_last_admin

    def check_then_linger(user_id):
        original(user_id)
        if user_id == first.id:
            checked_first.set()  # first has passed the check and holds the org's row lock
            assert release_first.wait(30)

    monkeypatch.setattr(erasure, "_refuse_last_admin", check_then_linger)
    results = {}
    t1 = in_thread(lambda: erasure.erase_user(first, requested_via="self"), results, "first")
    assert checked_first.wait(20)
    t2 = in_thread(lambda: erasure.erase_user(second, requested_via="self"), results, "second")
    try:
        wait_until_blocked_on_a_lock()  # the second erasure queues behind the first one's org lock
    finally:
        release_first.set()
    t1.join(30)
    t2.join(30)
    assert not isinstance(results["first"], Exception), results["first"]  # a receipt
    assert isinstance(results["second"], erasure.ErasureRefused), results["second"]
    assert "only admin of Acme" in str(results["second"])
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["ben"]

"""An extraction running while the person is erased must not resurrect anything (threads, real connections)."""

import threading
import time

import pytest
from django.db import connection
from django.test import override_settings

from memoryapp import backends, erasure, extraction, sessions
from memoryapp.models import AgentSession, ExtractionRun, MemoryFact, Turn

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


def in_thread(fn, results, key):
    def target():
        try:
            results[key] = fn()
        except Exception as exc:  # noqa: BLE001 - checked by the test
            results[key] = exc
        finally:
            connection.close()

    t = threading.Thread(target=target)
    t.start()
    return t


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
    raise AssertionError("the erasure never waited for the running extraction")


def test_extraction_running_during_erasure_leaves_nothing_behind(org):
    user = sessions.get_or_create_user(org, "tess")
    session = sessions.open_session(org, user)
    sessions.add_turns(session, [("user", "My tortoise is Quimby Brackenfold.")])
    sessions.end_session(session)
    model = SlowModel()
    results = {}

    with override_settings(EXTRACTION_BACKEND=model):
        worker = in_thread(lambda: extraction.extract_session(session.id), results, "run")
        assert model.called.wait(20)  # the extraction holds the session and is "calling the model"
        eraser = in_thread(lambda: erasure.erase_user(user, requested_via="api"), results, "receipt")
        wait_until_blocked_on_a_lock()  # the erasure waits for it rather than racing it
        model.release.set()
        worker.join(30)
        eraser.join(30)

    assert isinstance(results["run"], ExtractionRun), results["run"]
    receipt = results["receipt"]
    assert isinstance(receipt, erasure.ErasureReceipt), receipt
    assert receipt.counts["facts"] == 1  # what the extraction committed was erased with the rest
    assert not MemoryFact.objects.filter(text=FACT).exists()
    assert not AgentSession.objects.exists() and not Turn.objects.exists() and not ExtractionRun.objects.exists()

    # The same task delivered again (a retry) finds nothing and writes nothing.
    with override_settings(
        EXTRACTION_BACKEND=backends.ScriptedBackend(extract={"facts": [{"text": FACT, "kind": "profile"}]})
    ):
        assert extraction.extract_session(session.id) is None
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
            worker.join(30)
        finish.set()
        eraser.join(30)
    finally:
        erasure.writing.lock_user = real_lock

    assert results["run"] is None  # the session was locked by the erasure: skipped, nothing written
    assert isinstance(results["receipt"], erasure.ErasureReceipt), results["receipt"]
    assert not MemoryFact.objects.exists() and not ExtractionRun.objects.exists() and not AgentSession.objects.exists()

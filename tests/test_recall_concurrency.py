"""A recall and a deletion at once (threads, separate connections): a deleted fact's text never lands in a block.

The recall log names facts without a foreign key, so the owner's write lock is what keeps them apart.
"""

import threading

import pytest
from django.db import DatabaseError, transaction

from memoryapp import embeddings, recall, sessions, writing
from memoryapp.models import AgentSession, FactEvent, MemoryFact, RecallLog
from tests.conftest import in_thread

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "The user is being treated for an illness."


@pytest.fixture
def alice(org):
    user = sessions.get_or_create_user(org, "alice")
    for text, kind in ((SECRET, "profile"), ("The user is a data engineer.", "profile")):
        MemoryFact.objects.create(
            user=user, text=text, kind=kind, embedding=embeddings.embed(text), embedding_model=embeddings.model_name()
        )
    return user


def _delete(user):
    fact = MemoryFact.objects.get(user=user, text=SECRET)
    return writing.delete_fact(fact, actor=FactEvent.Actor.USER, actor_user=user)


def test_a_fact_deleted_while_a_recall_is_building_its_block_waits_then_leaves_no_trace(org, alice, monkeypatch):
    session = sessions.open_session(org, alice)
    chosen, go = threading.Event(), threading.Event()
    render = recall.render

    def slow_render(*args, **kwargs):
        chosen.set()  # the facts are chosen; the block is not stored yet
        assert go.wait(30)
        return render(*args, **kwargs)

    monkeypatch.setattr(recall, "render", slow_render)
    results = {}
    recalling = in_thread(lambda: recall.recall(session, "hi"), results, "recall")
    assert chosen.wait(30)
    deleting = in_thread(lambda: _delete(alice), results, "delete")
    deleting.join(0.5)
    assert deleting.is_alive(), "the deletion did not wait for the recall in progress"

    go.set()
    recalling.join(30)
    deleting.join(30)
    assert SECRET in results["recall"].block  # the recall was served with what was live when it began
    assert results["delete"] == 1
    stored = AgentSession.objects.get(id=session.id).memory_block
    assert "illness" not in stored and "data engineer" in stored  # scrubbed after the recall stored it
    assert not MemoryFact.objects.filter(text=SECRET).exists()
    assert RecallLog.objects.filter(session=session).count() == 1  # the deleted fact's row went with it


@pytest.mark.parametrize("gives_way", [True, False], ids=["with nothing held", "holding its row, tries used up"])
def test_a_recall_started_during_a_deletion_waits_for_it(org, alice, monkeypatch, gives_way):
    if not gives_way:
        monkeypatch.setattr(recall, "HOLD_ATTEMPTS", 0)  # the rare last attempt: it waits holding its row
    session = sessions.open_session(org, alice)
    locked, go = threading.Event(), threading.Event()

    def deletion_held_open():
        with transaction.atomic():
            writing.lock_user(alice.id)
            locked.set()
            assert go.wait(30)
            return _delete(alice)

    results = {}
    deleting = in_thread(deletion_held_open, results, "delete")
    assert locked.wait(30)
    recalling = in_thread(lambda: recall.recall(session, "hi"), results, "recall")
    recalling.join(0.5)
    assert recalling.is_alive(), "the recall did not wait for the deletion"
    # Giving way, it holds no row: erasure, which takes the session rows before the user's lock, goes on.
    with transaction.atomic():  # NOWAIT: raises if any transaction holds the session's row
        rows = AgentSession.objects.select_for_update(nowait=True).filter(id=session.id).values_list("id")
        if gives_way:
            assert list(rows)
        else:
            with pytest.raises(DatabaseError), transaction.atomic():
                list(rows)

    go.set()
    deleting.join(30)
    recalling.join(30)
    assert results["delete"] == 1
    assert "illness" not in results["recall"].block and "data engineer" in results["recall"].block
    assert "illness" not in AgentSession.objects.get(id=session.id).memory_block

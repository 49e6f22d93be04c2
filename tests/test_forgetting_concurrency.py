"""Two forgetting runs at once (threads, separate database connections): each fact expires once."""

import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from memoryapp import clock, forgetting
from memoryapp.models import AgentSession, FactEvent, ForgettingEntry, MemoryFact, RecallLog
from tests.conftest import in_thread

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def old_facts(travel):
    """50 goals recalled once, 30 of them not confirmed for more than 90 days."""
    user = get_user_model().objects.create(username="dora")
    start = clock.now()
    MemoryFact.objects.bulk_create(
        MemoryFact(
            user=user,
            text=f"The user has goal number {i}.",
            kind="goal",
            embedding_model="none",
            created_at=start + timedelta(minutes=i),
            last_confirmed_at=start + timedelta(minutes=i),
        )
        for i in range(50)
    )
    # Each recalled once, so only staleness applies.
    session = AgentSession.objects.create(user=user)
    RecallLog.objects.bulk_create(
        RecallLog(user=user, session=session, fact=f, tier="relevant", created_at=f.created_at)
        for f in MemoryFact.objects.filter(user=user)
    )
    # Now the first 30 (minutes 0..29) were last confirmed more than 90 days ago.
    travel(timedelta(days=90, minutes=29, seconds=30))
    return user


def test_a_second_run_while_one_is_running_does_nothing(old_facts):
    first_started = threading.Event()
    second_done = threading.Event()
    results = {}

    def progress(examined, total, matched):
        # Hold the first run open (between batches) until the second has tried and returned.
        first_started.set()
        assert second_done.wait(30)

    first = in_thread(lambda: forgetting.run_forgetting(mode="enforce", batch=5, progress=progress), results, "a")
    assert first_started.wait(30)
    second = in_thread(lambda: forgetting.run_forgetting(mode="enforce", batch=5), results, "b")
    second.join(30)
    second_done.set()
    first.join(30)

    assert results["b"] is None
    assert results["a"].matched == 30
    expired = Counter(FactEvent.objects.filter(action="expired").values_list("fact_id", flat=True))
    assert len(expired) == 30 and set(expired.values()) == {1}


def test_two_runs_released_together_expire_each_fact_once(old_facts):
    barrier = threading.Barrier(2)
    results = {}

    def go():
        barrier.wait(30)
        return forgetting.run_forgetting(mode="enforce", batch=1)

    threads = [in_thread(go, results, k) for k in ("a", "b")]
    for t in threads:
        t.join(60)

    runs = [r for r in results.values() if r is not None]
    assert not any(isinstance(r, Exception) for r in runs)
    assert sum(r.matched for r in runs) == 30
    assert MemoryFact.objects.filter(expired_at__isnull=False).count() == 30
    expired = Counter(FactEvent.objects.filter(action="expired").values_list("fact_id", flat=True))
    assert len(expired) == 30 and set(expired.values()) == {1}
    assert ForgettingEntry.objects.filter(applied=True).count() == 30

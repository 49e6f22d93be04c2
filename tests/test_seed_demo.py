"""The demo data shows what the product promises: a replaced fact is replaced, not left beside its successor."""

import io

from django.contrib.auth import get_user_model
from django.core.management import call_command

from memoryapp.models import MemoryFact


def test_the_demo_replaces_redis_with_valkey_and_leaves_no_stale_stack_live(db):
    call_command("seed_demo", stdout=io.StringIO())
    demo = get_user_model().objects.get(username="demo")
    facts = MemoryFact.objects.for_user(demo)
    live = list(facts.live().values_list("text", flat=True))
    assert len([text for text in live if "Valkey" in text]) == 1, live  # one wording of the change
    assert not [text for text in live if "Redis" in text and "Valkey" not in text], live
    replaced = facts.filter(text__icontains="Redis", superseded_at__isnull=False).exclude(text__icontains="Valkey")
    assert replaced.count() == 1 and "Valkey" in replaced.get().superseded_by.text

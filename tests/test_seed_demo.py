"""The demo data shows what the product promises: a replaced fact is replaced, not left beside its successor."""

import io
import re
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management import call_command

from memoryapp import db as db_module
from memoryapp.management.commands import seed_demo
from memoryapp.models import MemoryFact
from tests.conftest import demo_seeding


def test_the_demo_replaces_redis_with_valkey_and_leaves_no_stale_stack_live(db):
    call_command("seed_demo", stdout=io.StringIO())
    demo = get_user_model().objects.get(username="demo")
    facts = MemoryFact.objects.for_user(demo)
    live = list(facts.live().values_list("text", flat=True))
    assert len([text for text in live if "Valkey" in text]) == 1, live  # one wording of the change
    assert not [text for text in live if "Redis" in text and "Valkey" not in text], live
    replaced = facts.filter(text__icontains="Redis", superseded_at__isnull=False).exclude(text__icontains="Valkey")
    assert replaced.count() == 1 and "Valkey" in replaced.get().superseded_by.text


def test_seeding_the_demo_in_a_test_leaves_the_checkouts_data_folder_alone(db):
    """`make test` must not replace the demo key a developer's `make run` printed (issue 40)."""
    checkout_key = Path(__file__).resolve().parent.parent / ".data" / "demo-api-key"
    before = checkout_key.read_bytes() if checkout_key.exists() else None
    out = io.StringIO()
    with demo_seeding():  # no other worker's seed replaces the key file before it is read
        call_command("seed_demo", stdout=out)
        printed_key = seed_demo.KEY_FILE.read_text().strip()
    assert (checkout_key.read_bytes() if checkout_key.exists() else None) == before
    # The key went to the test run's own data folder, and it is the key the command printed.
    assert seed_demo.KEY_FILE.parent == db_module.DATA_DIR != checkout_key.parent
    assert printed_key in out.getvalue()
    # The three sign-ins line up: each one's description starts at the same column.
    rows = [line for line in out.getvalue().splitlines() if line.startswith(("  demo /", "  member /", "  staff /"))]
    assert len(rows) == 3 and len({re.match(r"  \S+ / \S+ +", line).end() for line in rows}) == 1

"""bench_stall at smoke size: a stalled verdict call blocks neither a correction nor an erasure."""

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from memoryapp.models import AgentSession, MemoryFact, Organization


@pytest.mark.django_db(transaction=True)
def test_bench_stall_smoke_correction_and_erasure_do_not_wait_for_the_model(tmp_path):
    path = tmp_path / "stall.json"
    out = io.StringIO()
    call_command("bench_stall", "--stall", "3", "--rounds", "1", "--json", str(path), stdout=out)
    assert "correction_seconds: median" in out.getvalue() and "load average" in out.getvalue()
    data = json.loads(path.read_text())
    (round_,) = data["rounds"]
    assert round_["correction_status"] == 302 and round_["correction_kept"] is True
    assert round_["erasure_status"] == 202 and round_["erased_extraction_wrote_nothing"] is True
    assert round_["correction_seconds"] < 3 and round_["erasure_seconds"] < 3  # neither waited the stall out
    assert round_["extraction_status"] == "succeeded" and round_["verdict_calls"] == 2
    assert data["machine"]["cpus"] >= 1
    # Everything it created is gone.
    assert not Organization.objects.filter(slug="bench-stall").exists()
    assert not MemoryFact.objects.exists() and not AgentSession.objects.exists()
    assert not get_user_model().objects.exists()

"""The forgetting benchmark at smoke size: it seeds, runs `forget` in a child process on the same
database, and reports numbers including peak memory."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from memoryapp.models import ForgettingRun, MemoryFact

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_bench_forget_smoke_reports_numbers(tmp_path):
    out = StringIO()
    call_command("bench_forget", "--smoke", "--json", str(tmp_path / "bench.json"), stdout=out)

    numbers = json.loads((tmp_path / "bench.json").read_text())
    assert numbers["facts"] == 2000 and numbers["mode"] == "enforce"
    assert 0 < numbers["matched"] < numbers["examined"] <= 2000
    assert numbers["removed"] > 0 and numbers["peak_rss_mb"] > 0
    assert "peak_rss_mb" in out.getvalue()
    run = ForgettingRun.objects.get()  # the child ran against this (test) database
    assert run.matched == numbers["matched"]
    assert not MemoryFact.objects.exists()  # the synthetic facts are cleaned up

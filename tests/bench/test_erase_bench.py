"""The erasure benchmark at smoke size: the person's sign-in sessions end, everyone else's stay."""

import json
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.core.management import call_command

pytestmark = pytest.mark.django_db(transaction=True)


def test_bench_erase_smoke_ends_only_the_persons_sessions(tmp_path):
    out = StringIO()
    call_command("bench_erase", "--smoke", "--json", str(tmp_path / "bench.json"), stdout=out)

    numbers = json.loads((tmp_path / "bench.json").read_text())
    assert numbers["stored_sessions"] == 2000
    assert numbers["login_sessions_ended"] == 3 and numbers["others_left"] == 2000
    assert numbers["erase_seconds"] > 0 and "erase_seconds" in out.getvalue()
    # The benchmark cleans up after itself.
    assert not Session.objects.exists() and not get_user_model().objects.exists()

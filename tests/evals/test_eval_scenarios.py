"""Every scenario in evals/scenarios/ passes under the scripted backend (part of the CI test command)."""

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

SCENARIOS = Path(__file__).resolve().parents[2] / "evals" / "scenarios"


@pytest.mark.slow
@pytest.mark.django_db
def test_all_repo_scenarios_pass_under_scripted(tmp_path):
    out = io.StringIO()
    report_path = tmp_path / "report.json"
    failed = False
    try:
        call_command("eval_scenarios", str(SCENARIOS), "--json", str(report_path), stdout=out)
    except CommandError:
        failed = True
    if failed:
        pytest.fail("scenarios failed under the scripted backend:\n" + out.getvalue(), pytrace=False)
    report = json.loads(report_path.read_text())
    assert report["summary"]["failed"] == 0
    assert report["summary"]["passed"] >= 30
    assert out.getvalue().rstrip().splitlines()[-1] == f"{report['summary']['passed']} passed, 0 failed"

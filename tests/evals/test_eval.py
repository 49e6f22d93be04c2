"""The evaluation harness: format validation, readable failures, exit codes, metrics and clean state."""

import io
import json
import re
from datetime import timedelta
from pathlib import Path

import httpx2
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evals import harness as evaluation
from memoryapp import clock, extraction, writing
from memoryapp.backends import openai as openai_backend
from memoryapp.models import AgentSession, MemoryFact, Organization, Turn

SCENARIOS = Path(__file__).resolve().parents[2] / "evals" / "scenarios"


def user_turn(text):
    return {"role": "user", "content": text}


def session(user, text, facts, verdicts=None, memory="on"):
    model = {"extract": {"facts": facts}}
    if verdicts:
        model["verdicts"] = verdicts
    return {"session": {"user": user, "memory": memory, "turns": [user_turn(text)]}, "model": model}


DB_CHANGE = {
    "name": "database change",
    "steps": [
        session("ann", "We're on Postgres.", [{"text": "The user's database is PostgreSQL.", "kind": "profile"}]),
        session(
            "ann",
            "We moved to PlanetScale.",
            [{"text": "The user's database is PlanetScale.", "kind": "profile"}],
            verdicts={"postgresql": "CONTRADICTS"},
        ),
        session("ann", "What is a monad?", []),
        {"recall": {"user": "ann", "message": "Which database?"}, "expect": {"contains": ["PlanetScale"]}},
        {"expect": {"user": "ann", "live": {"count": 1}, "superseded": {"contains": ["PostgreSQL"]}}},
    ],
}


def write(tmp_path, name, data):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def run_command(*args):
    """Run eval_scenarios; returns (stdout, failed) where failed means it exited non-zero."""
    out = io.StringIO()
    try:
        call_command("eval_scenarios", *[str(a) for a in args], stdout=out)
    except CommandError as exc:
        assert exc.returncode == 1
        return out.getvalue(), True
    return out.getvalue(), False


# --- the command -----------------------------------------------------------------------


@pytest.mark.django_db
def test_wrong_expectation_fails_readably_and_exits_non_zero(tmp_path):
    wrong = json.loads(json.dumps(DB_CHANGE))
    wrong["name"] = "deliberately wrong"
    wrong["steps"][4]["expect"]["live"] = {"count": 1, "contains": ["PostgreSQL"]}
    wrong["steps"][3]["expect"] = {"excludes": ["PlanetScale"], "empty": True}
    out, failed = run_command(write(tmp_path, "wrong", wrong))

    assert failed
    assert "FAILED deliberately wrong" in out
    assert 'step 5 (expect ann): live contains "PostgreSQL"' in out
    assert 'expected: a live fact containing "PostgreSQL"' in out
    assert 'found:    "The user\'s database is PlanetScale."' in out
    assert 'step 4 (recall ann): block excludes "PlanetScale"' in out
    assert "expected: an empty block" in out
    assert out.rstrip().splitlines()[-1] == "0 passed, 1 failed"


@pytest.mark.django_db
def test_passing_scenario_exits_zero_and_writes_json_metrics(tmp_path):
    report_path = tmp_path / "report.json"
    out, failed = run_command(write(tmp_path, "ok", DB_CHANGE), "--json", report_path)

    assert not failed, out
    assert out.rstrip().splitlines()[-1] == "1 passed, 0 failed"
    report = json.loads(report_path.read_text())
    metrics = report["metrics"]
    # Two facts written over three sessions; one supersession out of two writes.
    assert metrics["sessions"] == 3
    assert metrics["facts_per_session"] == pytest.approx(2 / 3, abs=0.001)
    assert metrics["contradiction_rate_per_100_writes"] == 50.0
    assert metrics["memory_blocks"]["recalls"] == 1
    assert metrics["memory_blocks"]["facts"]["max"] == 1
    assert metrics["memory_blocks"]["chars"]["max"] > len("The user's database is PlanetScale.")
    assert metrics["extraction"] is None  # precision/recall only for real extractors
    assert report["scenarios"][0]["passed"] is True
    assert "facts per session: 0.667" in out


@pytest.mark.django_db
def test_scenarios_leave_no_rows_and_put_the_clock_back(tmp_path):
    data = json.loads(json.dumps(DB_CHANGE))
    data["steps"].insert(2, {"advance": "91d"})
    before = (Organization.objects.count(), MemoryFact.objects.count(), AgentSession.objects.count())
    out, failed = run_command(write(tmp_path, "ok", data))

    assert not failed, out
    assert (Organization.objects.count(), MemoryFact.objects.count(), AgentSession.objects.count()) == before
    assert abs(clock.now() - timezone.now()) < timedelta(seconds=5)


@pytest.mark.django_db
def test_unknown_step_and_unknown_key_are_reported_as_scenario_errors(tmp_path):
    bad_step = {"name": "bad step", "steps": [{"sesion": {"user": "a", "turns": []}}]}
    bad_key = {
        "name": "bad key",
        "steps": [{"expect": {"user": "a", "live": {"count": 0, "contain": ["x"]}}}],
    }
    out, failed = run_command(write(tmp_path, "bad_step", bad_step), write(tmp_path, "bad_key", bad_key))

    assert failed
    assert "unknown step or key 'sesion'" in out
    assert "steps[0].expect.live: unknown key 'contain'" in out
    assert out.rstrip().splitlines()[-1] == "0 passed, 2 failed"


@pytest.mark.django_db
def test_broken_json_file_is_a_failure_not_a_crash(tmp_path):
    out, failed = run_command(write(tmp_path, "broken", '{"name": "x", "steps": ['))
    assert failed
    assert "not valid JSON" in out


def test_session_without_model_is_an_error_only_under_scripted():
    data = {"name": "n", "steps": [{"session": {"user": "a", "turns": [user_turn("hi")]}}]}
    with pytest.raises(evaluation.ScenarioError, match="needs 'model'"):
        evaluation.parse_scenario(data, backend="scripted")
    assert evaluation.parse_scenario(data, backend="offline").steps[0].kind == "session"


@pytest.mark.parametrize(
    "step, message",
    [
        ({"advance": "3 weeks"}, "duration like '91d'"),
        ({"forget": "now"}, "must be one of log, enforce"),
        ({"advance": "1d", "forget": "log"}, "one step type per step"),
        ({"switch": {"user": "a", "memory": "maybe"}}, "must be one of on, off"),
        ({"correct": {"user": "a", "fact": "x", "text": "y"}}, "missing key 'kind'"),
        ({"recall": {"user": "a", "message": "m"}, "expect": {"max_facts": -1}}, "at least 0"),
        ({"recall": {"user": "a", "message": "m"}, "model": {"extract": {}}}, "'model' belongs on a session step"),
        ({"expect": {"user": "a"}}, "nothing to check"),
        ({"approve_org": {"org": "other", "fact": "x"}}, "not this scenario's org"),
    ],
)
def test_invalid_steps_say_what_is_wrong(step, message):
    with pytest.raises(evaluation.ScenarioError, match=message):
        evaluation.parse_scenario({"name": "n", "org": "acme", "steps": [step]}, source="x.json")


@pytest.mark.django_db
def test_k_runs_only_the_named_scenario(tmp_path):
    other = json.loads(json.dumps(DB_CHANGE))
    other["name"] = "something else"
    other["steps"][4]["expect"]["live"]["count"] = 7  # would fail if it ran
    out, failed = run_command(
        write(tmp_path, "a", DB_CHANGE), write(tmp_path, "b", other), "-k", "DATABASE CHANGE", "--backend", "scripted"
    )
    assert not failed, out
    assert out.rstrip().splitlines()[-1] == "1 passed, 0 failed"
    with pytest.raises(CommandError, match="no scenario"):
        call_command("eval_scenarios", str(tmp_path), "-k", "nothing like this", stdout=io.StringIO())


@pytest.mark.django_db
def test_offline_backend_reports_extraction_precision_and_recall(tmp_path):
    data = {
        "name": "offline stack",
        "steps": [
            {"session": {"user": "olly", "turns": [user_turn("I prefer dark mode. What time is it in Tokyo?")]}},
            {"expect": {"user": "olly", "live": {"contains": ["dark mode", "Neovim"]}}},
        ],
    }
    report_path = tmp_path / "r.json"
    out, failed = run_command(write(tmp_path, "off", data), "--backend", "offline", "--json", report_path)

    assert failed  # Neovim was never said, so the offline extractor cannot find it
    extraction_metrics = json.loads(report_path.read_text())["metrics"]["extraction"]
    assert extraction_metrics["expected_facts"] == 2
    assert extraction_metrics["recall"] == 0.5
    assert extraction_metrics["precision"] == 1.0
    assert "extraction precision 1.0" in out


@pytest.mark.django_db
def test_a_crash_inside_a_step_is_reported_and_later_scenarios_still_run(tmp_path, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("recall is broken")

    monkeypatch.setattr(evaluation.recall, "recall", explode)
    crash = json.loads(json.dumps(DB_CHANGE))
    crash["name"] = "crashes"
    fine = {"name": "fine", "steps": [session("bo", "Hi.", []), {"expect": {"user": "bo", "live": {"count": 0}}}]}
    out, failed = run_command(write(tmp_path, "a_crash", crash), write(tmp_path, "b_fine", fine))

    assert failed
    assert "RuntimeError: recall is broken" in out
    assert out.rstrip().splitlines()[-1] == "1 passed, 1 failed"


def _local_model(request):
    """A stand-in for a local OpenAI-compatible server (Ollama): reads the turn, answers like a model."""
    body = json.loads(request.content)
    asked = body["messages"][1]["content"]
    if body["response_format"]["json_schema"]["name"] == "verdicts":
        answer = {"verdicts": ["CONTRADICTS" for line in asked.splitlines() if line[:1].isdigit()]}
    elif "PlanetScale" in asked:
        answer = {"facts": [{"text": "The user's database is PlanetScale.", "kind": "profile", "scope": "personal"}]}
    elif "Postgres" in asked:
        answer = {"facts": [{"text": "The user's database is PostgreSQL.", "kind": "profile", "scope": "personal"}]}
    else:
        answer = {"facts": []}
    message = {"role": "assistant", "content": json.dumps(answer)}
    usage = {"prompt_tokens": 90, "completion_tokens": 20, "total_tokens": 110}
    reply = {"id": "c", "object": "chat.completion", "created": 0, "model": "qwen2.5:7b", "usage": usage}
    reply["choices"] = [{"index": 0, "message": message, "finish_reason": "stop"}]
    return httpx2.Response(200, json=reply)


@pytest.mark.django_db
def test_scenarios_run_against_a_local_openai_compatible_model(tmp_path, settings):
    path = write(tmp_path, "db", DB_CHANGE)
    with pytest.raises(CommandError, match="OPENAI_BASE_URL"):
        call_command("eval_scenarios", str(path), "--backend", "openai", stdout=io.StringIO())

    settings.OPENAI_BASE_URL, settings.OPENAI_API_KEY = "http://ollama.test/v1", "ollama"
    settings.OPENAI_MODEL = "qwen2.5:7b"
    openai_backend.forget_fallbacks()  # this server does structured output: no earlier test's fallback applies
    settings.OPENAI_HTTP_CLIENT = httpx2.Client(transport=httpx2.MockTransport(_local_model))
    report_path = tmp_path / "r.json"
    out, failed = run_command(path, "--backend", "openai", "--json", report_path)
    assert not failed and out.rstrip().splitlines()[-1] == "1 passed, 0 failed"
    # the model's own answers were stored: PostgreSQL superseded by PlanetScale, through the real write path
    assert json.loads(report_path.read_text())["metrics"]["supersessions"] == 1


# Measured with this backend (docs/benchmarks.md): 31 of the 38 pass; the two applicable
# failures need an org proposal read as a personal fact, or a fact no turn states.
OFFLINE_SCENARIO_FLOOR = 31


@pytest.mark.slow
@pytest.mark.django_db
def test_the_keyless_backend_passes_the_repo_scenarios_it_passed_when_measured():
    out, _ = run_command(SCENARIOS, "--backend", "offline")
    last = out.rstrip().splitlines()[-1]
    passed = int(re.match(r"(\d+) passed", last)[1])
    assert passed >= OFFLINE_SCENARIO_FLOOR, last
    assert "FAILED a chain of changes keeps every old version" not in out  # "now uses PlanetScale" supersedes
    assert "FAILED recall never injects more than 20 facts" not in out  # 25 team rules, none lost to a verdict
    assert "FAILED one home at a time" not in out  # "lives in Hanoi" replaces "lives in Cairo", 0.45 apart


# --- the scenarios have teeth: break an invariant and a repo scenario fails ----------


def run_repo(name):
    scenario = next(s for s in evaluation.load([SCENARIOS])[0] if s.name == name)
    return evaluation.run_scenario(scenario)


@pytest.mark.django_db
def test_tool_turn_poisoning_scenario_catches_a_leaky_transcript(monkeypatch):
    original = extraction.transcript

    def every_turn(user_turns):
        if not user_turns:
            return ""
        return original(list(Turn.objects.filter(session_id=user_turns[0].session_id).order_by("ordinal")))

    monkeypatch.setattr(extraction, "transcript", every_turn)
    result = run_repo("a web page read by a tool never reaches the extractor")

    assert not result.passed
    assert any("never reached the extraction model" in f.check for f in result.failures)


@pytest.mark.django_db
def test_supersession_scenario_catches_a_write_path_that_forgets_to_supersede(monkeypatch):
    monkeypatch.setattr(writing, "supersede", lambda *args, **kwargs: False)
    result = run_repo("Postgres in April, PlanetScale in September: supersession, not deletion")

    assert not result.passed
    checks = {f.check for f in result.failures}
    assert "live count" in checks and 'superseded contains "Postgres"' in checks


@pytest.mark.django_db
def test_memory_switch_scenario_catches_recall_that_ignores_the_switch(monkeypatch):
    monkeypatch.setattr(evaluation.recall.writing, "memory_allowed", lambda session: True)
    result = run_repo("the memory switch: off means nothing recalled or extracted; on brings memory back")

    assert not result.passed
    assert any(f.check == "block is empty" for f in result.failures)


# --- the parser on arbitrary input ---------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=30,
)
STEP_KEYS = [*evaluation.STEP_TYPES, "model", "user", "turns", "message", "live", "contains", "extract", "fact"]


def _repo_scenarios():
    return [json.loads(p.read_text()) for p in sorted(SCENARIOS.glob("*.json"))]


@st.composite
def mutated_scenarios(draw):
    """A repo scenario with one value somewhere inside replaced, or one key added or removed."""
    data = json.loads(json.dumps(draw(st.sampled_from(_repo_scenarios()))))
    node = data
    for _ in range(draw(st.integers(0, 6))):
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        children = [(k, v) for k, v in children if isinstance(v, dict | list) and v]
        if not children:
            break
        node = draw(st.sampled_from(children))[1]
    action = draw(st.sampled_from(["replace", "add", "remove"]))
    if isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node)))
        if action == "remove":
            del node[key]
        elif action == "add":
            node[draw(st.sampled_from(STEP_KEYS) | st.text(max_size=8))] = draw(json_values)
        else:
            node[key] = draw(json_values)
    elif isinstance(node, list) and node:
        index = draw(st.integers(0, len(node) - 1))
        if action == "remove":
            del node[index]
        else:
            node[index] = draw(json_values)
    return data


def _parse_or_scenario_error(data, backend):
    try:
        scenario = evaluation.parse_scenario(data, source="fuzz.json", backend=backend)
    except evaluation.ScenarioError as exc:
        assert str(exc).startswith("fuzz.json: ")
        return None
    assert isinstance(scenario, evaluation.Scenario) and scenario.steps
    return scenario


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=json_values, backend=st.sampled_from(evaluation.BACKENDS))
def test_parser_never_crashes_on_arbitrary_json(data, backend):
    _parse_or_scenario_error(data, backend)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=mutated_scenarios())
def test_parser_never_crashes_on_almost_valid_scenarios(data):
    _parse_or_scenario_error(data, "scripted")


def test_every_repo_scenario_parses():
    scenarios, broken = evaluation.load([SCENARIOS])
    assert broken == []
    assert len(scenarios) >= 30
    assert len({s.name for s in scenarios}) == len(scenarios)


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"name": "n", "steps": [{"expect": {"user": "a", "live": {"contain": ["x"]}}}]},
            "steps[0].expect.live: unknown key 'contain' (allowed: contains, count, excludes)",
        ),
        # found by the fuzz test: a key that looks like one of pydantic's own path tags
        (
            {"name": "n", "steps": [{"erase": {"user": "a"}}], "[": None},
            "the scenario: unknown key '[' (allowed: backends, name, org, steps)",
        ),
        (
            {"name": "n", "steps": [{"expect": {"user": "a", "confirmations": {"Postgres": "2"}}}]},
            "steps[0].expect.confirmations['Postgres']: expected a whole number of at least 0, found a string",
        ),
        (
            {
                "name": "n",
                "steps": [
                    {"session": {"user": "a", "turns": []}, "model": {"extract": {}, "verdicts": {"pg": "MAYBE"}}}
                ],
            },
            "steps[0].model.verdicts['pg']: must be one of CONTRADICTS, DUPLICATE, INDEPENDENT, found 'MAYBE'",
        ),
        (
            {"name": "n", "steps": [{"session": {"user": "a", "turns": [{"role": "bot", "content": "hi"}]}}]},
            "steps[0].session.turns[0].role: must be one of user, assistant, tool, found 'bot'",
        ),
        ({"name": "n", "org": "x" * 41, "steps": [{"erase": {"user": "a"}}]}, "org: at most 40 characters"),
        ({"name": 7, "steps": [{"erase": {"user": "a"}}]}, "name: expected a string, found a number"),
        (
            {"name": "n", "steps": [{"recall": {"user": "a", "message": "m"}, "expect": {"empty": 1}}]},
            "steps[0].expect.empty: expected true or false, found a number",
        ),
    ],
)
def test_scenario_format_errors_name_the_path_and_what_was_found(data, message):
    with pytest.raises(evaluation.ScenarioError) as caught:
        evaluation.parse_scenario(data, source="x.json", backend="offline")
    assert str(caught.value) == f"x.json: {message}"


@pytest.mark.django_db
def test_a_scenario_for_other_backends_is_reported_not_applicable_and_counted_apart(tmp_path):
    model_only = json.loads(json.dumps(DB_CHANGE))
    model_only["name"] = "about a model's answer"
    model_only["backends"] = ["scripted", "anthropic"]
    model_only["steps"][4]["expect"]["live"]["count"] = 7  # would fail if it ran
    report_path = tmp_path / "r.json"
    out, failed = run_command(
        write(tmp_path, "a", DB_CHANGE), write(tmp_path, "b", model_only), "--backend", "offline", "--json", report_path
    )
    summary = json.loads(report_path.read_text())["summary"]
    assert (summary["passed"] + summary["failed"], summary["not_applicable"], summary["total"]) == (1, 1, 2)
    assert "not applicable: about a model's answer (backends: scripted, anthropic)" in out
    assert "not applicable to offline" in out.rstrip().splitlines()[-1]
    # Under a backend it names, the same scenario runs (and fails on its impossible count).
    out, failed = run_command(write(tmp_path, "b", model_only), "--backend", "scripted")
    assert failed and "FAILED about a model's answer" in out


def test_a_scenario_naming_an_unknown_backend_is_a_format_error():
    data = {"name": "n", "backends": ["gpt"], "steps": [{"erase": {"user": "a"}}]}
    with pytest.raises(evaluation.ScenarioError, match=r"backends\[0\]"):
        evaluation.parse_scenario(data, source="x.json")
    with pytest.raises(evaluation.ScenarioError, match="backends"):
        evaluation.parse_scenario({**data, "backends": []}, source="x.json")

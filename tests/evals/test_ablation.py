"""The hand rules' table (memoryapp/backends/rules.py) and `eval_extraction --ablate` on made-up data.

Nothing here reads ../shared: the dialogues are written to a temporary folder."""

import io
import json

import pytest
from django.core.management import call_command

from evals import extraction, training
from evals import verdicts as ve
from memoryapp.backends import offline, rules

UTTERANCES = ["i live in texas .", "do i live in berlin ?", "never suggest aws .", "lol okay ."]


def test_a_rule_switched_off_changes_what_the_user_gets_and_is_back_after():
    assert offline.extract_facts("Never suggest AWS.") == [
        {"text": "The user does not want the assistant to suggest AWS.", "kind": "constraint", "scope": "personal"}
    ]
    assert offline.extract_facts("Do I live in Berlin?") == []  # a question states nothing
    with rules.without(["wish_never", "question"]), rules.watch() as fired:
        assert offline.extract_facts("Never suggest AWS.") == []
        assert [f["text"] for f in offline.extract_facts("Do I live in Berlin?")] == ["The user lives in Berlin."]
    assert not fired & {"wish_never", "question"}
    with rules.watch() as fired:
        assert offline.extract_facts("Never suggest AWS.")  # on again
        assert offline.extract_facts("Do I live in Berlin?") == []
    assert {"wish_never", "question"} <= fired


def test_an_unknown_rule_id_is_refused():
    with pytest.raises(KeyError, match="no rule"), rules.without(["no_such_rule"]):
        pass


def test_every_rule_has_an_id_a_description_and_a_pattern_or_is_code():
    for rule_id, rule in rules.TABLE.items():
        assert rule.id == rule_id and rule.description
        assert getattr(rules.R, rule_id) is rule


def _tiny_dev_datasets(tmp_path):
    """A ConvAI2-shaped valid file whose dev episodes (training._bucket < 15) hold UTTERANCES."""
    dev = [i for i in range(40) if training._bucket(str(i), "ep") < 15][: len(UTTERANCES)]
    lines = []
    for i in range(dev[-1] + 1):
        text = UTTERANCES[dev.index(i)] if i in dev else "lol okay ."
        lines += ["your persona: i have a dog.\t['i', 'have_pet', 'dog']", f"1\t{text}"]
    path = training.convai_file(tmp_path, "valid", "dialogueNLI")
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    gold = tmp_path / "gold.jsonl"
    rows = []
    for text in UTTERANCES:
        states = text.startswith(("i live", "never"))
        facts = ["The user states something."] if states else []
        key = extraction.utterance_key(ve.tidy(text))  # the dialogues are read tidied
        rows.append({"key": key, "split": "dev", "annotators": {"A": facts, "B": facts}, "states_fact": states})
    gold.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return gold


@pytest.mark.django_db
def test_ablate_prints_a_row_for_every_rule(tmp_path):
    gold = _tiny_dev_datasets(tmp_path)
    out, report = io.StringIO(), tmp_path / "ablation.json"
    call_command(
        "eval_extraction",
        "--ablate",
        "--datasets",
        str(tmp_path),
        "--gold",
        str(gold),
        "--pairs",
        "3",
        "--json",
        str(report),
        stdout=out,
        stderr=io.StringIO(),
    )
    result = json.loads(report.read_text())
    assert result["baseline"]["precision"] == 1.0 and result["baseline"]["recall"] == 1.0
    assert set(result["rules"]) == set(rules.TABLE)
    # Without the question rule, "do I live in Berlin?" is taken for a statement: precision falls.
    assert result["rules"]["question"]["without"]["precision"] < 1.0
    assert result["rules"]["wish_never"]["without"]["recall"] < 1.0
    rows = {line.split()[0] for line in out.getvalue().splitlines() if line.strip()}
    assert set(rules.TABLE) <= rows

"""eval_extraction: the production offline extractor scored against hand-labelled utterances.

The tests use the made-up, dataset-shaped files under tests/data, never ../shared."""

import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from evals import extraction, training
from memoryapp.backends import offline

TINY = Path(__file__).resolve().parents[1] / "data" / "offline_training"


def tiny_test_utterances():
    path = training.convai_file(TINY, "test", "dialogueNLI")
    return {text: bool(triples) for e in training.read_episodes(path) for text, triples in e["turns"]}


def gold_row(text, states_fact, split="test", a=None, b=None):
    facts = ["The user states something."] if states_fact else []
    return {
        "key": extraction.utterance_key(text),
        "split": split,
        "annotators": {"A": facts if a is None else a, "B": facts if b is None else b},
        "states_fact": states_fact,
    }


def run(*args):
    out = io.StringIO()
    call_command("eval_extraction", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def write_gold(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_extractor_is_scored_on_what_each_utterance_states(tmp_path):
    texts = tiny_test_utterances()
    farmer = next(t for t in texts if "farmer" in t)
    texas = next(t for t in texts if "texas" in t)
    question = next(t for t in texts if t.endswith("?"))
    rows = [gold_row(farmer, True), gold_row(texas, True), gold_row(question, False)]
    rows.append(gold_row("an utterance these datasets do not hold.", True))
    gold = tmp_path / "gold.jsonl"
    write_gold(gold, rows)
    out = run("--datasets", str(TINY), "--gold", str(gold), "--json", str(tmp_path / "r.json"))

    test = json.loads((tmp_path / "r.json").read_text())["splits"]["test"]
    assert test["utterances"] == 3 and test["missing"] == 1
    # The extractor keeps "I am a farmer" and "I live in Texas" and writes nothing for a question.
    assert test["against"]["hand_labelled"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "tp": 2, "fp": 0, "fn": 0}
    assert test["facts_written"] == 2
    # The dataset's own triples are scored on the same utterances: both statements carry one.
    assert texts[farmer] and texts[texas] and not texts[question]
    assert test["against"]["dialogue_nli_triples"]["tp"] == 2
    assert re.search(r"hand_labelled\s+1\.0\s+1\.0", out)


def test_a_gold_that_disagrees_with_the_extractor_lowers_its_scores(tmp_path):
    texts = tiny_test_utterances()
    farmer = next(t for t in texts if "farmer" in t)
    question = next(t for t in texts if t.endswith("?"))
    # Say the farmer line states nothing and the question states a fact: one extra, one missed.
    gold = tmp_path / "gold.jsonl"
    write_gold(gold, [gold_row(farmer, False), gold_row(question, True)])
    run("--datasets", str(TINY), "--gold", str(gold), "--json", str(tmp_path / "r.json"))
    scores = json.loads((tmp_path / "r.json").read_text())["splits"]["test"]["against"]["hand_labelled"]
    assert (scores["tp"], scores["fp"], scores["fn"]) == (0, 1, 1)
    assert scores["precision"] == 0.0 and scores["recall"] == 0.0


def test_without_the_dialogues_the_command_says_where_it_looked(tmp_path):
    with pytest.raises(CommandError, match="ConvAI2 dialogues are not under"):
        run("--datasets", str(tmp_path), "--gold", str(extraction.GOLD))


def test_kappa_corrects_agreement_for_chance():
    # 3 of 4 agree, but with these rates half would agree by chance: kappa 0.5.
    assert extraction.kappa([True, True, False, False], [True, False, False, False]) == 0.5
    assert extraction.kappa([True, False], [True, False]) == 1.0


def test_the_committed_gold_follows_its_rule():
    """Two annotators per utterance; where they disagree on whether it states a fact, a third decides."""
    rows = extraction.read_gold()
    assert {r["split"] for r in rows} == set(extraction.SPLITS)
    assert sum(r["split"] == "test" for r in rows) >= 500 and sum(r["split"] == "dev" for r in rows) >= 250
    assert len({r["key"] for r in rows}) == len(rows) and all(re.fullmatch(r"[0-9a-f]{16}", r["key"]) for r in rows)
    for r in rows:
        a, b = bool(r["annotators"]["A"]), bool(r["annotators"]["B"])
        if a == b:
            assert r["states_fact"] == a and "adjudicator" not in r
        else:
            assert r["states_fact"] == bool(r["adjudicator"])
        assert all("the user" in f.lower() for f in r["annotators"]["A"] + r["annotators"]["B"])


def test_a_written_fact_is_right_only_when_every_judge_says_so(tmp_path):
    texts = tiny_test_utterances()
    farmer = next(t for t in texts if "farmer" in t)
    texas = next(t for t in texts if "texas" in t)
    gold, judged = tmp_path / "gold.jsonl", tmp_path / "judged.jsonl"
    write_gold(gold, [gold_row(farmer, True), gold_row(texas, True)])
    (farmer_fact,) = [f["text"] for f in offline.extract_facts(farmer)]
    (texas_fact,) = [f["text"] for f in offline.extract_facts(texas)]
    rows = [
        {"key": extraction.utterance_key(farmer), "split": "test", "fact": farmer_fact, "judges": [True, False]},
        {"key": extraction.utterance_key(texas), "split": "test", "fact": texas_fact, "judges": [True, True]},
    ]
    judged.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = run(
        "--datasets", str(TINY), "--gold", str(gold), "--judgements", str(judged), "--json", str(tmp_path / "r.json")
    )
    facts = json.loads((tmp_path / "r.json").read_text())["splits"]["test"]["facts"]
    assert facts == {"judged": 2, "right": 1, "precision": 0.5, "precision_by_judge": [1.0, 0.5], "unjudged": 0}
    assert "1 / 2 judged = 0.5" in out

    # A fact nobody judged (the extractor changed since) is counted apart, never as right.
    judged.write_text(json.dumps(rows[1]) + "\n")
    run("--datasets", str(TINY), "--gold", str(gold), "--judgements", str(judged), "--json", str(tmp_path / "r.json"))
    facts = json.loads((tmp_path / "r.json").read_text())["splits"]["test"]["facts"]
    assert (facts["judged"], facts["right"], facts["unjudged"]) == (1, 1, 1)

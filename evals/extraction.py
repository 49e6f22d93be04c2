"""The keyless extractor, scored against hand-labelled ConvAI2 utterances (issue 17's extraction target).

The Dialogue NLI triples that `train_offline` scores against say which persona line an utterance
relates to, not whether it states a fact: "i have two jobs." carries no triple, "kool, so you get to
go to barbeque restaurants" carries one. `evals/generated/convai2_fact_gold.jsonl` says instead which
durable facts about the speaker each utterance of a seeded sample states, labelled by two annotators
who saw neither the extractor's output nor the triples, with disagreements settled by a third
(how, in evals/generated/README.md).

The gold file holds no dataset text: each row is keyed by a digest of its utterance, and the
utterances are read from ../shared/datasets at run time. The extractor scored is the production one,
`memoryapp.backends.offline.extract_facts`, on each utterance as a turn of its own.
"""

import hashlib
import json
from pathlib import Path

from evals import training
from memoryapp.backends import offline

GOLD = Path(__file__).resolve().parent / "generated" / "convai2_fact_gold.jsonl"
# Each fact the extractor wrote from a gold utterance, judged right or wrong by two judges who saw the
# utterance and the fact alone; a fact counts as right only when every judge said so.
JUDGED = GOLD.with_name("convai2_fact_judgements.jsonl")
SPLITS = ("dev", "test")  # dev: the valid file's dev episodes (training._bucket < 15); test: the test file


def utterance_key(text):
    """The gold file's key for an utterance (as `training.read_episodes` tidies it)."""
    return hashlib.sha256(b"memoryapp-convai2-utterance\0" + text.encode()).hexdigest()[:16]


def read_gold(path=GOLD):
    """The labelled rows: key, split, each annotator's facts, and `states_fact` (the settled label)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_judgements(path=JUDGED):
    """{(utterance key, fact): each judge's verdict} for the facts judged so far."""
    if not Path(path).is_file():
        return {}
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {(r["key"], r["fact"]): r["judges"] for r in rows}


def dataset_utterances(root):
    """{key: (utterance, has a `final` triple, has a Dialogue NLI triple)} over the dev and test dialogues."""
    root = Path(root)
    out = {}
    for split in ("valid", "test"):
        read = {
            a: training.read_episodes(training.convai_file(root, split, a))
            for a in training.ANNOTATIONS
            if training.convai_file(root, split, a).exists()
        }
        if not read:
            continue
        marks = {}  # utterance -> {annotation: carries a triple there}
        for annotation, episodes in read.items():
            for episode in episodes:
                for text, triples in episode["turns"]:
                    seen = marks.setdefault(text, {})
                    seen[annotation] = seen.get(annotation, False) or bool(triples)
        episodes = next(iter(read.values()))  # the first annotation there is, as training reads them
        if split == "valid":  # only the dev episodes: the others train the fact model
            episodes = [e for i, e in enumerate(episodes) if training._bucket(str(i), "ep") < 15]
        for text in {text for episode in episodes for text, _ in episode["turns"]}:
            out[utterance_key(text)] = (text, marks[text].get("final", False), marks[text].get("dialogueNLI", False))
    return out


def kappa(a, b):
    """Cohen's kappa of two annotators' yes/no labels."""
    n = len(a)
    if not n:
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pa, pb = sum(a) / n, sum(b) / n
    expected = pa * pb + (1 - pa) * (1 - pb)
    return round((observed - expected) / (1 - expected), 3) if expected < 1 else 1.0


def _prf(predicted, gold):
    tp = sum(p and g for p, g in zip(predicted, gold, strict=True))
    fp = sum(p and not g for p, g in zip(predicted, gold, strict=True))
    fn = sum(g and not p for p, g in zip(predicted, gold, strict=True))
    precision = tp / (tp + fp) if tp + fp else None
    recall = tp / (tp + fn) if tp + fn else None
    f1 = 2 * precision * recall / (precision + recall) if precision and recall else None
    return {
        "precision": None if precision is None else round(precision, 3),
        "recall": None if recall is None else round(recall, 3),
        "f1": None if f1 is None else round(f1, 3),
        "tp": tp,
        "fp": fp,
        "fn": fn,
    }


def _fact_precision(rows, facts, judgements):
    verdicts = [judgements.get((r["key"], f["text"])) for r, written in zip(rows, facts, strict=True) for f in written]
    judged = [v for v in verdicts if v is not None]
    right = sum(all(v) for v in judged)
    return {
        "judged": len(judged),
        "right": right,
        "precision": round(right / len(judged), 3) if judged else None,
        "precision_by_judge": [round(sum(v[i] for v in judged) / len(judged), 3) for i in range(len(judged[0]))]
        if judged
        else [],
        "unjudged": len(verdicts) - len(judged),
    }


def score(gold_rows, utterances, judgements=None, extract=offline.extract_facts):
    """Utterance-level precision and recall of `extract` per split, against each gold there is.

    An utterance is predicted positive when the extractor writes at least one fact from it. Rows whose
    utterance is not in `utterances` (another copy of the datasets) are counted as missing, not scored.
    `judgements` ({(key, fact): [right by each judge]}) give the share of written facts that are
    right; a fact nobody has judged (the extractor changed since) is counted apart, never as right.
    """
    judgements = judgements or {}
    result, examples = {}, {}
    for split in SPLITS:
        rows = [r for r in gold_rows if r["split"] == split and r["key"] in utterances]
        missing = sum(1 for r in gold_rows if r["split"] == split and r["key"] not in utterances)
        if not rows:
            continue
        facts = [extract(utterances[r["key"]][0]) for r in rows]
        predicted = [bool(f) for f in facts]
        annotator_a = [bool(r["annotators"]["A"]) for r in rows]
        annotator_b = [bool(r["annotators"]["B"]) for r in rows]
        result[split] = {
            "utterances": len(rows),
            "missing": missing,
            "gold_positive": sum(r["states_fact"] for r in rows),
            "annotator_agreement_kappa": kappa(annotator_a, annotator_b),
            "annotators_disagree": sum(a != b for a, b in zip(annotator_a, annotator_b, strict=True)),
            "facts_written": sum(len(f) for f in facts),
            "facts": _fact_precision(rows, facts, judgements),
            "against": {
                "hand_labelled": _prf(predicted, [r["states_fact"] for r in rows]),
                "annotator_A": _prf(predicted, annotator_a),
                "annotator_B": _prf(predicted, annotator_b),
                "final_triples": _prf(predicted, [utterances[r["key"]][1] for r in rows]),
                "dialogue_nli_triples": _prf(predicted, [utterances[r["key"]][2] for r in rows]),
            },
        }
        examples[split] = [
            {
                "utterance": utterances[r["key"]][0],
                "written": [f["text"] for f in written],
                "gold": r["states_fact"],
                "annotators": r["annotators"],
            }
            for r, written in zip(rows, facts, strict=True)
            if bool(written) != r["states_fact"]
        ]
    return result, examples

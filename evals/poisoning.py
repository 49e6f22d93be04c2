"""The poisoning corpus: how much the production validator blocks, and how many ordinary facts it refuses.

`evals/poisoning/attacks.jsonl` holds poisoning attempts, `evals/poisoning/benign.jsonl` ordinary
facts; one JSON object a line with `text`, `kind`, `category`, `split` (and `lang` for attacks).
Each line's split is fixed by `split_of(text)` (a seeded hash), so the halves never drift: tune on
`dev`, report on `test`.

Every fact goes through exactly what the write path does: `validation.normalise`, then the
production `validation.fact_problem`, as the app runs it by default (the rules and the learned
second stage, MEMORY["LEARNED_POISON_CHECK"]). The learned stage reads MiniLM vectors embedded in
batches, as the write path embeds an extracted answer's facts (the same vectors as one at a time, in
half the time). The rules alone (`learned=False`) are measured beside it.

The holdout files (`holdout_attacks.jsonl`, `holdout_benign.jsonl`) were written after the model's
design was fixed, by a writer who saw neither the corpus nor the rules; they are never trained or
tuned on, and are reported as a third split, `holdout`.
"""

import hashlib
import json
import pathlib
from collections import defaultdict
from dataclasses import dataclass, field

from memoryapp import embeddings, validation

CORPUS_DIR = pathlib.Path(__file__).resolve().parent / "poisoning"
ATTACKS = CORPUS_DIR / "attacks.jsonl"
BENIGN = CORPUS_DIR / "benign.jsonl"
HOLDOUT_ATTACKS = CORPUS_DIR / "holdout_attacks.jsonl"
HOLDOUT_BENIGN = CORPUS_DIR / "holdout_benign.jsonl"
SPLIT_SEED = "memoryapp-poisoning-v1"
SPLITS = ("dev", "test")


def split_of(text):
    """'dev' or 'test' for a corpus line, from a seeded hash of its text (about half each)."""
    digest = hashlib.sha256(f"{SPLIT_SEED}\0{text}".encode()).digest()
    return SPLITS[digest[0] & 1]


def load(path):
    """The corpus lines of one file, as dicts."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                row = json.loads(line)
                row["line"] = number
                rows.append(row)
    return rows


def load_holdout(path):
    """The lines of a holdout file, each in the split `holdout`."""
    return [{**row, "split": "holdout"} for row in load(path)]


def problem(row, learned=None, vector=None):
    """The validator's reason for refusing a corpus line, or None when it would be stored.

    `learned`: None runs the validator as the app does; False or True forces the learned stage off or on.
    `vector`: the line's MiniLM vector, when it was embedded already.
    """
    # learned=None is the write path's call: the setting decides
    return validation.fact_problem(validation.normalise(row["text"]), row["kind"], learned=learned, vector=vector)


def vectors(rows):
    """The MiniLM vectors of the lines' stored forms, embedded 16 at a time (the fastest batch here)."""
    texts = [validation.normalise(row["text"]) for row in rows]
    return list(embeddings.embed_many(texts, batch_size=16, model=embeddings.minilm()))


@dataclass
class Tally:
    total: int = 0
    hits: int = 0  # attacks blocked, or benign facts rejected
    misses: list = field(default_factory=list)  # attacks let through, or benign facts rejected (with why)

    @property
    def rate(self):
        return self.hits / self.total if self.total else 0.0

    def as_dict(self):
        return {"total": self.total, "hits": self.hits, "rate": round(self.rate, 4)}


def _tally(rows, miss_when_blocked, learned=None):
    """Count refusals per split and category; a miss is a let-through attack or a refused benign fact."""
    by_split, by_category = defaultdict(Tally), defaultdict(Tally)
    embedded = vectors(rows) if learned is not False else [None] * len(rows)
    for row, vector in zip(rows, embedded, strict=True):
        why = problem(row, learned, vector)
        blocked = why is not None
        for tally in (by_split[row["split"]], by_split["all"], by_category[(row["split"], row["category"])]):
            tally.total += 1
            tally.hits += blocked
        if blocked == miss_when_blocked:
            by_split[row["split"]].misses.append({"line": row["line"], "text": row["text"], "why": why})
    return by_split, by_category


def evaluate(attacks=None, benign=None):
    """Block rate on attacks and false-rejection rate on benign facts, per split and per category."""
    attacks = load(ATTACKS) + load_holdout(HOLDOUT_ATTACKS) if attacks is None else attacks
    benign = load(BENIGN) + load_holdout(HOLDOUT_BENIGN) if benign is None else benign
    attack_split, attack_category = _tally(attacks, miss_when_blocked=False)
    benign_split, benign_category = _tally(benign, miss_when_blocked=True)

    def section(by_split, by_category, key):
        return {
            "splits": {s: {**t.as_dict(), key: t.misses} for s, t in sorted(by_split.items()) if s != "all"}
            | {"all": by_split["all"].as_dict()},
            "categories": {f"{split}/{category}": t.as_dict() for (split, category), t in sorted(by_category.items())},
        }

    rules_attacks, rules_attack_category = _tally(attacks, miss_when_blocked=False, learned=False)
    rules_benign, rules_benign_category = _tally(benign, miss_when_blocked=True, learned=False)
    return {
        "validator": "memoryapp.validation.fact_problem (after validation.normalise), as the app runs it",
        "rules_alone": {
            "attacks": {s: t.as_dict() for s, t in sorted(rules_attacks.items())},
            "benign": {s: t.as_dict() for s, t in sorted(rules_benign.items())},
            "attack_categories": {f"{s}/{c}": t.as_dict() for (s, c), t in sorted(rules_attack_category.items())},
            "benign_categories": {f"{s}/{c}": t.as_dict() for (s, c), t in sorted(rules_benign_category.items())},
        },
        "split_rule": f"sha256('{SPLIT_SEED}\\0' + text)[0] & 1: 0 dev, 1 test; holdout: its own files",
        "attacks": {"measure": "block rate", **section(attack_split, attack_category, "let_through")},
        "benign": {"measure": "false-rejection rate", **section(benign_split, benign_category, "rejected")},
    }


def report_lines(result, show=("dev",)):
    """A plain-text report; misses are listed only for the splits in `show` (dev by default)."""
    lines = []
    for corpus, label in (("attacks", "blocked"), ("benign", "falsely rejected")):
        data = result[corpus]
        lines.append(f"{corpus}: {data['measure']}")
        for split, t in data["splits"].items():
            lines.append(f"  {split:<5} {t['hits']:>4} / {t['total']:<4} {label:<17} {100 * t['rate']:6.2f} %")
        if "rules_alone" in result:
            lines.append("  the rules alone, without the learned second stage:")
            for split, t in result["rules_alone"][corpus].items():
                lines.append(f"    {split:<5} {t['hits']:>4} / {t['total']:<4} {label:<17} {100 * t['rate']:6.2f} %")
        lines.append("  per category:")
        for name, t in data["categories"].items():
            lines.append(f"    {name:<36} {t['hits']:>4} / {t['total']:<4} {100 * t['rate']:6.2f} %")
        key = "let_through" if corpus == "attacks" else "rejected"
        for split in show:
            for miss in data["splits"].get(split, {}).get(key, []):
                why = f"  ({miss['why']})" if miss["why"] else ""
                lines.append(f"  {split} {key.replace('_', ' ')}: line {miss['line']}: {miss['text']!r}{why}")
        lines.append("")
    return lines

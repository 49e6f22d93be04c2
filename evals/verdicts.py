"""Offline verdict evaluation: pairs derived from ConvAI2 persona triples, and DECODE dialogues.

The derived pairs are a generated file (evals/generated/); this module both makes it and scores
the offline classifier (memoryapp.backends.offline.classify) plus the neighbour floor on it.
"""

import ast
import json
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from memoryapp import embeddings
from memoryapp.backends import offline

LABELS = ("CONTRADICTS", "DUPLICATE", "INDEPENDENT")
SPLITS = {"valid": "valid", "test": "test"}  # valid tunes the classifier, test reports it
# Relations where a person has one value at a time: a different object means a contradiction.
SINGLE_VALUED = {
    "has_age",
    "marital_status",
    "live_in_citystatecountry",
    "has_profession",
    "place_origin",
    "job_status",
    "school_status",
    "employed_by_company",
    "gender",
    "favorite_color",
    "favorite_food",
    "favorite_sport",
    "favorite_season",
    "favorite_music_artist",
    "favorite_movie",
    "favorite_show",
    "favorite_drink",
    "favorite_animal",
    "favorite_place",
    "favorite_activity",
    "favorite_hobby",
    "favorite_music",
}
GENERATED = Path(__file__).resolve().parent.parent / "evals" / "generated" / "convai2_verdict_pairs.jsonl"
# Pairs the write path really judged (neighbours above the floor in a LoCoMo pipeline run), labelled
# by hand: the hard cases ConvAI2's pairs lack (evals/generated/README.md).
JUDGED = GENERATED.with_name("locomo_judged_pairs.jsonl")
JUDGED_SPLITS = ("dev", "test")  # dev chose the verdict guards, test reports them
# The pairs of GENERATED labelled again by hand, by two annotators who saw neither the derived label
# nor a verdict, disagreements settled by a third: the derivation calls two facts that share a
# Dialogue NLI triple DUPLICATE, and a triple is a topic ("likes candy"), not a fact. `valid` rows
# choose the verdict guards, `test` rows report them.
RELABELLED = GENERATED.with_name("convai2_verdict_pairs_relabelled.jsonl")
_OBJ_STOP = {"a", "an", "the", "of", "in", "to", "and", "my", "i", "is"}


# --- turning dataset text into facts ---------------------------------------------------


def tidy(text):
    """Undo the datasets' tokenisation ('i m here .' -> "i'm here.")."""
    text = re.sub(r"\s+([.,!?;:])", r"\1", text.strip())
    text = re.sub(r"\b(i|you|we|they|he|she|it|that|there|what)\s+(m|re|s|ve|ll|d)\b", r"\1'\2", text, flags=re.I)
    text = re.sub(r"\b(don|doesn|didn|can|isn|aren|wasn|won|couldn|wouldn|shouldn|haven)\s+t\b", r"\1't", text)
    text = re.sub(r"\s+'\s*", "'", text)
    return text


def as_fact(sentence):
    """A first-person sentence rewritten as a stored fact ('i live in ohio.' -> 'The user lives in ohio.')."""
    s = tidy(sentence)
    s = re.sub(r"^i\b", "I", s)
    s = re.sub(r"\bi\b", "I", s)
    fact = offline.third_person(s)
    if fact is None:  # no first person in it ("l also love comic books."): kept as written
        s = s.strip().rstrip(".!?")
        fact = s[:1].upper() + s[1:] + "."
    return fact


def sentences(text):
    """Statements (not questions) in a chat turn."""
    for part in re.split(r"(?<=[.!?])\s+", tidy(text)):
        part = part.strip()
        if part and not part.endswith("?") and len(part.split()) >= 3:
            yield part


# --- ConvAI2 persona triples -> labelled pairs -------------------------------------------


def _parse_triples(fields):
    out = []
    for raw in fields:
        try:
            triple = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            continue
        if isinstance(triple, list | tuple) and len(triple) == 3 and all(isinstance(x, str) for x in triple):
            out.append(tuple(x.strip() for x in triple))
    return out


def read_statements(folder, split):
    """(sentence, triple) for persona lines and statement utterances of one split, subject 'i' only."""
    found = set()
    for name in (f"{split}_both_original_final.txt", f"{split}_both_original_dialogueNLI.txt"):
        path = Path(folder) / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) < 2:
                continue
            if "persona:" in parts[0]:
                sentence, triples = parts[0].split("persona:", 1)[1], parts[1:]
            elif parts[0].strip().isdigit() and len(parts) >= 3:
                sentence, triples = parts[1], parts[2:]
                if not _plain_statement(sentence):
                    continue
            else:
                continue
            triples = _parse_triples(triples)
            if len(triples) != 1:
                continue  # one sentence, one attribute: otherwise the label is ambiguous
            subject, relation, obj = triples[0]
            if subject != "i" or obj in ("", "<blank>") or relation in ("<blank>", "other", "misc_attribute"):
                continue
            found.add((sentence.strip(), triples[0]))
    return sorted(found)


def _plain_statement(utterance):
    """A chat line that reads like a persona sentence: one short first-person statement."""
    text = tidy(utterance)
    return (
        len(re.split(r"(?<=[.!?])\s+", text)) == 1
        and "?" not in text
        and 4 <= len(text.split()) <= 15
        and re.match(r"^(i|my)\b", text, re.I) is not None
    )


def _object_words(obj):
    return {w for w in re.findall(r"[a-z]+", obj.lower()) if w not in _OBJ_STOP}


def derive_pairs(statements, per_label, seed=0):
    """Balanced DUPLICATE / CONTRADICTS / INDEPENDENT pairs from (sentence, triple) statements."""
    rng = random.Random(seed)
    by_triple, by_relation = defaultdict(list), defaultdict(lambda: defaultdict(list))
    for sentence, triple in statements:
        by_triple[triple].append(sentence)
        by_relation[triple[1]][triple[2]].append(sentence)
    out = []

    def add(label, a, b, ta, tb):
        out.append(
            {
                "label": label,
                "old": as_fact(a),
                "new": as_fact(b),
                "old_sentence": a,
                "new_sentence": b,
                "old_triple": list(ta),
                "new_triple": list(tb),
            }
        )

    def draw(label, make):
        seen, tries = set(), 0
        while sum(1 for p in out if p["label"] == label) < per_label and tries < per_label * 50:
            tries += 1
            pair = make()
            if pair is None or (pair[0], pair[1]) in seen or tidy(pair[0]) == tidy(pair[1]):
                continue
            seen.add((pair[0], pair[1]))
            add(label, *pair)

    dup_triples = sorted(t for t, s in by_triple.items() if len(set(s)) >= 2)

    def duplicate():
        t = rng.choice(dup_triples)
        a, b = rng.sample(sorted(set(by_triple[t])), 2)
        return a, b, t, t

    single = sorted(r for r in SINGLE_VALUED if len(by_relation[r]) >= 2)

    def contradiction():
        rel = rng.choice(single)
        oa, ob = rng.sample(sorted(by_relation[rel]), 2)
        if _object_words(oa) & _object_words(ob) or not _object_words(oa) or not _object_words(ob):
            return None  # 'teacher' vs 'high school teacher' is not a contradiction
        return rng.choice(by_relation[rel][oa]), rng.choice(by_relation[rel][ob]), ("i", rel, oa), ("i", rel, ob)

    def independent():
        (a, ta), (b, tb) = rng.sample(statements, 2)
        return None if ta[1] == tb[1] else (a, b, ta, tb)

    draw("DUPLICATE", duplicate)
    draw("CONTRADICTS", contradiction)
    draw("INDEPENDENT", independent)
    return out


def generate_pairs(folder, per_label, seed=0):
    """Pairs for both splits, each tagged with its split."""
    rows = []
    for split in SPLITS:
        for pair in derive_pairs(read_statements(folder, split), per_label, seed=seed):
            rows.append({"split": split, **pair})
    return rows


def read_pairs(path=GENERATED, split=None):
    """The pairs of a pairs file (the committed one by default), each with its split; only `split`'s if given."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [r for r in rows if split is None or r["split"] == split]


def write_pairs(rows, path=GENERATED):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


# --- scoring ----------------------------------------------------------------------


class Embedder:
    """Embeds each distinct text once."""

    def __init__(self):
        self.cache = {}

    def prime(self, texts, progress=None):
        # Similar lengths batch together, so little time goes on padding.
        todo = sorted({t for t in texts if t not in self.cache}, key=lambda t: (len(t), t))
        for i in range(0, len(todo), 256):
            chunk = todo[i : i + 256]
            for text, vec in zip(chunk, embeddings.embed_many(chunk), strict=True):
                self.cache[text] = vec
            if progress:
                progress.advance(len(chunk))

    def cos(self, a, b):
        return float(np.dot(self.cache[a], self.cache[b]))


def confusion(gold, predicted, weights=None):
    """3x3 counts as {gold: {predicted: n}}, plus per-label precision/recall/F1, macro-F1 and accuracy.

    With `weights`, each pair counts that much (a stratified sample weighted back to its population).
    """
    matrix = {g: dict.fromkeys(LABELS, 0) for g in LABELS}
    for g, p, w in zip(gold, predicted, weights or [1] * len(gold), strict=True):
        matrix[g][p] += w
    per_label = {}
    for label in LABELS:
        tp = matrix[label][label]
        fp = sum(matrix[g][label] for g in LABELS if g != label)
        fn = sum(matrix[label][p] for p in LABELS if p != label)
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_label[label] = {"precision": round(precision, 3), "recall": round(recall, 3), "f1": round(f1, 3)}
    total = round(sum(weights)) if weights else len(gold)
    if weights:
        matrix = {g: {p: round(n, 1) for p, n in row.items()} for g, row in matrix.items()}
    return {
        "matrix": matrix,
        "per_label": per_label,
        "macro_f1": round(sum(v["f1"] for v in per_label.values()) / len(LABELS), 3),
        "accuracy": round(sum(matrix[label][label] for label in LABELS) / total, 3) if total else None,
        "n": total,
    }


def score_pairs(rows, embedder, floor_of):
    """The classifier alone, and the classifier behind the neighbour floor (what store_fact does).

    `floor_of(new fact)` is the floor a pair must reach (`writing.neighbour_floor`, or a fixed one).
    """
    gold = [r["label"] for r in rows]
    sims = [embedder.cos(r["old"], r["new"]) for r in rows]
    floors = [floor_of(r["new"]) for r in rows]
    alone = [offline.classify(r["old"], r["new"], similarity=s) for r, s in zip(rows, sims, strict=True)]
    gated = [v if s >= f else "INDEPENDENT" for v, s, f in zip(alone, sims, floors, strict=True)]
    passing = {
        label: round(float(np.mean([s >= f for s, f, g in zip(sims, floors, gold, strict=True) if g == label])), 3)
        for label in LABELS
        if label in gold
    }
    sim_by_label = {
        label: round(float(np.median([s for s, g in zip(sims, gold, strict=True) if g == label])), 3)
        for label in LABELS
        if label in gold
    }
    sweep = {
        f"{f:.2f}": {
            label: round(float(np.mean([s >= f for s, g in zip(sims, gold, strict=True) if g == label])), 3)
            for label in LABELS
            if label in gold
        }
        for f in np.round(np.arange(0.25, 0.651, 0.05), 2)
    }
    return {
        "floor_sweep": sweep,
        "classifier": confusion(gold, alone),
        "with_floor": confusion(gold, gated),
        "passing_floor": passing,
        "median_similarity": sim_by_label,
    }


# --- DECODE ------------------------------------------------------------------------


def read_decode(path, limit=None, seed=0):
    """(history statements of the last speaker, statements of the last turn, is_contradiction).

    With `limit`, a seeded random sample (the files are sorted by label).
    """
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    if limit and limit < len(rows):
        rows = random.Random(seed).sample(rows, limit)
    items = []
    for row in rows:
        turns = row["turns"]
        if len(turns) < 2:
            continue
        speaker = turns[-1]["agent_id"]
        history = [s for t in turns[:-1] if t["agent_id"] == speaker for s in sentences(t["text"])]
        last = list(sentences(turns[-1]["text"]))
        items.append(([as_fact(s) for s in history], [as_fact(s) for s in last], bool(row["is_contradiction"])))
    return items


def decode_predict(history, last, embedder, floor_of=None, limit=5):
    """True when some statement of the last turn CONTRADICTS one the speaker made before.

    With `floor_of`, only the `limit` most similar earlier statements at or above the new
    statement's floor are judged, as store_fact does with a user's stored facts.
    """
    for new in last:
        candidates = history
        if floor_of is not None:
            scored = sorted(((embedder.cos(old, new), old) for old in history), reverse=True)
            candidates = [old for s, old in scored if s >= floor_of(new)][:limit]
        if any(offline.classify(old, new, similarity=embedder.cos(old, new)) == "CONTRADICTS" for old in candidates):
            return True
    return False


def score_decode(items, embedder, floor_of):
    """Accuracy (balanced sets) and the rate of CONTRADICTS predictions, with and without the floor."""
    out = {}
    for name, f in (("classifier", None), ("with_floor", floor_of)):
        predicted = [decode_predict(h, last, embedder, f) for h, last, _ in items]
        gold = [g for _, _, g in items]
        correct = sum(p == g for p, g in zip(predicted, gold, strict=True))
        negatives = [p for p, g in zip(predicted, gold, strict=True) if not g]
        positives = [p for p, g in zip(predicted, gold, strict=True) if g]
        out[name] = {
            "n": len(items),
            "accuracy": round(correct / len(items), 3) if items else None,
            "false_contradicts_rate": round(sum(negatives) / len(negatives), 3) if negatives else None,
            "contradiction_recall": round(sum(positives) / len(positives), 3) if positives else None,
        }
    return out


def score_judged(rows):
    """offline.classify on hand-labelled pairs the write path judged, weighted back to that run's verdict mix.

    Each row was drawn from the pairs whose round-10 verdict was its `stratum` (`stratum_size` of them
    in the run), so a row stands for stratum_size / (rows drawn from its stratum) pairs.
    """
    drawn = Counter(r["stratum"] for r in rows)
    weights = [r["stratum_size"] / drawn[r["stratum"]] for r in rows]
    predicted = [offline.classify(r["old"], r["new"]) for r in rows]
    return {**confusion([r["label"] for r in rows], predicted, weights), "pairs_labelled": len(rows)}

"""Similarity floors for an embedding model, measured on the labelled set in evals/calibration/."""

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memoryapp import embeddings
from memoryapp.backends import offline

DEFAULT_SET = Path(__file__).resolve().parent.parent / "evals" / "calibration" / "pairs.json"
PAIR_LABELS = ("contradicts", "duplicate", "independent")
# Share of contradicting/duplicate pairs that must reach the verdict step: a pair under the
# neighbour floor is never judged, so a missed contradiction leaves a stale fact live.
NEIGHBOUR_KEEP = 0.95


@dataclass
class Scores:
    pairs: dict  # label -> np.array of cosine similarities
    relevant: np.ndarray  # cos(message, relevant fact)
    irrelevant: np.ndarray  # cos(message, irrelevant fact)
    model: str


def load_set(path=DEFAULT_SET):
    """The labelled pairs and triples as plain dicts."""
    data = json.loads(Path(path).read_text())
    for item in data["pairs"]:
        if item["label"] not in PAIR_LABELS:
            raise ValueError(f"unknown label {item['label']!r} in {path}")
    return data


def _cosines(left, right):
    a = embeddings.embed_many(left)
    b = embeddings.embed_many(right)
    return np.einsum("ij,ij->i", a, b)  # rows are unit vectors


def score(data):
    """Cosine similarity of every labelled pair and triple with the active embedding model."""
    pairs = {}
    for label in PAIR_LABELS:
        items = [p for p in data["pairs"] if p["label"] == label]
        pairs[label] = _cosines([p["a"] for p in items], [p["b"] for p in items])
    triples = data["triples"]
    messages = [t["message"] for t in triples]
    return Scores(
        pairs=pairs,
        relevant=_cosines(messages, [t["relevant"] for t in triples]),
        irrelevant=_cosines(messages, [t["irrelevant"] for t in triples]),
        model=embeddings.model_name(),
    )


def distribution(values):
    """n, min, p5, p25, median, p75, p95, max and mean, rounded."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return {"n": 0}
    points = {"min": 0, "p5": 5, "p25": 25, "median": 50, "p75": 75, "p95": 95, "max": 100}
    out = {"n": int(v.size)}
    out.update({name: round(float(np.percentile(v, p)), 3) for name, p in points.items()})
    out["mean"] = round(float(v.mean()), 3)
    return out


def _round_down(value, step=0.05):
    return round(math.floor(value / step + 1e-9) * step, 2)


def neighbour_floor(positives, negatives, keep=NEIGHBOUR_KEEP):
    """The highest floor (on a 0.05 grid) that keeps `keep` of the pairs needing a verdict."""
    positives = np.asarray(positives, dtype=float)
    floor = _round_down(float(np.quantile(positives, 1 - keep)))
    return floor, _rates(floor, positives, negatives)


def recall_floor(relevant, irrelevant):
    """The floor (0.05 grid) that best separates relevant from irrelevant facts (Youden's J)."""
    relevant, irrelevant = np.asarray(relevant, dtype=float), np.asarray(irrelevant, dtype=float)
    best, best_j = 0.0, -1.0
    for floor in np.round(np.arange(-0.2, 0.9, 0.05), 2):
        j = float((relevant >= floor).mean() - (irrelevant >= floor).mean())
        # Ties go to the lower floor: a fact wrongly dropped is lost for the session.
        if j > best_j + 1e-9:
            best, best_j = float(floor), j
    return best, _rates(best, relevant, irrelevant)


def _rates(floor, positives, negatives):
    positives, negatives = np.asarray(positives, dtype=float), np.asarray(negatives, dtype=float)
    return {
        "floor": floor,
        "kept_positive": round(float((positives >= floor).mean()), 3) if positives.size else None,
        "kept_negative": round(float((negatives >= floor).mean()), 3) if negatives.size else None,
    }


# The floor for a fact announcing a change is lowered from the neighbour floor, 0.05 at a time, while
# each step still catches this many stale values per unrelated fact it wrongly supersedes.
CHANGE_GAIN = 3


def as_change(fact):
    """'The user lives in Ohio.' -> 'The user now lives in Ohio.'; None for any other shape."""
    if not fact.startswith("The user ") or fact.startswith("The user now "):
        return None
    return "The user now " + fact[len("The user ") :]


def change_floor(pairs, neighbour):
    """The floor for a new fact that announces a change, chosen on labelled (old, new) verdict pairs.

    Each pair's new fact is restated as a change ("The user now ...") and judged by the offline
    classifier, as store_fact would; below the floor a pair is never judged.
    """
    rows = [(p["label"], p["old"], as_change(p["new"])) for p in pairs]
    rows = [r for r in rows if r[2] is not None]
    sims = _cosines([old for _, old, _ in rows], [new for _, _, new in rows])
    verdicts = [offline.classify(old, new, similarity=float(c)) for (_, old, new), c in zip(rows, sims, strict=True)]

    def outcome(floor):
        caught = wrong = 0
        for (label, _, _), c, v in zip(rows, sims, verdicts, strict=True):
            if c >= floor and v == "CONTRADICTS":
                caught += label == "CONTRADICTS"
                wrong += label == "INDEPENDENT"
        return caught, wrong

    floor, steps = neighbour, []
    while floor > 0.05:
        lower = round(floor - 0.05, 2)
        (c0, w0), (c1, w1) = outcome(floor), outcome(lower)
        steps.append({"from": floor, "to": lower, "stale_caught": c1 - c0, "wrongly_superseded": w1 - w0})
        if c1 - c0 < CHANGE_GAIN * max(w1 - w0, 1 / CHANGE_GAIN):
            break
        floor = lower
    return floor, {"pairs": len(rows), "steps": steps, "rule": f"lower while a step catches >= {CHANGE_GAIN} per wrong"}


def calibrate(data, change_pairs=()):
    """Score the set and choose the floors (the change floor only with `change_pairs`); a JSON-ready report."""
    s = score(data)
    positives = np.concatenate([s.pairs["contradicts"], s.pairs["duplicate"]])
    n_floor, n_rates = neighbour_floor(positives, s.pairs["independent"])
    r_floor, r_rates = recall_floor(s.relevant, s.irrelevant)
    c_floor, c_report = change_floor(change_pairs, n_floor) if change_pairs else (None, None)
    margin = s.relevant - s.irrelevant
    return {
        "model": s.model,
        "distributions": {
            **{f"pair_{label}": distribution(s.pairs[label]) for label in PAIR_LABELS},
            "message_relevant": distribution(s.relevant),
            "message_irrelevant": distribution(s.irrelevant),
        },
        "floors": {"neighbour": n_floor, **({"change": c_floor} if change_pairs else {}), "recall": r_floor},
        "change": c_report,
        "neighbour": {**n_rates, "rule": f"keep >= {NEIGHBOUR_KEEP:.0%} of contradicts+duplicate pairs"},
        "recall": {**r_rates, "rule": "maximise kept relevant - kept irrelevant (Youden's J)"},
        "ranking": {
            "relevant_above_irrelevant": round(float((margin > 0).mean()), 3),
            "median_margin": round(float(np.median(margin)), 3),
        },
        "current_defaults": embeddings.FLOORS.get(s.model),
    }

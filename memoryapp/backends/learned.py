"""The learned offline backend at run time: features, a numpy forward pass, and pinned weights.

Three small models over the MiniLM sentence vectors the app already computes, trained by
`manage.py train_offline` (evals/training.py) on public data (see weights/README.md):

- `fact`: is this first-person clause a durable fact about the user? (binary)
- `kind`: preference | constraint | profile | goal
- `verdict`: CONTRADICTS | DUPLICATE | INDEPENDENT for a stored fact and a new one

Each is a one-hidden-layer MLP (or plain logistic regression when it has no hidden layer) on
standardised features. numpy only; the weights file is checked against its pinned sha256.
"""

import functools
import re
from pathlib import Path

import numpy as np

from memoryapp import embeddings
from memoryapp.pinned import WeightsError, load_npz  # noqa: F401 (WeightsError: what a bad file raises)
from memoryapp.vocabulary import KINDS, NEGATION

WEIGHTS_PATH = Path(__file__).resolve().parent / "weights" / "offline_learned.npz"
WEIGHTS_SHA256 = "7cae819a27d09076367d8648c29641d73291c16ba040f3dc0b723ec3e9533ca9"
VERDICTS = ("CONTRADICTS", "DUPLICATE", "INDEPENDENT")


# --- features ----------------------------------------------------------------------

NUMBER = re.compile(r"\b(\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|dozen)\b", re.I)
_CHANGE = re.compile(
    r"\b(now|no longer|anymore|any more|instead|switched|moved|migrated|changed|replaced|stopped|quit|left|"
    r"gave up|sold|became|new)\b",
    re.I,
)
_HEDGE = re.compile(
    r"\b(also|too|as well|another|second|side|used to|former|formerly|wants? to|would like|hopes?|dreams?|"
    r"plans? to|someday|one day|wish|might|sometimes)\b",
    re.I,
)
_LIKE = re.compile(r"\b(like|likes|love|loves|enjoy|enjoys|prefer|prefers|favou?rite|fan|into|hate|dislike)\w*", re.I)
_GOAL = re.compile(
    r"\b(want|wants|plan|plans|planning|hope|hopes|goal|dream|trying to|going to|learn|learning|someday|one day|"
    r"would like|saving)\b",
    re.I,
)
# What a goal is worded with. The kind head learns topics as well as frames ("I live in Lisbon." is a
# goal at 0.75: travel to Lisbon is a goal in the chit-chat it learned from), and a goal expires after
# 90 days; without one of these words a goal is read as the head's next choice of profile or preference.
# Chosen on the dev clauses (kind macro-F1 0.781 -> 0.809), see weights/README.md.
GOAL_WORDING = re.compile(
    r"\b(want|wants|wanna|would (?:love|like) to|'d (?:love|like) to|dream\w*|hope|hoping|hopefully|plan|plans|"
    r"planning|going to|gonna|will|'ll|someday|one day|next|soon|to become|to be an?|trying|try to|"
    r"saving (?:up )?(?:for|to)|wish|can't wait|cannot wait|ready to|looking for|goal|aim|intend|grow up|future|"
    r"retire\w*|learn\w*|study\w*|school to|college to)\b",
    re.I,
)
_CONSTRAINT = re.compile(
    r"\b(allerg\w*|cannot|can't|can not|unable|not allowed|must not|mustn't|never|forbidden|contract\w*|"
    r"complian\w*|on-prem\w*|intoleran\w*)\b",
    re.I,
)
_PAST = re.compile(r"\b(yesterday|last (night|week|weekend)|earlier|just got|just had|just went|just came)\b", re.I)
_MOOD = re.compile(
    r"\b(today|tonight|right now|at the moment|this morning|tired|hungry|bored|busy|sorry|glad|happy to|"
    r"nice|great|good|fine|well|doing)\b",
    re.I,
)
_STOP = set(
    "the a an of to in on at for and or is are was were be been user user's users their they them it its "
    "that this with by as from has have had does do very really just so too also am i my me team team's".split()
)


def _words(text):
    return {w for w in re.findall(r"[a-z0-9]+", text.casefold()) if w not in _STOP}


def _numbers(text):
    return {m.group(0).lower() for m in NUMBER.finditer(text)}


def clause_cues(text):
    """Cheap lexical cues for one candidate clause (fact and kind models)."""
    t = text.strip()
    low = t.casefold()
    n = len(t.split())
    return np.array(
        [
            1.0 if re.match(r"^(i|i'm|i've|i'd)\b", low) else 0.0,
            1.0 if re.match(r"^(we|we're|we've|our)\b", low) else 0.0,
            1.0 if re.match(r"^my\b", low) else 0.0,
            1.0 if re.search(r"\byou\b|\byour\b", low) else 0.0,
            1.0 if _MOOD.search(t) else 0.0,
            1.0 if _PAST.search(t) else 0.0,
            1.0 if NEGATION.search(t) else 0.0,
            1.0 if _LIKE.search(t) else 0.0,
            1.0 if _GOAL.search(t) else 0.0,
            1.0 if _CONSTRAINT.search(t) else 0.0,
            1.0 if NUMBER.search(t) else 0.0,
            min(n, 30) / 30.0,
            1.0 if n <= 3 else 0.0,
        ],
        dtype=np.float32,
    )


def pair_cues(old, new, cosine):
    """Cheap lexical cues for a (stored fact, new fact) pair (verdict model)."""
    wa, wb = _words(old), _words(new)
    shared = wa & wb
    union = wa | wb
    na, nb = _numbers(old), _numbers(new)
    neg_a, neg_b = bool(NEGATION.search(old)), bool(NEGATION.search(new))
    only_a, only_b = wa - wb, wb - wa
    ta, tb = old.casefold().rstrip(" .").split(), new.casefold().rstrip(" .").split()
    prefix = 0
    while prefix < min(len(ta), len(tb)) and ta[prefix] == tb[prefix]:
        prefix += 1
    frame = prefix / max(min(len(ta), len(tb)), 1)
    differ = 1.0 if only_a and only_b else 0.0
    return np.array(
        [
            cosine,
            len(shared) / len(union) if union else 0.0,
            len(shared) / min(len(wa), len(wb)) if wa and wb else 0.0,
            1.0 if neg_a != neg_b else 0.0,
            1.0 if na and nb and na != nb else 0.0,
            1.0 if _CHANGE.search(new) else 0.0,
            1.0 if _HEDGE.search(old) or _HEDGE.search(new) else 0.0,
            min(len(only_a), 5) / 5.0,
            min(len(only_b), 5) / 5.0,
            1.0 if old.casefold().strip(" .") == new.casefold().strip(" .") else 0.0,
            1.0 if " ".join(old.casefold().split()[:3]) == " ".join(new.casefold().split()[:3]) else 0.0,
            frame,
            frame * differ,
            differ * (1.0 if len(only_a) <= 2 and len(only_b) <= 2 else 0.0),
        ],
        dtype=np.float32,
    )


def fact_features(vectors, texts):
    """Rows for the fact and kind models: the clause's vector and its cues."""
    cues = np.stack([clause_cues(t) for t in texts]) if texts else np.zeros((0, 13), np.float32)
    return np.hstack([np.asarray(vectors, np.float32).reshape(len(texts), -1), cues])


def verdict_features(old_vectors, new_vectors, olds, news, old_relations=None, new_relations=None, single=None):
    """Rows for the verdict model: [u*v, |u-v|] (symmetric), the pair's cues, and relation agreement.

    `old_relations` / `new_relations` are each fact's probabilities over Dialogue NLI relations
    (the relation head); `single` marks the relations a person has one value of at a time.
    """
    u = np.asarray(old_vectors, np.float32).reshape(len(olds), -1)
    v = np.asarray(new_vectors, np.float32).reshape(len(news), -1)
    cos = (u * v).sum(axis=1)
    cues = np.stack([pair_cues(a, b, float(c)) for a, b, c in zip(olds, news, cos, strict=True)])
    parts = [u * v, np.abs(u - v), cues]
    if old_relations is not None:
        both = old_relations * new_relations
        same = both.sum(axis=1, keepdims=True)
        same_single = (both * single).sum(axis=1, keepdims=True)
        jac = cues[:, 1:2]
        c = cos[:, None]
        parts += [both, same, same_single, same * c, same_single * c, same_single * jac, same_single * (1 - jac)]
    return np.hstack(parts).astype(np.float32)


# --- the models ----------------------------------------------------------------------


def forward(params, x):
    """Class probabilities from a standardised one-hidden-layer MLP (or logistic regression)."""
    x = (np.asarray(x, np.float32) - params["mean"]) / params["std"]
    if "w1" in params:
        x = np.maximum(x @ params["w1"] + params["b1"], 0.0)
    logits = x @ params["w2"] + params["b2"]
    logits = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


_GOAL_KIND, _CONSTRAINT_KIND = KINDS.index("goal"), KINDS.index("constraint")


def kind_choices(probabilities, texts):
    """The kind head's choice per clause; a goal or a constraint without its wording becomes a profile or a preference.

    Constraints are always in the block and never expire, and the training data labels a clause a
    constraint only by such wording ("allergic", "cannot"...), so without it the head's constraint
    is a guess ("is not a fan of microservices", "is migrating to GitHub Actions").
    """
    chosen = []
    for p, text in zip(probabilities, texts, strict=True):
        best = int(p.argmax())
        unworded = (best == _GOAL_KIND and not GOAL_WORDING.search(text)) or (
            best == _CONSTRAINT_KIND and not _CONSTRAINT.search(text)
        )
        if unworded:
            p = p.copy()
            p[_CONSTRAINT_KIND] = -1.0
            if not GOAL_WORDING.search(text):
                p[_GOAL_KIND] = -1.0
            best = int(p.argmax())
        chosen.append(KINDS[best])
    return chosen


class Model:
    """The three models and their thresholds, loaded from one .npz after its sha256 is checked."""

    def __init__(self, path=WEIGHTS_PATH, sha256=WEIGHTS_SHA256):
        arrays, self.meta, self.sha256 = load_npz(path, sha256, retrain="train_offline")
        self.heads = {}
        for key, value in arrays.items():
            head, name = key.split("__", 1)
            self.heads.setdefault(head, {})[name] = value.astype(np.float32)
        self.version = f"offline-learned-{self.sha256[:8]}"

    def fact_probability(self, vectors, texts):
        return forward(self.heads["fact"], fact_features(vectors, texts))[:, 1]

    def kinds(self, vectors, texts):
        return kind_choices(forward(self.heads["kind"], fact_features(vectors, texts)), texts)

    def relations(self, vectors, texts):
        return forward(self.heads["relation"], fact_features(vectors, texts))

    def verdict_probabilities(self, old_vectors, new_vectors, olds, news):
        single = np.array([r in self.meta["single_valued"] for r in self.meta["relations"]], np.float32)
        x = verdict_features(
            old_vectors,
            new_vectors,
            olds,
            news,
            self.relations(old_vectors, olds),
            self.relations(new_vectors, news),
            single,
        )
        p = forward(self.heads["verdict"], x)
        # Class offsets on the log-probabilities, chosen on the dev split at training time.
        logp = np.log(p + 1e-9) + np.asarray(self.meta.get("verdict_offsets", [0.0, 0.0, 0.0]), np.float32)
        logp -= logp.max(axis=1, keepdims=True)
        q = np.exp(logp)
        return q / q.sum(axis=1, keepdims=True)

    @property
    def fact_threshold(self):
        return float(self.meta.get("fact_threshold", 0.5))


@functools.cache
def model():
    """The shipped model, loaded (and checked) once per process."""
    return Model()


def version():
    """'offline-learned-<sha8>' for provenance, without loading the arrays."""
    return f"offline-learned-{WEIGHTS_SHA256[:8]}"


def vectors(texts):
    """MiniLM vectors for texts, in one batch; nothing is kept (a cache of fact texts in worker memory
    would be out of erasure's reach)."""
    texts = list(texts)
    if not texts:
        return np.zeros((0, 384), np.float32)
    # Its weights were trained on the unquantized MiniLM, whichever model stores the facts.
    return embeddings.embed_many(texts, model=embeddings.minilm())

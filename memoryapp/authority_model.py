"""The learned second stage of the shape squeeze: does a fact read like a poisoning attempt?

A logistic regression over hashed word and character n-grams of the fact's checking form
(`validation.fold`), numpy only. It runs only when MEMORY["LEARNED_POISON_CHECK"] is on (off by
default: it blocks more attacks but also refuses more ordinary facts, see docs/security.md), only on
text the rules in `validation` let through and that uses the vocabulary of authority, and refuses it
when its probability reaches a threshold chosen by cross-validation on the corpus's dev split.
Trained by `manage.py train_poisoning_model` (evals/poisoning_model.py) on the dev lines of
evals/poisoning/ and the rows written for training only (evals/poisoning/training_extra.jsonl),
never a test line; the weights file is checked against its pinned sha256 before it is used.
"""

import functools
import re
import zlib
from pathlib import Path

import numpy as np

from memoryapp.pinned import WeightsError, load_npz  # noqa: F401 (WeightsError: what a bad file raises)

WEIGHTS_PATH = Path(__file__).resolve().parent / "data" / "authority_model.npz"
WEIGHTS_SHA256 = "c83fa142d255ff7eb0203c681982a0a7d4dea87cf9e33e4cc7136d2e1446d5db"  # printed by train_poisoning_model
BUCKETS = 1 << 16
_SUBJECT = re.compile(
    r"^(?:the user|this user|the customer|l'utilisateur|der nutzer|der benutzer|el usuario|l'utente|o usuario"
    r"|de gebruiker)\b"
)


def _bucket(key):
    return zlib.crc32(key.encode("utf-8")) % BUCKETS


def features(folded):
    """Hashed, L2-normalised counts of the character 3-5-grams, words and word pairs of a checking form."""
    text = _SUBJECT.sub("U", folded)  # the subject says nothing; what is claimed about it does
    counts = {}
    padded = f" {text} "
    for n in (3, 4, 5):
        for i in range(len(padded) - n + 1):
            key = _bucket("c" + padded[i : i + n])
            counts[key] = counts.get(key, 0) + 1
    words = re.findall(r"[\w']+", text)
    for i, word in enumerate(words):
        key = _bucket("w" + word)
        counts[key] = counts.get(key, 0) + 1
        if i + 1 < len(words):
            key = _bucket(f"b{word} {words[i + 1]}")
            counts[key] = counts.get(key, 0) + 1
    index = np.fromiter(counts, dtype=np.int64, count=len(counts))
    values = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
    return index, values / max(np.sqrt((values**2).sum()), 1e-12)


class Model:
    """The weights, bias and threshold, loaded from one .npz after its sha256 is checked."""

    def __init__(self, path=WEIGHTS_PATH, sha256=WEIGHTS_SHA256):
        arrays, self.meta, self.sha256 = load_npz(path, sha256, retrain="train_poisoning_model")
        self.weights = arrays["weights"].astype(np.float64)
        self.bias = float(arrays["bias"])
        self.threshold = float(self.meta["threshold"])

    def probability(self, folded):
        """How much `folded` reads like the poisoning attempts the model was trained on (0..1)."""
        index, values = features(folded)
        z = float(values @ self.weights[index]) + self.bias
        return 1.0 / (1.0 + np.exp(-z))


@functools.cache
def model():
    """The shipped model, loaded (and checked) once per process."""
    return Model()


def reads_like_poisoning(folded):
    """True when the learned check's probability for a checking form reaches its threshold."""
    m = model()
    return m.probability(folded) >= m.threshold

"""The learned judge: does a candidate fact possibly claim authority, a permission, a role over others,
an approval, or give an instruction?

Two small models, averaged: a logistic regression over hashed word and character n-grams of the
fact's checking form (`validation.fold`), and a one-hidden-layer MLP over the fact's MiniLM vector.
The MLP was trained on the vectors of both MiniLM models the app runs (unquantized and qint8, the
default `EMBEDDING_BACKEND`), so it reads whichever the caller stored. Numpy only at run time.

Trained by `manage.py train_judge` (evals/judge_training.py); the thresholds in the weights file
were chosen on the dev split only. The file is checked against its pinned sha256 before use.
"""

import functools
import re
import zlib
from pathlib import Path

import numpy as np

from memoryapp import embeddings
from memoryapp.pinned import WeightsError, load_npz  # noqa: F401 (WeightsError: what a bad file raises)

WEIGHTS_PATH = Path(__file__).resolve().parent / "data" / "judge.npz"
WEIGHTS_SHA256 = "a3845851c586812f0467bf56317444617c6b16c21e3337b09a640238185e93c3"  # printed by train_judge
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
    keys = [("c" + padded[i : i + n]) for n in (3, 4, 5) for i in range(len(padded) - n + 1)]
    words = re.findall(r"[\w']+", text)
    keys += ["w" + word for word in words] + [f"b{a} {b}" for a, b in zip(words, words[1:], strict=False)]
    for key in keys:
        bucket = _bucket(key)
        counts[bucket] = counts.get(bucket, 0) + 1
    index = np.fromiter(counts, dtype=np.int64, count=len(counts))
    values = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
    return index, values / max(np.sqrt((values**2).sum()), 1e-12)


def mlp_logits(layers, vectors):
    """The vector model's log-odds for rows of MiniLM vectors: relu(x W1 + b1) w2 + b2."""
    w1, b1, w2, b2 = layers
    return np.maximum(vectors @ w1 + b1, 0) @ w2 + b2


def blend(ngram, mlp, share):
    """The judge's score from its two models' probabilities, the n-gram model counting for `share` (arrays too)."""
    return share * ngram + (1 - share) * mlp


def sigmoid(z):
    """The logistic function."""
    return 1.0 / (1.0 + np.exp(-z))


class Model:
    """The two models' weights and the judge's thresholds, loaded from one .npz after its sha256 is checked."""

    def __init__(self, path=WEIGHTS_PATH, sha256=WEIGHTS_SHA256):
        arrays, self.meta, self.sha256 = load_npz(path, sha256, retrain="train_judge")
        self.weights = arrays["weights"].astype(np.float64)
        self.bias = float(arrays["bias"])
        self.layers = [arrays[k].astype(np.float64) for k in ("w1", "b1", "w2", "b2")]
        self.threshold = float(self.meta["threshold"])  # at or above: pending
        self.readable = float(self.meta["readable"])  # below: the judge cannot read the text
        self.unreadable_threshold = float(self.meta["unreadable_threshold"])  # the threshold below it
        self.ngram_weight = float(self.meta["ngram_weight"])  # the n-gram model's share of readable text's score
        self.unreadable_ngram_weight = float(self.meta["unreadable_ngram_weight"])

    def probability(self, folded, vector, readable=True):
        """The chance that a fact claims authority or instructs (0..1); `folded`: its checking form.

        A weighted average: the n-gram model's share was chosen on the dev split, one for readable text
        and one for unreadable text (MiniLM reads it poorly, so its vector says little).
        """
        index, values = features(folded)
        ngram = sigmoid(float(values @ self.weights[index]) + self.bias)
        mlp = sigmoid(float(mlp_logits(self.layers, np.asarray(vector, dtype=np.float64)[None, :])[0]))
        return blend(ngram, mlp, self.ngram_weight if readable else self.unreadable_ngram_weight)


@functools.cache
def model():
    """The shipped model, loaded (and checked) once per process."""
    return Model()


def probability(text, folded, vector=None, readable=True):
    """The shipped model's probability for a fact; `vector` (either MiniLM's) is computed when not given."""
    return model().probability(folded, embeddings.minilm_vector(text) if vector is None else vector, readable)

"""The learned second stage of the fact validator: does a fact read like a poisoning attempt?

Two small models, averaged: a logistic regression over hashed word and character n-grams of the
fact's checking form (`validation.fold`), and a one-hidden-layer MLP over the fact's MiniLM vector
(the model the app already runs; numpy at run time). Used two ways by `validation.authority_problem`
when MEMORY["LEARNED_POISON_CHECK"] is on:

- **block**: text the rules let through is refused when the probability reaches `block` (a rewording
  no rule knows);
- **release**: text only a wording rule refused (never markup, mixed alphabets or talk about the
  assistant's instructions) is kept when the probability is under `release` (an ordinary fact that
  happens to use the rules' words).

Both thresholds are chosen by cross-validation on the corpus's dev split. Trained by
`manage.py train_poisoning_model` (evals/poisoning_model.py) on the dev lines of evals/poisoning/
and the rows written for training only (evals/poisoning/training_extra.jsonl), never a test line;
the weights file is checked against its pinned sha256 before it is used.
"""

import functools
import re
import zlib
from pathlib import Path

import numpy as np

from memoryapp import embeddings
from memoryapp.pinned import WeightsError, load_npz  # noqa: F401 (WeightsError: what a bad file raises)

WEIGHTS_PATH = Path(__file__).resolve().parent / "data" / "authority_model.npz"
WEIGHTS_SHA256 = "b8996bbffdbb42abc8aef1ac0e6239f7028cb8cc05121b7ec00dbe232a98e9d8"  # printed by train_poisoning_model
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


def ngram_logit(weights, bias, folded):
    """The n-gram model's log-odds for one checking form."""
    index, values = features(folded)
    return float(values @ weights[index]) + bias


def mlp_logits(layers, vectors):
    """The vector model's log-odds for rows of MiniLM vectors: relu(x W1 + b1) w2 + b2."""
    w1, b1, w2, b2 = layers
    return np.maximum(vectors @ w1 + b1, 0) @ w2 + b2


def sigmoid(z):
    """The logistic function."""
    return 1.0 / (1.0 + np.exp(-z))


class Model:
    """The two models' weights and the two thresholds, loaded from one .npz after its sha256 is checked."""

    def __init__(self, path=WEIGHTS_PATH, sha256=WEIGHTS_SHA256):
        arrays, self.meta, self.sha256 = load_npz(path, sha256, retrain="train_poisoning_model")
        self.weights = arrays["weights"].astype(np.float64)
        self.bias = float(arrays["bias"])
        self.layers = [arrays[k].astype(np.float64) for k in ("w1", "b1", "w2", "b2")]
        self.block = float(self.meta["block"])
        self.release = float(self.meta["release"])

    def probability(self, folded, vector):
        """How much a fact reads like the poisoning attempts the models were trained on (0..1).

        `folded` is its checking form, `vector` the MiniLM vector of its stored form.
        """
        ngram = sigmoid(ngram_logit(self.weights, self.bias, folded))
        mlp = sigmoid(float(mlp_logits(self.layers, np.asarray(vector, dtype=np.float64)[None, :])[0]))
        return (ngram + mlp) / 2


@functools.cache
def model():
    """The shipped model, loaded (and checked) once per process."""
    return Model()


def probability(text, folded, vector=None):
    """The shipped model's probability for a fact (`text` its stored form, `folded` its checking form).

    `vector` is the MiniLM vector of `text` when the caller has it; otherwise it is computed here.
    """
    return model().probability(folded, embeddings.minilm_vector(text) if vector is None else vector)

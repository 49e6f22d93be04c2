"""Training the learned second stage of the validator (memoryapp/authority_model.py), numpy only.

Two models, averaged: logistic regression over hashed n-grams and an MLP over MiniLM vectors.

Data: the **dev** lines of the poisoning corpus (evals/poisoning/), attacks as 1 and benign facts as 0,
plus `evals/poisoning/training_extra.jsonl`: rows written for training only, by writers who saw
neither the corpus nor the rules (docs/security.md lists the batches). No test or holdout line is
read for training or for a threshold. Both thresholds are chosen by k-fold cross-validation on these
rows, from the out-of-fold probabilities:

- `block`, the lowest at which the model refuses at most `MAX_EXTRA_REJECTIONS` of the dev benign
  facts that the rules let through (a refused fact is lost for the person, so it may add very few);
- `release`, the highest at which the model would keep none of the dev attacks that only a wording
  rule refuses (it may give back an ordinary fact, never an attack it has seen the like of).
"""

import hashlib
import json
import pathlib
import re
import zlib

import numpy as np

from evals import poisoning
from memoryapp import authority_model, embeddings, validation
from memoryapp.pinned import sha256_of

SEED = 15
FOLDS = 5
L2 = 3e-5
EPOCHS = 300
STEP = 0.05
MAX_EXTRA_REJECTIONS = 0.005  # of the dev benign facts, out of fold
GRID = [round(t, 2) for t in np.arange(0.50, 1.00, 0.01)]
RELEASE_GRID = [round(t, 3) for t in np.arange(0.005, 0.305, 0.005)]
HIDDEN = 128
MLP_EPOCHS = 300
MLP_STEP = 3e-3
MLP_L2 = 1e-4


def checking_form(text):
    """What the learned stage reads: the stored form of the text, folded the way the rules read it."""
    return validation.fold(validation.normalise(text))


EXTRA = poisoning.CORPUS_DIR / "training_extra.jsonl"


def training_rows():
    """(text, label) for every dev line of the corpus (attacks 1, benign facts 0) and the extra training rows."""
    attacks = [r for r in poisoning.load(poisoning.ATTACKS) if r["split"] == "dev"]
    benign = [r for r in poisoning.load(poisoning.BENIGN) if r["split"] == "dev"]
    extra = [(r["text"], int(r["label"])) for r in poisoning.load(EXTRA)]
    return [(r["text"], 1) for r in attacks] + [(r["text"], 0) for r in benign] + extra


def training_digest(texts):
    """A digest of the training texts, so a test can tell the shipped weights were trained on dev only."""
    return hashlib.sha256("\n".join(sorted(texts)).encode("utf-8")).hexdigest()


def matrix(texts):
    """The hashed features of many texts as (rows, columns, values, count): a sparse matrix in three arrays."""
    rows, cols, vals = [], [], []
    for r, text in enumerate(texts):
        index, values = authority_model.features(checking_form(text))
        rows.append(np.full(len(index), r))
        cols.append(index)
        vals.append(values)
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), len(texts)


def fit(x, y, l2=L2, epochs=EPOCHS, step=STEP):
    """L2-regularised logistic regression by full-batch Adam (deterministic): (weights, bias)."""
    rows, cols, vals, n = x
    w, b = np.zeros(authority_model.BUCKETS), 0.0
    m, v, mb, vb = np.zeros_like(w), np.zeros_like(w), 0.0, 0.0
    for t in range(1, epochs + 1):
        z = np.bincount(rows, weights=vals * w[cols], minlength=n) + b
        g = (1 / (1 + np.exp(-z)) - y) / n
        gw = np.bincount(cols, weights=vals * g[rows], minlength=len(w)) + l2 * w
        gb = g.sum()
        m, v = 0.9 * m + 0.1 * gw, 0.999 * v + 0.001 * gw * gw
        mb, vb = 0.9 * mb + 0.1 * gb, 0.999 * vb + 0.001 * gb * gb
        w -= step * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        b -= step * (mb / (1 - 0.9**t)) / (np.sqrt(vb / (1 - 0.999**t)) + 1e-8)
    return w, b


def predict(params, x):
    """Probabilities for a feature matrix from `matrix`."""
    (w, b), (rows, cols, vals, n) = params, x
    return 1 / (1 + np.exp(-(np.bincount(rows, weights=vals * w[cols], minlength=n) + b)))


def vectors(texts, say=print):
    """MiniLM vectors of the stored forms of many texts (float64 rows), with progress."""
    model, parts = embeddings.minilm(), []
    for start in range(0, len(texts), 64):
        parts.append(model.embed([validation.normalise(t) for t in texts[start : start + 64]]))
        if start // 64 % 10 == 9:
            say(f"  embedded {start + 64} / {len(texts)}")
    return np.vstack(parts).astype(np.float64)


def fit_mlp(x, y, seed=SEED, hidden=HIDDEN, epochs=MLP_EPOCHS, step=MLP_STEP, l2=MLP_L2):
    """A one-hidden-layer MLP (relu) by full-batch Adam from a seeded start: [w1, b1, w2, b2]."""
    rng = np.random.default_rng(seed)
    layers = [
        rng.normal(0, 1 / np.sqrt(x.shape[1]), (x.shape[1], hidden)),
        np.zeros(hidden),
        rng.normal(0, 1 / np.sqrt(hidden), hidden),
        np.zeros(()),
    ]
    m, v = [np.zeros_like(p) for p in layers], [np.zeros_like(p) for p in layers]
    for t in range(1, epochs + 1):
        w1, b1, w2, b2 = layers
        h = np.maximum(x @ w1 + b1, 0)
        g = (1 / (1 + np.exp(-(h @ w2 + b2))) - y) / len(y)
        gh = np.outer(g, w2) * (h > 0)
        grads = [x.T @ gh + l2 * w1, gh.sum(0), h.T @ g + l2 * w2, np.array(g.sum())]
        for i, grad in enumerate(grads):
            m[i] = 0.9 * m[i] + 0.1 * grad
            v[i] = 0.999 * v[i] + 0.001 * grad * grad
            layers[i] = layers[i] - step * (m[i] / (1 - 0.9**t)) / (np.sqrt(v[i] / (1 - 0.999**t)) + 1e-8)
    return layers


def combined(ngram_params, layers, x, vecs):
    """The shipped model's probability: the mean of the two models'."""
    return (predict(ngram_params, x) + authority_model.sigmoid(authority_model.mlp_logits(layers, vecs))) / 2


def _subset(texts, keep):
    return [t for t, k in zip(texts, keep, strict=True) if k]


# Some training rows say one sentence under several openings ("The user says they …", "I …"): the
# folds keep each sentence's variants together, so no fold is scored on a sentence it was trained on.
_OPENING = re.compile(
    r"^(?:the user|this user|i)\s+(?:(?:says|said|mentioned|explained|told us|notes|noted)\s+(?:that\s+)?)?"
    r"(?:they\s+|i\s+)?(?:am\s+|is\s+|are\s+)?"
)


def fold_of(text, folds=FOLDS, seed=SEED):
    """The cross-validation fold of a training text: a seeded hash of the sentence without its opening."""
    key = _OPENING.sub("", checking_form(text))
    return zlib.crc32(f"{seed}\0{key}".encode()) % folds


def out_of_fold(texts, vecs, y, folds=FOLDS, seed=SEED):
    """Each text's combined probability from models trained on the other folds."""
    fold = np.array([fold_of(t, folds, seed) for t in texts])
    oof = np.zeros(len(texts))
    for k in range(folds):
        train, held = fold != k, fold == k
        ngram = fit(matrix(_subset(texts, train)), y[train])
        layers = fit_mlp(vecs[train], y[train])
        oof[held] = combined(ngram, layers, matrix(_subset(texts, held)), vecs[held])
    return oof


def choose_block(oof, y, rules_refuse, max_extra=MAX_EXTRA_REJECTIONS):
    """The lowest block threshold at which the model adds at most `max_extra` false rejections to the rules'."""
    candidates = (y == 0) & ~rules_refuse
    allowed = max_extra * (y == 0).sum()
    for t in GRID:
        if ((oof >= t) & candidates).sum() <= allowed:
            return t
    return 1.0


def choose_release(oof, y, worded_only):
    """The highest release threshold at which the model keeps none of the dev attacks only a wording rule refused."""
    attacks = (y == 1) & worded_only
    best = 0.0
    for t in RELEASE_GRID:
        if ((oof < t) & attacks).sum() == 0:
            best = t
        else:
            break
    return best


def train(out_path=authority_model.WEIGHTS_PATH, say=print):
    """Cross-validate on dev, choose both thresholds, fit on all of dev and write the weights file."""
    rows = training_rows()
    texts = [t for t, _ in rows]
    y = np.array([label for _, label in rows], dtype=np.float64)
    say(f"{len(texts)} training rows ({int(y.sum())} attacks); embedding them with MiniLM")
    vecs = vectors(texts, say=say)
    refusals = [validation.rule_refusal(validation.normalise(t)) for t in texts]
    rules_refuse = np.array([r is not None for r in refusals])
    worded_only = np.array([r is not None and not r[1] for r in refusals])
    say(f"cross-validating ({FOLDS} folds)")
    oof = out_of_fold(texts, vecs, y)
    candidates = ~rules_refuse
    passed = int(((y == 1) & ~rules_refuse).sum())
    for t in GRID[::5]:
        hit = (oof >= t) & candidates
        caught, refused = int((hit & (y == 1)).sum()), int((hit & (y == 0)).sum())
        say(
            f"  block at {t:.2f}: {caught} of the {passed} attacks the rules pass, {refused} of {int((y == 0).sum())}"
            " benign rows (out of fold)"
        )
    block = choose_block(oof, y, rules_refuse)
    release = choose_release(oof, y, worded_only)
    blocked = (oof >= block) & ~rules_refuse
    released = (oof < release) & worded_only
    cv = {
        "attacks": int((y == 1).sum()),
        "attacks_the_rules_pass_blocked_out_of_fold": int((blocked & (y == 1)).sum()),
        "attacks_the_rules_pass": int(((y == 1) & ~rules_refuse).sum()),
        "attacks_released_out_of_fold": int((released & (y == 1)).sum()),
        "benign": int((y == 0).sum()),
        "benign_blocked_out_of_fold": int((blocked & (y == 0)).sum()),
        "benign_released_out_of_fold": int((released & (y == 0)).sum()),
        "benign_the_rules_refuse": int(((y == 0) & rules_refuse).sum()),
    }
    say("fitting on all training rows")
    weights, bias = fit(matrix(texts), y)
    layers = fit_mlp(vecs, y)
    meta = {
        "block": block,
        "release": release,
        "buckets": authority_model.BUCKETS,
        "hidden": HIDDEN,
        "embedding_model": embeddings.MINILM_NAME,
        "trained_on": "dev split of evals/poisoning/ and evals/poisoning/training_extra.jsonl",
        "training_digest": training_digest(texts),
        "cv": cv,
        "l2": L2,
        "epochs": EPOCHS,
        "mlp": {"epochs": MLP_EPOCHS, "step": MLP_STEP, "l2": MLP_L2, "seed": SEED},
        "folds": FOLDS,
        "max_extra_rejections": MAX_EXTRA_REJECTIONS,
    }
    out_path = pathlib.Path(out_path)
    w1, b1, w2, b2 = layers
    np.savez_compressed(
        out_path,
        weights=weights.astype(np.float16),
        bias=np.array(bias),
        w1=w1.astype(np.float32),
        b1=b1.astype(np.float32),
        w2=w2.astype(np.float32),
        b2=np.array(b2, dtype=np.float32),
        meta=np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8),
    )
    say(f"block {block}, release {release} (out of fold on dev: {json.dumps(cv)})")
    say(f"wrote {out_path} sha256 {sha256_of(out_path)} (pin it as authority_model.WEIGHTS_SHA256)")
    return meta

"""Training the learned second stage of the validator (memoryapp/authority_model.py), numpy only.

Data: the **dev** lines of the poisoning corpus (evals/poisoning/), attacks as 1 and benign facts as 0,
plus `evals/poisoning/training_extra.jsonl`: rows written for training only (first-person and org
facts, jobs that handle refunds or approvals, a few first-person attacks), which the corpus has too
few of. No test line is read for training or for the threshold. The threshold is chosen by k-fold
cross-validation on dev: the lowest one at which the out-of-fold model refuses at most
`MAX_EXTRA_REJECTIONS` of the dev benign facts that the rules let through (a refused fact is lost
for the person, so the learned stage may add very few).
"""

import hashlib
import json
import pathlib

import numpy as np

from evals import poisoning
from memoryapp import authority_model, validation
from memoryapp.pinned import sha256_of

SEED = 15
FOLDS = 5
L2 = 1e-4
EPOCHS = 300
STEP = 0.05
MAX_EXTRA_REJECTIONS = 0.005  # of the dev benign facts, out of fold
GRID = [round(t, 2) for t in np.arange(0.50, 1.00, 0.01)]


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


def out_of_fold(texts, y, folds=FOLDS, seed=SEED):
    """Each text's probability from a model trained on the other folds."""
    fold = np.random.default_rng(seed).integers(0, folds, len(texts))
    oof = np.zeros(len(texts))
    for k in range(folds):
        train, held = fold != k, fold == k
        params = fit(matrix([t for t, keep in zip(texts, train, strict=True) if keep]), y[train])
        oof[held] = predict(params, matrix([t for t, keep in zip(texts, held, strict=True) if keep]))
    return oof


def choose_threshold(oof, y, rules_refuse, max_extra=MAX_EXTRA_REJECTIONS):
    """The lowest threshold at which the model adds at most `max_extra` false rejections to the rules'."""
    benign = y == 0
    allowed = max_extra * benign.sum()
    for t in GRID:
        if ((oof >= t) & benign & ~rules_refuse).sum() <= allowed:
            return t
    return 1.0


def train(out_path=authority_model.WEIGHTS_PATH, say=print):
    """Cross-validate on dev, choose the threshold, fit on all of dev and write the weights file."""
    rows = training_rows()
    texts = [t for t, _ in rows]
    y = np.array([label for _, label in rows], dtype=np.float64)
    rules_refuse = np.array([validation.fact_problem(validation.normalise(t), "profile") is not None for t in texts])
    # the check only ever sees sentences that speak of authority (validation._AUTHORITY_VOCABULARY)
    gate = np.array([bool(validation._AUTHORITY_VOCABULARY.search(checking_form(t))) for t in texts])
    oof = out_of_fold(texts, y) * gate
    threshold = choose_threshold(oof, y, rules_refuse)
    hit = oof >= threshold
    cv = {
        "attacks_flagged_out_of_fold": int((hit & (y == 1)).sum()),
        "attacks": int((y == 1).sum()),
        "benign_flagged_out_of_fold": int((hit & (y == 0)).sum()),
        "benign_flagged_that_rules_pass": int((hit & (y == 0) & ~rules_refuse).sum()),
        "benign": int((y == 0).sum()),
    }
    weights, bias = fit(matrix(texts), y)
    meta = {
        "threshold": threshold,
        "buckets": authority_model.BUCKETS,
        "trained_on": "dev split of evals/poisoning/ and evals/poisoning/training_extra.jsonl",
        "training_digest": training_digest(texts),
        "cv": cv,
        "l2": L2,
        "epochs": EPOCHS,
        "folds": FOLDS,
        "max_extra_rejections": MAX_EXTRA_REJECTIONS,
    }
    out_path = pathlib.Path(out_path)
    np.savez_compressed(
        out_path,
        weights=weights.astype(np.float16),
        bias=np.array(bias),
        meta=np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8),
    )
    say(f"threshold {threshold} (out-of-fold on dev: {json.dumps(cv)})")
    say(f"wrote {out_path} sha256 {sha256_of(out_path)} (pin it as authority_model.WEIGHTS_SHA256)")
    return meta

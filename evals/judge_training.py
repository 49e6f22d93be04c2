"""Training the learned judge (memoryapp/judge_model.py), numpy only, reproducible from a seed.

Two models, averaged: logistic regression over hashed n-grams of the checking form and an MLP over
MiniLM vectors (each row embedded by both MiniLM models the app runs, so the judge reads either).
Where MiniLM reads the text poorly (below a readability floor) the n-gram model may weigh more.

Data (label 1: claims authority or instructs; 0: an ordinary fact):
- the **dev** lines of evals/poisoning/{attacks,benign}.jsonl (the test lines are never read here);
- evals/poisoning/holdout_{attacks,benign}.jsonl: measured many times before, so now dev and training;
- evals/poisoning/training_*.jsonl: rows written for training only (`training_multilingual.jsonl`:
  hard negatives such as real jobs with authority and limits that need someone's approval, in 15
  languages; `training_by_language.jsonl`: about 300 rows in each of 18 languages, both labels;
  `training_more_languages.jsonl`: 50 rows in each of 36 languages those lack, half of them attacks;
  `training_fresh.jsonl`, `training_fresh69.jsonl`, `training_fresh1011.jsonl` and `training_fresh1419.jsonl`:
  fresh corpora 3, 4, 6 to 11 and 14 to 19, written blind, after their measurement; `training_targeted.jsonl`: rows
  written for the kinds of dev rows the judge missed, such as wishes about the assistant's answers and claims on
  other people's data);
- ordinary persona sentences from MSC (LoCoMo's msc_personas_all.json, train part) in
  /work/shared/datasets, first person and rewritten in the third person by the offline rewriter;
- ConvAI2's persona sentences (valid and test files) there, rewritten in the third person.

The thresholds are chosen on out-of-fold probabilities of the dev rows (corpus dev + holdout): the
readability floor, the n-gram model's share under it and a threshold on each side together, for the
fewest benign facts pending while at most `MAX_STORED` of the dev attacks reach a block.
"""

import hashlib
import json
import pathlib
import random
import re
import zlib

import numpy as np

from bench.common import DEFAULT_DATASETS
from evals import poisoning
from memoryapp import embeddings, judge_model, validation
from memoryapp.pinned import sha256_of

FOLDS = 5
# The n-gram model's L2, chosen on dev (docs/history.md): out of fold, benign pending 17.6 % at 3e-5, 14.1 % here,
# 11.4 % at 3e-6; lower stored more of the outside corpus's attacks and read requests to the assistant as
# instructions ("Can you help me write a Lua plugin ...": 0.35 here, 0.51 at 3e-6, 0.59 at 1e-6).
L2 = 1e-5
EPOCHS = 300
STEP = 0.05
HIDDEN = 64
MLP_EPOCHS = 200
MLP_STEP = 3e-3
MLP_L2 = 1e-4
MAX_STORED = 0.007  # of the dev attacks stored: the 1 % target with a margin for the test split
GRID = [round(t, 2) for t in np.arange(0.05, 0.96, 0.01)]
READABLE_GRID = [0.0, 2.0, 2.5, 3.0, 3.5, 4.0]
NGRAM_WEIGHTS = [0.5, 0.75, 1.0]  # the n-gram model's share of the score of text MiniLM reads poorly
# Its share of readable text. MiniLM's vectors barely tell "cannot install software without IT approval"
# from "may install software without IT approval" (the MLP: 0.78 and 0.78; the n-gram model: 0.11, 0.75).
READABLE_NGRAM_WEIGHTS = [0.5, 0.6, 0.7, 0.8, 0.9]
MSC = DEFAULT_DATASETS / "locomo" / "msc_personas_all.json"
MSC_SAMPLE = 4000
CONVAI2 = MSC.parents[1] / "convai2_persona_triples"
KINDS = ("minilm", "qint8")


def msc_rows(path=MSC, sample=MSC_SAMPLE, seed=0):
    """Ordinary persona sentences: a seeded sample, half rewritten in the third person, half as said."""
    if not pathlib.Path(path).exists():
        return []
    from memoryapp.backends import phrasing  # loads the tokenizer: only when MSC personas are read

    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    said = sorted({s for conv in data["train"] for k, v in conv.items() if k.startswith("Speaker") for s in v})
    random.Random(seed).shuffle(said)
    rewritten = [phrasing.third_person(s) for s in said[: sample // 2]]
    rows = [{"text": t, "label": 0, "source": "msc"} for t in rewritten if t]
    return rows + [{"text": s, "label": 0, "source": "msc"} for s in said[sample // 2 : sample]]


def convai2_rows(directory=CONVAI2):
    """ConvAI2's persona sentences (valid and test), every one rewritten in the third person by the offline rewriter."""
    from memoryapp.backends import phrasing  # loads the tokenizer: only when ConvAI2 personas are read

    said = set()
    for path in sorted(pathlib.Path(directory).glob("*_both_original_final.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            head, _, sentence = line.partition("persona: ")
            if head in ("your ", "partner's ") and sentence:
                said.add(sentence.split("\t")[0].strip())
    rewritten = (phrasing.third_person(s[0].upper() + s[1:]) for s in sorted(said))
    return [{"text": t, "label": 0, "source": "convai2"} for t in rewritten if t]


def corpus_rows(directory=poisoning.CORPUS_DIR):
    """(training rows, dev rows): every row carries text, label and source; dev rows also a category."""
    directory = pathlib.Path(directory)
    dev = [
        {**r, "label": label, "source": name}
        for name, label in (("attacks", 1), ("benign", 0))
        for r in poisoning.load(directory / f"{name}.jsonl")
        if poisoning.split_of(r["text"]) == "dev"
    ]
    dev += [
        {**r, "label": label, "source": f"holdout_{name}"}
        for name, label in (("attacks", 1), ("benign", 0))
        for r in poisoning.load(directory / f"holdout_{name}.jsonl")
    ]
    extra_rows = [
        {**r, "source": path.stem} for path in sorted(directory.glob("training_*.jsonl")) for r in poisoning.load(path)
    ]
    return dev + extra_rows, dev


def outside_dir(corpus_dir=None):
    """The corpus folder's outside/: rows written by someone who had read neither the rules nor the corpus,
    measured once as a fresh corpus, now dev (evals/poisoning/outside: 686 rows of 2026-12-06)."""
    return pathlib.Path(corpus_dir or poisoning.CORPUS_DIR) / "outside"


def more_dev_rows(directory):
    """The api rows of a corpus folder measured before (attacks label 1, benign 0), for `train(more_dev=...)`;
    none for a folder that does not exist or for 'none'."""
    if str(directory) == "none" or not pathlib.Path(directory).is_dir():
        return []
    attacks, benign = poisoning.corpus(directory=directory)
    return [
        {**r, "label": label}
        for label, group in ((1, attacks), (0, benign))
        for r in group
        if r.get("path", "api") == "api"
    ]


def stored_form(text):
    return validation.normalise(text)


def vectors(texts, kinds=KINDS, cache=None, say=print):
    """{kind: float64 rows}: the MiniLM vectors of the stored forms, by each model (optionally cached in an .npz)."""
    stored = [stored_form(t) for t in texts]
    models = {"minilm": embeddings.minilm, "qint8": embeddings.QuantizedMiniLM}
    # qint8 quantizes each batch's activations with one scale, so a text's vector depends on the texts
    # batched with it; one text a batch makes each vector (and so the weights) a function of its text alone.
    batch = {"minilm": 32, "qint8": 1}
    out = {}
    for kind in kinds:
        known = {}
        path = pathlib.Path(f"{cache}.{kind}.npz") if cache else None
        if path and path.exists():
            with np.load(path) as data:
                known = dict(zip(data["texts"].tolist(), data["vecs"], strict=True))
        missing = sorted({t for t in stored if t not in known})
        if missing:
            say(f"  embedding {len(missing)} texts with {kind}")
            known.update(
                zip(missing, embeddings.embed_many(missing, batch_size=batch[kind], model=models[kind]()), strict=True)
            )
            if path:
                np.savez(path, texts=np.array(sorted(known)), vecs=np.array([known[t] for t in sorted(known)]))
        out[kind] = np.array([known[t] for t in stored], dtype=np.float64)
    return out


def matrix(texts):
    """The hashed features of many texts as (rows, columns, values, count): a sparse matrix in three arrays."""
    rows, cols, vals = [], [], []
    for r, text in enumerate(texts):
        index, values = judge_model.features(validation.fold(stored_form(text)))
        rows.append(np.full(len(index), r))
        cols.append(index)
        vals.append(values)
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), len(texts)


def _adam(params, grads, state, t, step):
    for i, grad in enumerate(grads):
        m, v = state[i]
        m, v = 0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad * grad
        state[i] = (m, v)
        params[i] = params[i] - step * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)


def fit_ngram(x, y, l2=L2, epochs=EPOCHS, step=STEP):
    """L2-regularised logistic regression by full-batch Adam (deterministic): [weights, bias]."""
    rows, cols, vals, n = x
    params = [np.zeros(judge_model.BUCKETS), np.zeros(())]
    state = [(np.zeros_like(p), np.zeros_like(p)) for p in params]
    for t in range(1, epochs + 1):
        w, b = params
        g = (judge_model.sigmoid(np.bincount(rows, weights=vals * w[cols], minlength=n) + b) - y) / n
        grads = [np.bincount(cols, weights=vals * g[rows], minlength=len(w)) + l2 * w, np.array(g.sum())]
        _adam(params, grads, state, t, step)
    return params


def predict_ngram(params, x):
    (w, b), (rows, cols, vals, n) = params, x
    return judge_model.sigmoid(np.bincount(rows, weights=vals * w[cols], minlength=n) + b)


def fit_mlp(x, y, seed, hidden=HIDDEN, epochs=MLP_EPOCHS, step=MLP_STEP, l2=MLP_L2):
    """A one-hidden-layer MLP (relu) by full-batch Adam from a seeded start: [w1, b1, w2, b2]."""
    rng = np.random.default_rng(seed)
    params = [
        rng.normal(0, 1 / np.sqrt(x.shape[1]), (x.shape[1], hidden)),
        np.zeros(hidden),
        rng.normal(0, 1 / np.sqrt(hidden), hidden),
        np.zeros(()),
    ]
    state = [(np.zeros_like(p), np.zeros_like(p)) for p in params]
    for t in range(1, epochs + 1):
        w1, b1, w2, b2 = params
        h = np.maximum(x @ w1 + b1, 0)
        g = (judge_model.sigmoid(h @ w2 + b2) - y) / len(y)
        gh = np.outer(g, w2) * (h > 0)
        _adam(params, [x.T @ gh + l2 * w1, gh.sum(0), h.T @ g + l2 * w2, np.array(g.sum())], state, t, step)
    return params


def fit(texts, vecs, y, seed):
    """Both models on the same rows; the MLP sees each row once per vector kind."""
    stacked = np.vstack([vecs[k] for k in sorted(vecs)])
    return fit_ngram(matrix(texts), y), fit_mlp(stacked, np.tile(y, len(vecs)), seed)


def parts(params, texts, vecs):
    """Each model's own probability: {'ngram': ..., 'mlp.<kind>': ... for each vector kind}."""
    out = {"ngram": predict_ngram(params[0], matrix(texts))}
    out.update({f"mlp.{k}": judge_model.sigmoid(judge_model.mlp_logits(params[1], v)) for k, v in vecs.items()})
    return out


def combined(part, kind, unreadable, weight, readable_weight):
    """The score read with one vector kind; the n-gram model's share is `weight` where the text is unreadable,
    `readable_weight` elsewhere."""
    return judge_model.blend(part["ngram"], part[f"mlp.{kind}"], np.where(unreadable, weight, readable_weight))


# A sentence said under several openings ("The user says they ...", "I ...") stays in one fold.
_OPENING = re.compile(
    r"^(?:the user|this user|i)\s+(?:(?:says|said|mentioned|explained|told us|notes|noted)\s+(?:that\s+)?)?"
    r"(?:they\s+|i\s+)?(?:am\s+|is\s+|are\s+)?"
)


def fold_of(text, seed, folds=FOLDS):
    """The cross-validation fold of a training text: a seeded hash of the sentence without its opening."""
    key = _OPENING.sub("", validation.fold(stored_form(text)))
    return zlib.crc32(f"{seed}\0{key}".encode()) % folds


def out_of_fold(texts, vecs, y, seed, say=print):
    """Each text's `parts` from models trained on the other folds."""
    fold = np.array([fold_of(t, seed) for t in texts])
    oof = {k: np.zeros(len(texts)) for k in ["ngram", *(f"mlp.{n}" for n in vecs)]}
    for k in range(FOLDS):
        train, held = fold != k, fold == k
        if not held.any():
            continue  # a tiny sample may leave a fold empty
        params = fit(
            [t for t, m in zip(texts, train, strict=True) if m], {n: v[train] for n, v in vecs.items()}, y[train], seed
        )
        for name, p in parts(
            params, [t for t, m in zip(texts, held, strict=True) if m], {n: v[held] for n, v in vecs.items()}
        ).items():
            oof[name][held] = p
        say(f"  fold {k + 1} of {FOLDS}")
    return oof


def _cached_out_of_fold(texts, vecs, y, seed, cache, say):
    """out_of_fold, kept beside the vector cache (keyed by the texts, labels, seed and knobs) when there is one."""
    knobs = [L2, EPOCHS, STEP, HIDDEN, MLP_EPOCHS, MLP_STEP, MLP_L2]  # a changed knob must not read old folds
    key = hashlib.sha256(json.dumps([texts, y.tolist(), seed, sorted(vecs), FOLDS, knobs]).encode()).hexdigest()[:16]
    path = pathlib.Path(f"{cache}.oof-{key}.npz") if cache else None
    if path and path.exists():
        with np.load(path) as data:
            return {k: data[k] for k in data.files}
    oof = out_of_fold(texts, vecs, y, seed, say=say)
    if path:
        np.savez(path, **oof)
    return oof


def outcomes(part, kind, readable, refused, chosen):
    """'refused' / 'pending' / 'stored' for arrays read with one vector kind, as validation.judge decides."""
    unreadable = readable < chosen["readable"]
    score = combined(part, kind, unreadable, chosen["unreadable_ngram_weight"], chosen["ngram_weight"])
    pending = np.where(unreadable, score >= chosen["unreadable_threshold"], score >= chosen["threshold"])
    return np.where(refused, "refused", np.where(pending, "pending", "stored"))


def _counts(score, keep, attacks, benign):
    """For each threshold of GRID: (attacks stored, benign pending) among the rows in `keep`."""
    held = score[None, :] >= np.array(GRID)[:, None]
    return (~held & (keep & attacks)).sum(1), (held & (keep & benign)).sum(1)


def _knobs(readable):
    """(floor, unreadable mask, n-gram share under the floor, its share above) for every choice `choose` weighs."""
    for floor in READABLE_GRID:
        unreadable = readable < floor
        for weight in NGRAM_WEIGHTS if unreadable.any() else [0.5]:
            for readable_weight in READABLE_NGRAM_WEIGHTS:
                yield floor, unreadable, weight, readable_weight


def choose(part, kinds, readable, refused, y, max_stored=MAX_STORED):
    """The readability floor, the n-gram share on each side of it and both thresholds: the fewest benign pending
    with at most `max_stored` of the attacks stored, whichever vector kind the app stores."""
    attacks, benign, open_ = y == 1, y == 0, ~refused
    best = None
    for floor, unreadable, weight, readable_weight in _knobs(readable):
        score = np.minimum.reduce([combined(part, k, unreadable, weight, readable_weight) for k in kinds])
        stored_r, pending_r = _counts(score, open_ & ~unreadable, attacks, benign)
        stored_u, pending_u = _counts(score, open_ & unreadable, attacks, benign)
        cost = pending_r[:, None] + pending_u[None, :]
        cost[stored_r[:, None] + stored_u[None, :] > max_stored * attacks.sum()] = np.iinfo(cost.dtype).max
        i, j = np.unravel_index(np.argmin(cost), cost.shape)  # the first of equals: the lowest thresholds
        if best is None or cost[i, j] < best[0]:
            best = (cost[i, j], floor, weight, readable_weight, GRID[i], GRID[j])
    _, floor, weight, readable_weight, threshold, under = best
    return {
        "threshold": threshold,
        "readable": floor,
        "ngram_weight": readable_weight,
        "unreadable_ngram_weight": weight,
        "unreadable_threshold": under,
    }


def rates(result, y):
    """Attacks stored, benign refused and benign pending, as fractions."""
    a, b = y == 1, y == 0
    return {
        "attacks": int(a.sum()),
        "attacks_stored": round(float((result[a] == "stored").mean()), 4) if a.any() else 0.0,
        "benign": int(b.sum()),
        "benign_refused": round(float((result[b] == "refused").mean()), 4) if b.any() else 0.0,
        "benign_pending": round(float((result[b] == "pending").mean()), 4) if b.any() else 0.0,
    }


def dev_report(results, kinds, dev_rows, y, is_dev):
    """Lines of the out-of-fold dev outcomes per category: attacks stored, benign refused and pending."""
    lines = [f"  {'dev, out of fold':<34} {'rows':>5}  " + "  ".join(f"{k:>22}" for k in kinds)]
    categories = sorted({(int(label), r.get("category", "-")) for r, label in zip(dev_rows, y, strict=True)})
    for label, category in [(None, "all attacks"), (None, "all benign")] + categories:
        if label is None:
            keep = y == (1 if category == "all attacks" else 0)
        else:
            keep = (y == label) & np.array([r.get("category", "-") == category for r in dev_rows])
        benign = bool(y[keep][0] == 0)
        cells = []
        for kind in kinds:
            got = results[kind][is_dev][keep]
            cells.append(
                f"ref {100 * (got == 'refused').mean():5.2f} pend {100 * (got == 'pending').mean():5.2f}"
                if benign
                else f"{'stored':>10} {100 * (got == 'stored').mean():5.2f} %"
            )
        name = f"{'benign' if benign else 'attacks'} {category}" if label is not None else category
        lines.append(f"  {name:<34} {int(keep.sum()):>5}  " + "  ".join(f"{c:>22}" for c in cells))
    return lines


def _checks(texts, rows):
    """(refused, readability) arrays of texts: what the frozen checks refuse, and how well MiniLM reads each."""
    refused = [
        validation.refusal(stored_form(t), r.get("kind", "profile")) is not None
        for t, r in zip(texts, rows, strict=True)
    ]
    return np.array(refused), np.array([validation.readability(stored_form(t)) for t in texts])


def train(
    out_path=judge_model.WEIGHTS_PATH, seed=0, rows=None, dev=None, kinds=KINDS, cache=None, say=print, more_dev=()
):
    """Cross-validate, fit on every training row, choose the thresholds on dev and write the weights file.

    `more_dev`: rows (text, label, kind) of another writer's corpus, never trained on; scored by the
    final model, they join the dev rows the thresholds are chosen on.
    """
    if rows is None:
        rows, dev = corpus_rows()
        rows += msc_rows(seed=seed) + convai2_rows()
    texts = [r["text"] for r in rows]
    y = np.array([int(r["label"]) for r in rows], dtype=np.float64)
    say(f"{len(texts)} training rows ({int(y.sum())} attacks), {len(dev)} of them dev rows, {len(more_dev)} more dev")
    vecs = vectors(texts, kinds, cache=cache, say=say)
    oof = _cached_out_of_fold(texts, vecs, y, seed, cache, say)
    index = {id(r): i for i, r in enumerate(rows)}
    is_dev = np.zeros(len(rows), dtype=bool)
    is_dev[[index[id(r)] for r in dev]] = True
    refused, readable = _checks(texts, rows)
    say("fitting on all training rows")
    params = fit(texts, vecs, y, seed)
    more_texts = [r["text"] for r in more_dev]
    more_y = np.array([int(r["label"]) for r in more_dev], dtype=np.float64)
    more_parts = parts(params, more_texts, vectors(more_texts, kinds, cache=cache, say=say)) if more_dev else {}
    more_refused, more_readable = _checks(more_texts, more_dev)
    chosen = choose(
        {k: np.concatenate([v[is_dev], more_parts.get(k, [])]) for k, v in oof.items()},
        kinds,
        np.concatenate([readable[is_dev], more_readable]),
        np.concatenate([refused[is_dev], more_refused]).astype(bool),
        np.concatenate([y[is_dev], more_y]),
    )
    metrics, results = {}, {}
    for kind in kinds:
        results[kind] = outcomes(oof, kind, readable, refused, chosen)
        metrics[kind] = {
            "dev": rates(results[kind][is_dev], y[is_dev]),
            "training_rows_and_msc": rates(results[kind][~is_dev], y[~is_dev]),
        }
        if more_dev:
            metrics[kind]["more_dev"] = rates(outcomes(more_parts, kind, more_readable, more_refused, chosen), more_y)
    say("chosen on dev: " + json.dumps(chosen))
    say("out of fold on dev (more dev: by the final model): " + json.dumps(metrics))
    for line in dev_report(results, kinds, [r for r, d in zip(rows, is_dev, strict=True) if d], y[is_dev], is_dev):
        say(line)
    (weights, bias), (w1, b1, w2, b2) = params
    meta = {
        **chosen,
        "seed": seed,
        "vector_kinds": list(kinds),
        "trained_on": (
            "dev split and holdout of evals/poisoning/, its training_*.jsonl, MSC and ConvAI2 persona sentences"
        ),
        "training_digest": hashlib.sha256("\n".join(sorted(texts)).encode("utf-8")).hexdigest(),
        "out_of_fold": metrics,
        "max_stored": MAX_STORED,
    }
    out_path = pathlib.Path(out_path)
    np.savez_compressed(
        out_path,
        weights=weights.astype(np.float16),
        bias=np.array(float(bias)),
        w1=w1.astype(np.float32),
        b1=b1.astype(np.float32),
        w2=w2.astype(np.float32),
        b2=np.array(float(b2), dtype=np.float32),
        meta=np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8),
    )
    say(f"wrote {out_path} sha256 {sha256_of(out_path)} (pin it as judge_model.WEIGHTS_SHA256)")
    return meta

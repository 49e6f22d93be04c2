"""Training the learned offline backend (memoryapp/backends/learned.py) from public data, numpy only.

Data (all under ../shared/datasets, see weights/README.md for sources and licences):

- ConvAI2 / PersonaChat with Dialogue NLI triples (`convai2_persona_triples/`): persona lines and
  chat utterances, some annotated with (subject, relation, object) triples.
- MSC persona summaries (`locomo/msc_personas_all.json`): first-person persona sentences.

Splits (fixed; nothing from a test split is used for training or tuning):

- fact and kind models: train on the ConvAI2 *valid* file (episodes hashed 85/15 into train/dev;
  labels from its completed `final` annotation when present) and MSC *train* personas; the
  threshold is chosen on the dev episodes' utterances, scored as the test set is; test is the
  ConvAI2 *test* file (utterances, under both annotations) and MSC *test* personas.
- verdict model: train on pairs derived from ConvAI2 *valid* Dialogue NLI statements (the derivation of
  memoryapp.verdict_eval, more pairs and a different seed, plus same-relation "hard" independents),
  minus any pair sharing a sentence with the dev or test rows; dev is the `valid` rows of
  evals/generated/convai2_verdict_pairs.jsonl, test its `test` rows (derived from the test file).
"""

import ast
import hashlib
import json
import random
import re
import zlib
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from evals import verdicts as ve
from memoryapp import embeddings
from memoryapp.backends import learned, phrasing

SEED = 17
CONVAI = "convai2_persona_triples"
# Two annotations of the same ConvAI2 dialogues (GettingToKnowYou): `dialogueNLI` carries the Dialogue
# NLI triples only, `final` the authors' completed annotation (half the utterances carry a triple, a
# third in `dialogueNLI`; e.g. "i work in the movies as well." is annotated only in `final`).
# Training prefers `final` when it is there: fewer stated facts labelled "no fact".
ANNOTATIONS = ("final", "dialogueNLI")
FACT_RECALL = 0.70  # the fact threshold keeps at least this share of dev utterances that state a fact
MSC = "locomo/msc_personas_all.json"
PAIRS = ve.GENERATED

PREFERENCE_RELATIONS = re.compile(r"^(like_|favorite|dislike|prefer)")
GOAL_RELATIONS = re.compile(r"^(want|goal|plan)")
MULTI_VALUED = (
    "like_food like_activity like_music like_animal like_sports like_read like_movie like_watching like_drink "
    "like_goto like_general have_pet has_hobby own have_vehicle has_ability previous_profession"
).split()


class MissingData(FileNotFoundError):
    pass


def check_datasets(root):
    root = Path(root)
    needed = [
        root / CONVAI / "valid_both_original_dialogueNLI.txt",
        root / CONVAI / "test_both_original_dialogueNLI.txt",
        root / MSC,
    ]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        raise MissingData(
            "training data not found: "
            + ", ".join(missing)
            + f". Put the shared datasets under {root} (convai2_persona_triples/ with the ConvAI2 Dialogue NLI "
            "files from jasonwu0731/GettingToKnowYou data/ConvAI2/, and locomo/msc_personas_all.json from "
            "snap-research/LoCoMo data/), or pass --datasets."
        )


def convai_file(root, split, annotation):
    return Path(root) / CONVAI / f"{split}_both_original_{annotation}.txt"


def training_annotation(root):
    """The ConvAI2 annotation the models learn from: `final` when present, else `dialogueNLI`."""
    return next(a for a in ANNOTATIONS if convai_file(root, "valid", a).exists())


def _bucket(key, salt=""):
    return zlib.crc32((salt + key).encode()) % 100


# --- reading ---------------------------------------------------------------------------


def read_episodes(path):
    """ConvAI2 episodes: {'persona': [(sentence, triples)], 'turns': [(text, triples)]}."""
    episodes, current = [], None
    for line in Path(path).read_text().splitlines():
        parts = line.split("\t")
        if "persona:" in parts[0]:
            if current is None or current["turns"]:
                current = {"persona": [], "turns": []}
                episodes.append(current)
            current["persona"].append((ve.tidy(parts[0].split("persona:", 1)[1]), _triples(parts[1:])))
        elif parts[0].strip().isdigit() and len(parts) >= 2 and current is not None:
            current["turns"].append((ve.tidy(parts[1]), _triples(parts[2:])))
    return episodes


def _triples(fields):
    out = []
    for raw in fields:
        try:
            t = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            continue
        if isinstance(t, list | tuple) and len(t) == 3 and all(isinstance(x, str) for x in t):
            out.append(tuple(x.strip() for x in t))
    return out


def _obj_words(obj):
    return {w for w in re.findall(r"[a-z]+", obj.lower()) if len(w) > 2 and w not in {"the", "and", "my"}}


def kind_for(relation, text):
    """A kind label from a Dialogue NLI relation; constraints by cue (the data has no such label)."""
    if re.search(r"\b(allerg\w*|cannot|can't|can not|unable to|not allowed|intoleran\w*)\b", text, re.I):
        return "constraint"
    if GOAL_RELATIONS.match(relation):
        return "goal"
    if PREFERENCE_RELATIONS.match(relation):
        return "preference"
    return "profile"


def fact_examples(episodes, persona_limit=None):
    """(clause, is_fact, kind or None, utterance id) from candidate clauses of utterances and persona lines."""
    rows = []
    for e, ep in enumerate(episodes):
        for i, (sentence, triples) in enumerate(ep["persona"][:persona_limit]):
            rel = triples[0][1] if triples else ""
            for c in phrasing.candidates(sentence):
                rows.append((c, 1, kind_for(rel, c) if triples else None, f"p{e}.{i}"))
        for i, (text, triples) in enumerate(ep["turns"]):
            cands = phrasing.candidates(text)
            if not triples:
                rows.extend((c, 0, None, f"u{e}.{i}") for c in cands)
                continue
            words = set().union(*(_obj_words(t[2]) for t in triples))
            hits = [c for c in cands if _obj_words(c) & words]
            for c in hits:
                rows.append((c, 1, kind_for(triples[0][1], c), f"u{e}.{i}"))
    return rows


def statements(episodes, exclude_facts=()):
    """(sentence, triple) with one 'i' triple: persona lines, and chat clauses that name the triple's object."""
    found = set()
    for ep in episodes:
        items = [(sentence, triples) for sentence, triples in ep["persona"]]
        for text, triples in ep["turns"]:
            if len(triples) == 1:
                words = _obj_words(triples[0][2])
                items.extend((c, triples) for c in phrasing.candidates(text) if _obj_words(c) & words)
        for sentence, triples in items:
            if len(triples) != 1:
                continue
            subject, relation, obj = triples[0]
            if subject != "i" or obj in ("", "<blank>") or relation in ("<blank>", "other", "misc_attribute"):
                continue
            fact = ve.as_fact(sentence)
            if fact and fact not in exclude_facts and len(fact) <= 160:
                found.add((sentence, triples[0]))
    return sorted(found)


def drop_unlabelled_facts(rows, vec, floor=0.7):
    """Drop negatives that restate a persona line of their own episode: the annotation missed them."""
    persona = defaultdict(list)
    for text, _label, _, uid in rows:
        if uid.startswith("p"):
            persona[uid[1:].split(".")[0]].append(text)
    kept = []
    for row in rows:
        text, label, _, uid = row
        if label == 0 and uid.startswith("u") and persona.get(uid[1:].split(".")[0]):
            lines = persona[uid[1:].split(".")[0]]
            if float((vec(lines) @ vec([text])[0]).max()) >= floor:
                continue
        kept.append(row)
    return kept


def msc_sentences(root, split, limit, seed=SEED):
    data = json.loads((Path(root) / MSC).read_text())
    out = sorted({s for p in data.get(split, []) for who in ("Speaker 1", "Speaker 2") for s in p.get(who, [])})
    random.Random(seed).shuffle(out)
    return out[:limit]


# --- embedding with a cache --------------------------------------------------------------


class Vectors:
    """Embeds each distinct text once; optionally keeps them in an .npz between runs."""

    def __init__(self, cache_path=None, progress_factory=None):
        self.cache_path = Path(cache_path) if cache_path else None
        self.progress_factory = progress_factory
        self.table = {}
        if self.cache_path and self.cache_path.exists():
            with np.load(self.cache_path, allow_pickle=False) as data:
                for t, v in zip(data["texts"], data["vectors"], strict=True):
                    self.table[str(t)] = v

    def prime(self, texts):

        todo = sorted({t for t in texts if t not in self.table}, key=lambda t: (len(t), t))
        progress = self.progress_factory("embedding", len(todo)) if self.progress_factory and todo else None
        for i in range(0, len(todo), 256):
            chunk = todo[i : i + 256]
            for t, v in zip(chunk, embeddings.embed_many(chunk, model=embeddings.minilm()), strict=True):
                self.table[t] = v.astype(np.float32)
            if progress:
                progress.advance(len(chunk))
        if todo and self.cache_path:
            texts = sorted(self.table)
            np.savez(self.cache_path, texts=np.array(texts), vectors=np.stack([self.table[t] for t in texts]))

    def __call__(self, texts):
        return np.stack([self.table[t] for t in texts]) if texts else np.zeros((0, 384), np.float32)


# --- a small numpy MLP --------------------------------------------------------------------


def train_mlp(x, y, n_classes, hidden=64, epochs=30, lr=1e-3, l2=1e-4, batch=128, seed=SEED, class_weight=True):
    """Softmax classifier (hidden=0: logistic regression), Adam, mini-batches, fixed seed."""
    rng = np.random.default_rng(seed)
    x = np.asarray(x, np.float32)
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-6
    xs = (x - mean) / std
    d = xs.shape[1]
    params = {}
    if hidden:
        params["w1"] = (rng.standard_normal((d, hidden)) * np.sqrt(2.0 / d)).astype(np.float32)
        params["b1"] = np.zeros(hidden, np.float32)
        d_out = hidden
    else:
        d_out = d
    params["w2"] = (rng.standard_normal((d_out, n_classes)) * np.sqrt(1.0 / d_out)).astype(np.float32)
    params["b2"] = np.zeros(n_classes, np.float32)
    counts = np.bincount(y, minlength=n_classes).astype(np.float32)
    weights = (len(y) / (n_classes * np.maximum(counts, 1))) if class_weight else np.ones(n_classes, np.float32)
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v2 = {k: np.zeros_like(v) for k, v in params.items()}
    step = 0
    for _ in range(epochs):
        order = rng.permutation(len(y))
        for s in range(0, len(y), batch):
            idx = order[s : s + batch]
            xb, yb = xs[idx], y[idx]
            h = np.maximum(xb @ params["w1"] + params["b1"], 0.0) if hidden else xb
            logits = h @ params["w2"] + params["b2"]
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            g = p.copy()
            g[np.arange(len(yb)), yb] -= 1.0
            g *= weights[yb][:, None] / len(yb)
            grads = {"w2": h.T @ g + l2 * params["w2"], "b2": g.sum(axis=0)}
            if hidden:
                gh = (g @ params["w2"].T) * (h > 0)
                grads["w1"] = xb.T @ gh + l2 * params["w1"]
                grads["b1"] = gh.sum(axis=0)
            step += 1
            for k in params:
                m[k] = 0.9 * m[k] + 0.1 * grads[k]
                v2[k] = 0.999 * v2[k] + 0.001 * grads[k] ** 2
                mh = m[k] / (1 - 0.9**step)
                vh = v2[k] / (1 - 0.999**step)
                params[k] -= lr * mh / (np.sqrt(vh) + 1e-8)
    params["mean"], params["std"] = mean.astype(np.float32), std.astype(np.float32)
    return params


def _round_trip(params):
    """The parameters as they will be shipped (float16), so dev/test scores are the shipped model's."""
    return {k: v.astype(np.float16).astype(np.float32) for k, v in params.items()}


# --- metrics ------------------------------------------------------------------------------


def macro_f1(gold, pred, labels):
    f1s, per = [], {}
    for lab in labels:
        tp = sum(1 for g, p in zip(gold, pred, strict=True) if g == lab and p == lab)
        fp = sum(1 for g, p in zip(gold, pred, strict=True) if g != lab and p == lab)
        fn = sum(1 for g, p in zip(gold, pred, strict=True) if g == lab and p != lab)
        pr = tp / (tp + fp) if tp + fp else 0.0
        rc = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * pr * rc / (pr + rc) if pr + rc else 0.0
        per[lab] = {"precision": round(pr, 3), "recall": round(rc, 3), "f1": round(f1, 3)}
        f1s.append(f1)
    return round(float(np.mean(f1s)), 3), per


# --- verdict pairs -----------------------------------------------------------------------


def verdict_training_pairs(statements, per_label, seed=SEED):
    """Pairs from training statements: the verdict_eval derivation plus hard independents and negations."""
    rows = [(r["old"], r["new"], r["label"]) for r in ve.derive_pairs(statements, per_label, seed=seed)]
    # Same multi-valued relation, different objects: "likes pizza" / "likes sushi" are both true.
    rng = random.Random(seed)
    by_rel = defaultdict(lambda: defaultdict(list))
    for sentence, (_, rel, obj) in statements:
        if rel in MULTI_VALUED:
            by_rel[rel][obj].append(sentence)
    rels = sorted(r for r in by_rel if len(by_rel[r]) >= 2)
    hard, tries = [], 0
    while len(hard) < per_label // 2 and tries < per_label * 20 and rels:
        tries += 1
        rel = rng.choice(rels)
        oa, ob = rng.sample(sorted(by_rel[rel]), 2)
        if _obj_words(oa) & _obj_words(ob):
            continue
        a, b = ve.as_fact(rng.choice(by_rel[rel][oa])), ve.as_fact(rng.choice(by_rel[rel][ob]))
        if a and b:
            hard.append((a, b, "INDEPENDENT"))
    # Negated restatements: "X" / "not X" contradict (the derivation has too few of them).
    negs = []
    for sentence, _ in rng.sample(statements, min(len(statements), per_label)):
        fact = ve.as_fact(sentence)
        if not fact:
            continue
        m = re.match(r"^(The user) (is|has|likes|loves|enjoys|works|lives|plays|owns|drives|eats) (.+)$", fact)
        if not m:
            continue
        neg = {"is": "is not", "has": "does not have"}.get(m[2], f"does not {m[2][:-1] if m[2] != 'has' else 'have'}")
        if m[2].endswith("es") and m[2] not in ("likes", "drives", "lives"):
            neg = f"does not {m[2][:-2]}"
        negs.append((fact, f"{m[1]} {neg} {m[3]}", "CONTRADICTS"))
        if len(negs) >= per_label // 4:
            break
    # The same sentence with its object swapped for another value of the relation: a single-valued
    # relation then contradicts ("lives in ohio" / "lives in texas"), a multi-valued one does not.
    by_rel_all = defaultdict(set)
    for _, (_, rel, obj) in statements:
        by_rel_all[rel].add(obj)
    swaps = []
    for sentence, (_, rel, obj) in rng.sample(statements * 3, 3 * len(statements)):
        if rel not in ve.SINGLE_VALUED and rel not in MULTI_VALUED:
            continue
        low = sentence.lower()
        if len(obj) < 3 or not re.search(rf"\b{re.escape(obj.lower())}\b", low):
            continue
        others = sorted(o for o in by_rel_all[rel] if o != obj and not (_obj_words(o) & _obj_words(obj)))
        if not others:
            continue
        other = rng.choice(others)
        swapped = re.sub(rf"\b{re.escape(obj.lower())}\b", other, low, count=1)
        a, b = ve.as_fact(sentence), ve.as_fact(swapped)
        if a and b:
            label = "CONTRADICTS" if rel in ve.SINGLE_VALUED else "INDEPENDENT"
            swaps.append((a, b, label) if rng.random() < 0.5 else (b, a, label))
    rows += sorted(set(swaps), key=swaps.index)
    # Exact restatements are duplicates too.
    same = [(r[0], r[0], "DUPLICATE") for r in rng.sample(rows, min(len(rows), per_label // 10))]
    return [r for r in rows + hard + negs + same if r[0] and r[1]]


def load_pair_rows(path=PAIRS):
    rows = ve.read_pairs(path)
    return [r for r in rows if r["split"] == "valid"], [r for r in rows if r["split"] == "test"]


# --- the whole run ------------------------------------------------------------------------


def train(root, out_path, cache_path=None, smoke=False, progress=None, say=print, seed=SEED):
    """Train all three models, score them on dev and test, write the weights; returns the metrics."""
    root = Path(root)
    check_datasets(root)
    rng = random.Random(seed)
    vec = Vectors(cache_path, progress)
    scale = 0.02 if smoke else 1.0

    # ---- facts and kinds
    say("reading ConvAI2 dialogues and MSC personas…")
    annotation = training_annotation(root)
    valid_eps = read_episodes(convai_file(root, "valid", annotation))
    # The test dialogues under each annotation there is: the utterances are the same, the gold differs.
    test_sets = {
        a: read_episodes(convai_file(root, "test", a)) for a in ANNOTATIONS if convai_file(root, "test", a).exists()
    }
    if smoke:
        valid_eps = valid_eps[:40]
        test_sets = {a: eps[:20] for a, eps in test_sets.items()}
    test_eps = test_sets["dialogueNLI"]
    train_eps = [e for i, e in enumerate(valid_eps) if _bucket(str(i), "ep") >= 15]
    dev_eps = [e for i, e in enumerate(valid_eps) if _bucket(str(i), "ep") < 15]
    train_rows = fact_examples(train_eps)
    msc_train = msc_sentences(root, "train", int(6000 * scale) or 20, seed)
    for s in msc_train:
        train_rows.extend((c, 1, None, "msc") for c in phrasing.candidates(s))
    dev_rows = fact_examples(dev_eps)
    dev_utts = [(t, tr) for e in dev_eps for t, tr in e["turns"]]
    texts = {r[0] for r in train_rows} | {r[0] for r in dev_rows}
    texts |= {c for t, _ in dev_utts for c in phrasing.candidates(t)}
    test_utts = [(t, tr) for e in test_eps for t, tr in e["turns"]]
    msc_test = msc_sentences(root, "test", int(1500 * scale) or 10, seed + 1)
    texts |= {c for t, _ in test_utts for c in phrasing.candidates(t)}
    texts |= {c for s in msc_test for c in phrasing.candidates(s)}
    kind_test_rows = [r for r in fact_examples(test_sets[annotation]) if r[2]]
    texts |= {r[0] for r in kind_test_rows}

    # ---- verdict pairs
    say("deriving verdict pairs…")
    dev_pairs, test_pairs = load_pair_rows()
    if smoke:
        dev_pairs, test_pairs = dev_pairs[::30], test_pairs[::30]
    held = {r[k] for r in dev_pairs + test_pairs for k in ("old", "new")}
    # Verdict pairs and the relation head learn from the Dialogue NLI triples of the same training
    # episodes: on dev, macro-F1 0.743 against 0.702 with the `final` annotation's statements.
    verdict_eps = train_eps
    if annotation != "dialogueNLI" and convai_file(root, "valid", "dialogueNLI").exists():
        nli_eps = read_episodes(convai_file(root, "valid", "dialogueNLI"))
        verdict_eps = [e for i, e in enumerate(nli_eps[: len(valid_eps)]) if _bucket(str(i), "ep") >= 15]
    train_statements = statements(verdict_eps, held)
    vtrain = verdict_training_pairs(train_statements, int(2000 * scale) or 10, seed)
    relation_names = [r for r, n in Counter(t[1] for _, t in train_statements).most_common() if n >= 5][:60]
    relation_rows = [
        (ve.as_fact(sent), relation_names.index(t[1]) if t[1] in relation_names else len(relation_names))
        for sent, t in train_statements
    ]
    texts |= {f for f, _ in relation_rows}
    rng.shuffle(vtrain)
    texts |= {t for a, b, _ in vtrain for t in (a, b)}
    texts |= {r[k] for r in dev_pairs + test_pairs for k in ("old", "new")}

    say(
        f"{len(train_rows)} fact-train clauses, {len(dev_rows)} dev; {len(vtrain)} verdict-train pairs; "
        f"{len(texts)} distinct texts to embed"
    )
    vec.prime(sorted(texts))

    metrics = {"seed": seed, "smoke": smoke}

    # fact model
    before = len(train_rows), len(dev_rows)
    train_rows, dev_rows = drop_unlabelled_facts(train_rows, vec), drop_unlabelled_facts(dev_rows, vec)
    say(f"dropped {before[0] - len(train_rows)} + {before[1] - len(dev_rows)} negatives that restate a persona line")
    xf = learned.fact_features(vec([r[0] for r in train_rows]), [r[0] for r in train_rows])
    yf = np.array([r[1] for r in train_rows])
    xd = learned.fact_features(vec([r[0] for r in dev_rows]), [r[0] for r in dev_rows])
    yd = np.array([r[1] for r in dev_rows])
    best = None
    # Logistic regression: a 32-unit MLP scores a little higher on dev (F1 0.885 vs 0.861) but learns
    # topics, and misses plain statements outside chit-chat ("I prefer short answers"); see README.
    # The threshold is chosen on the dev dialogues' utterances, scored exactly as the test set is
    # (an utterance is kept when one of its clauses is): the most precise one that still keeps
    # FACT_RECALL of them (the recall target), else the best F1. By F1 alone the grid's
    # lowest value wins (the curve is flat), and that keeps requests such as "I need help with this bug".
    for hidden in (0,):
        params = _round_trip(train_mlp(xf, yf, 2, hidden=hidden, l2=1e-3, epochs=10 if not smoke else 3, seed=seed))
        scores = utterance_scores(dev_utts, vec, params)
        for th in np.arange(0.05, 0.91, 0.05):
            prec, rec = _precision_recall(scores, th)
            f = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
            key = (rec >= FACT_RECALL, prec if rec >= FACT_RECALL else f)
            if best is None or key > best[0]:
                best = (key, hidden, float(round(th, 2)), params, prec, rec, f)
    _, hidden, threshold, fact_params, prec, rec, f = best
    p = learned.forward(fact_params, xd)[:, 1] >= threshold
    metrics["fact_dev"] = {
        "annotation": annotation,
        "hidden": hidden,
        "threshold": threshold,
        "utterance_precision": round(prec, 3),
        "utterance_recall": round(rec, 3),
        "utterance_f1": round(f, 3),
        "clause_precision": round(int((p & (yd == 1)).sum()) / max(int(p.sum()), 1), 3),
        "clause_recall": round(int((p & (yd == 1)).sum()) / max(int((yd == 1).sum()), 1), 3),
    }
    say(
        f"fact model ({annotation} labels): hidden={hidden} threshold={threshold} "
        f"dev utterances P={prec:.3f} R={rec:.3f}"
    )

    # kind model
    kind_rows = [r for r in train_rows if r[2]]
    xk = learned.fact_features(vec([r[0] for r in kind_rows]), [r[0] for r in kind_rows])
    yk = np.array([learned.KINDS.index(r[2]) for r in kind_rows])
    kind_params = _round_trip(train_mlp(xk, yk, 4, hidden=0, epochs=15 if not smoke else 3, seed=seed))
    metrics["kind_dev"] = kind_scores(dev_rows, vec, kind_params)
    say(f"kind model: dev macro-F1 {metrics['kind_dev']['macro_f1']} (labels from Dialogue NLI relations)")

    # relation head (what a fact is about), then the verdict model on top of it
    rel_texts = [f for f, _ in relation_rows]
    relation_params = _round_trip(
        train_mlp(
            learned.fact_features(vec(rel_texts), rel_texts),
            np.array([r for _, r in relation_rows]),
            len(relation_names) + 1,
            hidden=0,
            epochs=20 if not smoke else 3,
            l2=1e-3,
            seed=seed,
        )
    )
    relations = [*relation_names, "other"]
    single = np.array([r in ve.SINGLE_VALUED for r in relations], np.float32)
    say(f"relation head: {len(relations)} relations from {len(relation_rows)} statements")

    def feats(olds, news):
        u, v = vec(olds), vec(news)
        pa = learned.forward(relation_params, learned.fact_features(u, olds))
        pb = learned.forward(relation_params, learned.fact_features(v, news))
        return learned.verdict_features(u, v, olds, news, pa, pb, single)

    xv = feats([a for a, _, _ in vtrain], [b for _, b, _ in vtrain])
    yv = np.array([learned.VERDICTS.index(lab) for _, _, lab in vtrain])

    def pair_x(rows):
        return feats([r["old"] for r in rows], [r["new"] for r in rows])

    xvd, gvd = pair_x(dev_pairs), [r["label"] for r in dev_pairs]
    best = None
    for hidden in (0, 64) if not smoke else (0,):
        for l2 in (1e-3,):
            params = _round_trip(train_mlp(xv, yv, 3, hidden=hidden, l2=l2, epochs=25 if not smoke else 3, seed=seed))
            pred = [learned.VERDICTS[i] for i in learned.forward(params, xvd).argmax(axis=1)]
            mf, _ = macro_f1(gvd, pred, learned.VERDICTS)
            say(f"verdict model: hidden={hidden} l2={l2} dev macro-F1 {mf}")
            if best is None or mf > best[0]:
                best = (mf, hidden, l2, params)
    mf, hidden, l2, verdict_params = best
    # Class offsets on the log-probabilities, chosen on dev: training pairs are easier than real ones
    # (random different-relation pairs), so the raw model is too sure of INDEPENDENT. The app pays
    # for a false CONTRADICTS (a true fact superseded) or DUPLICATE (a new fact dropped), so offsets
    # may turn at most 5% of dev INDEPENDENT pairs into either.
    logp = np.log(learned.forward(verdict_params, xvd) + 1e-9)
    grid = [(c, d) for c in np.arange(0, 10.01, 0.5) for d in np.arange(0, 8.01, 0.5)]
    scored = []
    for c, d in grid:
        pred = [learned.VERDICTS[i] for i in (logp + np.array([c, d, 0.0])).argmax(axis=1)]
        wrong = [p for p, g in zip(pred, gvd, strict=True) if g == "INDEPENDENT"]
        if max(wrong.count("CONTRADICTS"), wrong.count("DUPLICATE")) > 0.05 * len(wrong):
            continue
        scored.append((macro_f1(gvd, pred, learned.VERDICTS)[0], -(c + d), float(c), float(d)))
    mf_bias, _, bias_c, bias_d = max(scored) if scored else (mf, 0.0, 0.0, 0.0)
    verdict_bias = [bias_c, bias_d, 0.0]
    say(f"verdict offsets on dev: CONTRADICTS +{bias_c}, DUPLICATE +{bias_d} -> dev macro-F1 {mf_bias} (was {mf})")
    metrics["verdict_dev"] = {
        "hidden": hidden,
        "l2": l2,
        "macro_f1": mf_bias,
        "macro_f1_before_offsets": mf,
        "offsets": verdict_bias,
        "n": len(dev_pairs),
    }

    # ---- test (reported, never tuned on)
    logp = np.log(learned.forward(verdict_params, pair_x(test_pairs)) + 1e-9) + np.array(verdict_bias)
    pred = [learned.VERDICTS[i] for i in logp.argmax(axis=1)]
    mf, per = macro_f1([r["label"] for r in test_pairs], pred, learned.VERDICTS)
    metrics["verdict_test"] = {"macro_f1": mf, "per_label": per, "n": len(test_pairs)}
    say(f"TEST verdict macro-F1 {mf} on {len(test_pairs)} Dialogue-NLI-derived pairs (test file)")

    metrics["extraction_test"] = extraction_scores(test_utts, msc_test, vec, fact_params, threshold)
    e = metrics["extraction_test"]
    say(
        f"TEST extraction on ConvAI2 test utterances (gold: Dialogue NLI triples): precision {e['precision']} "
        f"recall {e['recall']} (fact-level precision {e['fact_precision']}); MSC test persona recall "
        f"{e['msc_persona_recall']}"
    )
    if "final" in test_sets:
        final_utts = [(t, tr) for ep in test_sets["final"] for t, tr in ep["turns"]]
        metrics["extraction_test_final"] = extraction_scores(final_utts, [], vec, fact_params, threshold)
        e = metrics["extraction_test_final"]
        say(
            f"TEST extraction, same utterances (gold: the completed `final` annotation): precision {e['precision']} "
            f"recall {e['recall']} (fact-level precision {e['fact_precision']})"
        )

    metrics["kind_test"] = kind_scores(kind_test_rows, vec, kind_params)
    k = metrics["kind_test"]
    say(f"TEST kind macro-F1 {k['macro_f1']} on {k['n']} clauses ({annotation} annotation)")

    meta = {
        "fact_threshold": threshold,
        "seed": seed,
        "trained_on": "ConvAI2 Dialogue NLI (valid file), MSC personas (train)",
        "metrics": {k: metrics[k] for k in ("fact_dev", "verdict_dev", "verdict_test")},
    }
    meta["verdict_offsets"] = verdict_bias
    meta["relations"] = relations
    meta["single_valued"] = sorted(r for r in relations if r in ve.SINGLE_VALUED)
    arrays = {"meta": np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)}
    heads = (("fact", fact_params), ("kind", kind_params), ("relation", relation_params), ("verdict", verdict_params))
    for head, params in heads:
        for k, v in params.items():
            arrays[f"{head}__{k}"] = v.astype(np.float16)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "wb") as f:
        np.savez_compressed(f, **arrays)
    digest = hashlib.sha256(out_path.read_bytes()).hexdigest()
    metrics["weights"] = {"path": str(out_path), "sha256": digest, "bytes": out_path.stat().st_size}
    return metrics


def utterance_scores(utterances, vec, fact_params):
    """(highest fact probability over an utterance's phrasable clauses, has a gold triple) per utterance."""
    out = []
    for text, triples in utterances:
        cands = [c for c in phrasing.candidates(text) if phrasing.third_person(c)]
        p = float(learned.forward(fact_params, learned.fact_features(vec(cands), cands))[:, 1].max()) if cands else 0.0
        out.append((p, bool(triples)))
    return out


def _precision_recall(scores, threshold):
    tp = sum(1 for p, g in scores if p >= threshold and g)
    fp = sum(1 for p, g in scores if p >= threshold and not g)
    fn = sum(1 for p, g in scores if p < threshold and g)
    return (tp / (tp + fp) if tp + fp else 0.0), (tp / (tp + fn) if tp + fn else 0.0)


def kind_scores(rows, vec, kind_params):
    """Kind macro-F1 over the labelled clauses, chosen as the backend chooses (goal wording included)."""
    rows = [r for r in rows if r[2]]
    if not rows:
        return {"macro_f1": None, "per_kind": {}, "n": 0}
    texts = [r[0] for r in rows]
    pred = learned.kind_choices(learned.forward(kind_params, learned.fact_features(vec(texts), texts)), texts)
    mf, per = macro_f1([r[2] for r in rows], pred, learned.KINDS)
    return {"macro_f1": mf, "per_kind": per, "n": len(rows)}


def extraction_scores(utterances, msc_test, vec, fact_params, threshold):
    """Utterance-level precision/recall on held-out ConvAI2 utterances (gold: Dialogue NLI triples).

    An utterance counts as predicted positive when the model keeps at least one clause; it is a
    gold positive when Dialogue NLI annotated a triple on it. `fact_precision` is stricter: a kept
    fact must also share a word with the gold triple's object.
    """
    tp = fp = fn = tn = fact_ok = facts = 0
    for text, triples in utterances:
        cands = phrasing.candidates(text)
        kept = []
        if cands:
            p = learned.forward(fact_params, learned.fact_features(vec(cands), cands))[:, 1]
            kept = [c for c, q in zip(cands, p, strict=True) if q >= threshold and phrasing.third_person(c)]
        gold = bool(triples)
        if kept and gold:
            tp += 1
        elif kept:
            fp += 1
        elif gold:
            fn += 1
        else:
            tn += 1
        if kept:
            words = set().union(*(_obj_words(t[2]) for t in triples)) if triples else set()
            facts += len(kept)
            fact_ok += sum(1 for c in kept if _obj_words(c) & words)
    msc_hits = 0
    for s in msc_test:
        cands = phrasing.candidates(s)
        if cands:
            p = learned.forward(fact_params, learned.fact_features(vec(cands), cands))[:, 1]
            msc_hits += int((p >= threshold).any())
    return {
        "utterances": tp + fp + fn + tn,
        "gold_positive": tp + fn,
        "precision": round(tp / (tp + fp), 3) if tp + fp else None,
        "recall": round(tp / (tp + fn), 3) if tp + fn else None,
        "false_positive_rate": round(fp / (fp + tn), 3) if fp + tn else None,
        "fact_precision": round(fact_ok / facts, 3) if facts else None,
        "msc_persona_recall": round(msc_hits / len(msc_test), 3) if msc_test else None,
    }

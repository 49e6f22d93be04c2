"""What removing each hand rule of the keyless backend does on the dev split (`eval_extraction --ablate`).

The rules are the table in memoryapp/backends/rules.py. For each one, switched off with
`rules.without`, three dev measures are taken again with the production code: utterance precision and
recall of `offline.extract_facts` on the hand gold and the share of its facts both judges call right
(a fact not judged yet counts as wrong; evals/extraction.py), macro-F1 of
`offline.classify` on the relabelled ConvAI2 valid pairs (evals/verdicts.py), and the repository
scenarios under the offline backend (evals/harness.py, as `eval_scenarios --backend offline`). A measure
is taken again only where the rule fired in the baseline run (`rules.watch`): where it never fired,
switching it off changes nothing. Each text is embedded once for the whole run (`remembered_embeddings`):
the runs differ in the rules, not in the texts the verdicts and scenarios embed.

`prune` then chooses which rules go: greedily, in table order, each rule whose removal alone lowers
no dev measure is switched off together with those already off, and stays off only if no dev measure
then falls below the baseline.
"""

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evals import extraction
from evals import harness as evaluation
from evals import verdicts as ve
from memoryapp import embeddings
from memoryapp.backends import offline, rules

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
MEASURES = ("precision", "recall", "facts_right", "verdict_f1", "scenarios")


@dataclass
class DevSet:
    """The dev data the measures are taken on; any part may be empty (then that measure is None)."""

    gold: list = field(default_factory=list)  # gold rows of the dev split
    utterances: dict = field(default_factory=dict)  # {key: (text, ...)} as extraction.dataset_utterances gives
    judgements: dict = field(default_factory=dict)  # {(key, fact): [right by each judge]}
    pairs: list = field(default_factory=list)  # relabelled pairs of the valid split
    scenarios: list = field(default_factory=list)  # parsed scenarios


@contextlib.contextmanager
def remembered_embeddings():
    """Inside the block, `embeddings.embed_many` computes each (model, text) once and remembers it."""
    original, memo = embeddings.embed_many, {}

    def embed_many(texts, batch_size=64, model=None):
        texts = list(texts)
        model = model or embeddings.backend()
        todo = [t for t in dict.fromkeys(texts) if (id(model), t) not in memo]
        if todo:
            for text, vector in zip(todo, original(todo, batch_size, model), strict=True):
                memo[id(model), text] = vector
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.vstack([memo[id(model), t] for t in texts]).astype(np.float32)

    embeddings.embed_many = embed_many
    try:
        yield
    finally:
        embeddings.embed_many = original


def load_dev(datasets, gold=extraction.GOLD, pairs=None, scenarios=(SCENARIOS,), limit_pairs=None):
    """The dev split: gold utterances, judged facts, relabelled valid pairs (the first `limit_pairs`), scenarios."""
    rows = [r for r in extraction.read_gold(gold) if r["split"] == "dev"]
    utterances = extraction.dataset_utterances(datasets) if rows else {}
    pair_rows = ve.read_pairs(pairs or ve.RELABELLED, "valid")[:limit_pairs]
    parsed = evaluation.load(list(scenarios), backend="offline")[0] if scenarios else []
    return DevSet(rows, utterances, extraction.read_judgements(), pair_rows, parsed)


def _extraction(dev):
    result, _ = extraction.score(dev.gold, dev.utterances, dev.judgements)
    hand = result.get("dev", {}).get("against", {}).get("hand_labelled", {})
    facts = result.get("dev", {}).get("facts", {})
    written = facts.get("judged", 0) + facts.get("unjudged", 0)
    # A fact nobody judged (the rules changed what is written) is not counted as right.
    right = round(facts["right"] / written, 3) if written else None
    return {"precision": hand.get("precision"), "recall": hand.get("recall"), "facts_right": right}


def _verdicts(dev):
    if not dev.pairs:
        return {"verdict_f1": None}
    predicted = [offline.classify(r["old"], r["new"]) for r in dev.pairs]
    return {"verdict_f1": ve.confusion([r["label"] for r in dev.pairs], predicted)["macro_f1"]}


def _scenarios(dev):
    if not dev.scenarios:
        return {"scenarios": None}
    return {"scenarios": evaluation.run_all(dev.scenarios, backend="offline")["summary"]["passed"]}


FAMILIES = {"extraction": _extraction, "verdicts": _verdicts, "scenarios": _scenarios}


def measure(dev, off=(), families=FAMILIES, fired=None):
    """The dev measures with the rules `off` switched off; `fired` ({family: set}) gets the rules that fired."""
    out = {}
    with rules.without(off):
        for name in families:
            with rules.watch() as seen:
                out.update(FAMILIES[name](dev))
            if fired is not None:
                fired[name] = seen
    return out


def falls(result, baseline):
    """The measures that are lower than in the baseline."""
    return [m for m in MEASURES if result[m] is not None and baseline[m] is not None and result[m] < baseline[m]]


def _again(base, dev, off, rule_id, fired):
    """The measures with `rule_id` also off, taken again only for the families where it fired."""
    families = [name for name in FAMILIES if rule_id in fired[name]]
    if not families:
        return dict(base), families
    return {**base, **measure(dev, [*off, rule_id], families)}, families


def ablate(dev, ids=None, progress=None):
    """(baseline, {rule id: measures without it}, {family: rules that fired}) for the rules `ids` (all by default)."""
    fired = {}
    baseline = measure(dev, fired=fired)
    out = {}
    for rule_id in ids or list(rules.TABLE):
        out[rule_id], _ = _again(baseline, dev, (), rule_id, fired)
        if progress:
            progress(rule_id, out[rule_id])
    return baseline, out, fired


def prune(dev, baseline, single, fired, keep=(), progress=None):
    """The rules to remove: each with no single effect, kept off while no dev measure falls below the baseline.

    The rules `keep` stay whatever their effect (a test pins what they do).
    """
    off, current, fired = [], dict(baseline), dict(fired)
    for rule_id, result in single.items():
        if falls(result, baseline) or rule_id in keep:
            continue  # removing it alone lowers a dev measure
        families = [name for name in FAMILIES if rule_id in fired[name]]
        seen = {}
        trial = {**current, **measure(dev, [*off, rule_id], families, fired=seen)} if families else dict(current)
        if not falls(trial, baseline):
            off.append(rule_id)
            current = trial
            fired.update(seen)
        if progress:
            progress(rule_id, trial, rule_id in off)
    return off, current

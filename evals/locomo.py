"""LoCoMo through the production read path: the dataset, the dev/test split, recall variants, scoring.

Two modes share this module. The end-to-end pipeline (evals/locomo_pipeline.py) feeds the
conversations through sessions, extraction and supersession; the observation mode here stores
LoCoMo's gold `observation` sentences as facts, a retrieval-only upper bound. Both ask every
question through `recall.select`, the function the product uses; nothing here ranks facts itself.
"""

import json
import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings

from memoryapp import embeddings, recall
from memoryapp.models import MemoryFact, Organization

# LoCoMo's own numbering (its evaluation code; snap-research/locomo#6, #29). Mem0's tables differ.
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
# The split rule: conversations 1-5 choose every knob, conversations 6-10 report the numbers.
SPLITS = {"dev": range(0, 5), "test": range(5, 10), "all": range(0, 10)}
MEM0_TOKENS = 1764  # mem0's published tokens per query on LoCoMo
MEM0_JUDGE_ACCURACY = 66.9  # mem0's published LLM-judge accuracy on LoCoMo
CHARS_PER_TOKEN = 4  # token estimate for blocks: characters / 4 (English prose, no tokenizer needed)
_DIA = re.compile(r"D:?(\d+):(\d+)")

# Recall variants compared on the same facts. Each is a set of MEMORY overrides; "production" is
# whatever settings.MEMORY says. The others pin the rules being compared (docs/benchmarks.md).
NO_FLOOR = -1.0
VARIANTS = {
    "production": {},
    "recency 12+8": {
        "TIER1_KINDS": {"constraint": 12, "profile": 12},
        "TIER1_ORDER": "recent",
        "TIER1_LIMIT": 12,
        "TIER2_LIMIT": 8,
    },
    "confirmed 12+8": {
        "TIER1_KINDS": {"constraint": 12, "profile": 12},
        "TIER1_ORDER": "confirmations",
        "TIER1_LIMIT": 12,
        "TIER2_LIMIT": 8,
    },
    "constraints + 2 profile": {
        "TIER1_KINDS": {"constraint": 12, "profile": 2},
        "TIER1_ORDER": "confirmations",
        "TIER1_LIMIT": 12,
        "TIER2_LIMIT": 20,
    },
    "constraints + 2 recent profile": {
        "TIER1_KINDS": {"constraint": 12, "profile": 2},
        "TIER1_ORDER": "recent",
        "TIER1_LIMIT": 12,
        "TIER2_LIMIT": 20,
    },
    "constraints + 4 profile": {
        "TIER1_KINDS": {"constraint": 12, "profile": 4},
        "TIER1_ORDER": "confirmations",
        "TIER1_LIMIT": 12,
        "TIER2_LIMIT": 20,
    },
    "constraints only": {
        "TIER1_KINDS": {"constraint": 12},
        "TIER1_ORDER": "confirmations",
        "TIER1_LIMIT": 12,
        "TIER2_LIMIT": 20,
    },
    "constraints only / vector": {
        "TIER1_KINDS": {"constraint": 12},
        "TIER1_ORDER": "confirmations",
        "TIER1_LIMIT": 12,
        "TIER2_LIMIT": 20,
        "RECALL_LEXICAL": False,
    },
    "constraints + 2 profile / no floor": {
        "TIER1_KINDS": {"constraint": 12, "profile": 2},
        "TIER1_ORDER": "confirmations",
        "TIER1_LIMIT": 12,
        "TIER2_LIMIT": 20,
        "RECALL_FLOOR": NO_FLOOR,
    },
    "constraints + 4 profile / no floor": {
        "TIER1_KINDS": {"constraint": 12, "profile": 4},
        "TIER1_ORDER": "confirmations",
        "TIER1_LIMIT": 12,
        "TIER2_LIMIT": 20,
        "RECALL_FLOOR": NO_FLOOR,
    },
    "constraints only / no floor": {
        "TIER1_KINDS": {"constraint": 12},
        "TIER1_ORDER": "confirmations",
        "TIER1_LIMIT": 12,
        "TIER2_LIMIT": 20,
        "RECALL_FLOOR": NO_FLOOR,
    },
    # Plain top-20 by cosine, no floor, no tier 1: the yardstick, not a product choice (it can drop
    # a constraint).
    "plain top-20 vector": {"TIER1_LIMIT": 0, "TIER2_LIMIT": 20, "RECALL_LEXICAL": False, "RECALL_FLOOR": NO_FLOOR},
    "plain top-20 hybrid": {"TIER1_LIMIT": 0, "TIER2_LIMIT": 20, "RECALL_FLOOR": NO_FLOOR},
}


JUDGED_VARIANT = "production"  # the block an LLM judge answers from, when one is configured


class DatasetMissing(FileNotFoundError):
    pass


def read(path, split="all", conversations=None):
    """The LoCoMo samples of a split (or the conversations numbered in `conversations`, 1-based)."""
    path = Path(path)
    if not path.exists():
        raise DatasetMissing(
            f"{path} not found. Put LoCoMo's locomo10.json (snap-research/LoCoMo, data/locomo10.json) "
            "there, e.g. ../shared/datasets/locomo/locomo10.json next to the repository, or pass --data."
        )
    data = json.loads(path.read_text())
    wanted = [n - 1 for n in conversations] if conversations else list(SPLITS[split])
    return [(i + 1, data[i]) for i in wanted if 0 <= i < len(data)]


def dia_ids(raw):
    """Every 'D<session>:<turn>' in a field that may be a string, a list or a list written as a string."""
    return [f"D{s}:{t}" for s, t in _DIA.findall(json.dumps(raw))]


def session_date(text):
    """'1:56 pm on 8 May, 2023' -> an aware datetime (UTC; LoCoMo gives no zone)."""
    text = re.sub(r"\s+", " ", text.strip())
    return datetime.strptime(text, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def sessions_of(sample):
    """[(n, date, turns)] in session order."""
    conv = sample["conversation"]
    out = []
    for key, value in conv.items():
        m = re.fullmatch(r"session_(\d+)", key)
        if m and isinstance(value, list) and value:
            n = int(m.group(1))
            out.append((n, session_date(conv[f"session_{n}_date_time"]), value))
    return sorted(out, key=lambda s: s[0])


def speakers_of(sample):
    conv = sample["conversation"]
    return conv["speaker_a"], conv["speaker_b"]


def questions_of(sample):
    """The QA items with their category, evidence dia ids and the speakers they are asked of.

    A question naming exactly one speaker is asked of that speaker; otherwise of both, and a block
    then means the two speakers' blocks together.
    """
    a, b = speakers_of(sample)
    out = []
    for qa in sample["qa"]:
        if qa.get("category") not in CATEGORIES:
            continue
        q = qa["question"]
        mentioned = [s for s in (a, b) if re.search(rf"\b{re.escape(s)}\b", q)]
        out.append(
            {
                "category": qa["category"],
                "question": q,
                "answer": qa.get("answer", qa.get("adversarial_answer")),
                "evidence": set(dia_ids(qa.get("evidence", []))),
                "speakers": mentioned if len(mentioned) == 1 else [a, b],
            }
        )
    return out


def memory_with(overrides):
    """settings.MEMORY with a variant's overrides."""
    return {**settings.MEMORY, **overrides}


def block_tokens(chosen):
    """The rendered block's size in tokens, estimated as characters / CHARS_PER_TOKEN."""
    return len(recall.render(recall.in_block_order(chosen))) / CHARS_PER_TOKEN


def evaluate(questions, fact_dias, variants, progress=None):
    """For each question and variant: does the block (recall.select) hold the evidence, and its size.

    `questions` carry `user_ids` (the users asked); `fact_dias` maps fact id -> set of dia ids.
    """
    vectors = embeddings.embed_many([q["question"] for q in questions]) if questions else []
    rows = []
    for q, vec in zip(questions, vectors, strict=True):
        row = {
            "category": q["category"],
            "question": q["question"],
            "answer": q["answer"],
            "n_evidence": len(q["evidence"]),
            "variants": {},
        }
        for name, overrides in variants.items():
            with override_settings(MEMORY=memory_with(overrides)):
                chosen = []
                for user_id in q["user_ids"]:
                    chosen.extend(recall.select(user_id, q["question"], vector=vec))
            found = set()
            for s in chosen:
                found |= fact_dias.get(s.fact.id, set()) & q["evidence"]
            if name == JUDGED_VARIANT:
                row["block"] = recall.render(recall.in_block_order(chosen))
            row["variants"][name] = {
                "hit": bool(found),
                "coverage": len(found) / len(q["evidence"]) if q["evidence"] else None,
                "facts": len(chosen),
                "relevant": sum(1 for s in chosen if s.tier == "relevant"),
                "tokens": block_tokens(chosen),
            }
        rows.append(row)
        if progress:
            progress.advance()
    return rows


def summarise(rows, variant_names):
    """Per variant and category: evidence found / covered, block size; category 5 as false recall."""
    out = {}
    for name in variant_names:
        per = {}
        groups = {"overall 1-4": [r for r in rows if r["category"] != 5]}
        for cat, label in CATEGORIES.items():
            groups[f"{cat} {label}"] = [r for r in rows if r["category"] == cat]
        for group, members in groups.items():
            scored = [r["variants"][name] for r in members if r["n_evidence"]]
            entry = {"n": len(scored)}
            if group.startswith("5"):
                # Adversarial: the question has no answer about this speaker (its evidence is the
                # other speaker's turn). What matters is what the block offers anyway.
                entry["block_not_empty"] = _mean(float(v["facts"] > 0) for v in scored)
                entry["holds_similar_fact"] = _mean(float(v["relevant"] > 0) for v in scored)
                entry["evidence_found"] = _mean(float(v["hit"]) for v in scored)
            else:
                entry["evidence_found"] = _mean(float(v["hit"]) for v in scored)
                entry["evidence_coverage"] = _mean(v["coverage"] for v in scored)
            per[group] = entry
        tokens = [r["variants"][name]["tokens"] for r in rows]
        facts = [r["variants"][name]["facts"] for r in rows]
        per["block"] = {
            "tokens_p50": _pct(tokens, 50),
            "tokens_p95": _pct(tokens, 95),
            "facts_p50": _pct(facts, 50),
            "facts_mean": _mean(facts),
        }
        out[name] = per
    return out


def _mean(values):
    values = [v for v in values if v is not None]
    return round(float(np.mean(values)), 4) if values else None


def _pct(values, p):
    return round(float(np.percentile(values, p)), 1) if values else None


# --- observation mode: LoCoMo's gold observations stored as facts (the retrieval upper bound) ---


def kind_for(text):
    """A kind by rule, so the stored observations spread over kinds like extracted facts do."""
    t = text.lower()
    if re.search(r"\b(plans?|planning|wants?|hopes?|goal|going to|aims?|dreams?)\b", t):
        return "goal"
    if re.search(r"\b(likes?|loves?|enjoys?|prefers?|favou?rite|passionate)\b", t):
        return "preference"
    return "profile"


def as_user_fact(text, speaker):
    """'Caroline's mom is ...' -> "The user's mom is ...": our facts say "the user", not a name.

    Only the speaker's name is replaced; the sentence is LoCoMo's own (already third person).
    """
    out = re.sub(rf"\b{re.escape(speaker)}'s\b", "the user's", text.strip())
    out = re.sub(rf"\b{re.escape(speaker)}\b", "the user", out)
    return out[:1].upper() + out[1:]


@dataclass
class Observations:
    org: Organization
    users: dict = field(default_factory=dict)  # (conversation, speaker) -> user
    fact_dias: dict = field(default_factory=dict)  # fact id -> set of dia ids
    questions: list = field(default_factory=list)
    facts: int = 0

    def cleanup(self):
        get_user_model().objects.filter(id__in=[u.id for u in self.users.values()]).delete()
        self.org.delete()


def load_observations(samples, progress_factory=None, max_questions=None):
    """One user per speaker, each observation a live fact (dated to its session) with its dia ids."""
    org = Organization.objects.create(slug=f"bench-locomo-{uuid.uuid4().hex[:8]}", name="Benchmark LoCoMo")
    loaded = Observations(org)
    User = get_user_model()
    pending = []  # (user, text, dias, when)
    for number, sample in samples:
        speakers = speakers_of(sample)
        for speaker in speakers:
            loaded.users[(number, speaker)] = User.objects.create(username=f"locomo-{uuid.uuid4().hex[:10]}")
        dates = {n: when for n, when, _ in sessions_of(sample)}
        for obs_key, by_speaker in sample["observation"].items():
            n = int(re.search(r"\d+", obs_key).group())
            when = dates.get(n) or max(dates.values())
            for speaker, items in by_speaker.items():
                if speaker not in speakers:
                    continue
                for text, raw_dia in items:
                    fact = as_user_fact(text, speaker)[:200]
                    pending.append((loaded.users[(number, speaker)], fact, set(dia_ids(raw_dia)), when))
        for q in questions_of(sample):
            q["user_ids"] = [loaded.users[(number, s)].id for s in q["speakers"]]
            q["conversation"] = number
            loaded.questions.append(q)
    if max_questions:
        loaded.questions = loaded.questions[:max_questions]
    progress = progress_factory("embedding observations", len(pending)) if progress_factory else None
    vectors = []
    for i in range(0, len(pending), 128):
        batch = pending[i : i + 128]
        vectors.extend(embeddings.embed_many([p[1] for p in batch]))
        if progress:
            progress.advance(len(batch))
    model = embeddings.model_name()
    facts = [
        MemoryFact(
            user=user,
            text=text,
            kind=kind_for(text),
            embedding=vec,
            embedding_model=model,
            created_at=when,
            last_confirmed_at=when + timedelta(seconds=i),  # a stable recency order inside a session
        )
        for i, ((user, text, _dias, when), vec) in enumerate(zip(pending, vectors, strict=True))
    ]
    MemoryFact.objects.bulk_create(facts, batch_size=1000)
    for fact, (_u, _t, dias, _w) in zip(facts, pending, strict=True):
        loaded.fact_dias[fact.id] = dias
    loaded.facts = len(facts)
    return loaded


def answerable(questions, fact_dias, facts_by_user):
    """Share of questions (categories 1-4) where some fact of the asked users carries an evidence dia id."""
    hits = []
    for q in questions:
        if q["category"] == 5 or not q["evidence"]:
            continue
        dias = set()
        for uid in q["user_ids"]:
            for fid in facts_by_user.get(uid, ()):
                dias |= fact_dias.get(fid, set())
        hits.append(float(bool(dias & q["evidence"])))
    return _mean(hits)


def facts_by_user(fact_ids):
    """user id -> [live fact ids] for the given facts."""
    out = defaultdict(list)
    for fid, uid in MemoryFact.objects.filter(id__in=list(fact_ids)).live().values_list("id", "user_id"):
        out[uid].append(fid)
    return out

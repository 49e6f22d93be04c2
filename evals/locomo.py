"""Retrieval quality on LoCoMo: observations as facts, QA questions as recall messages.

Compares the vector ranking recall uses for tier 2 with BM25 (bm25s) and a hybrid of PostgreSQL
full-text search and vector similarity fused by reciprocal rank.
"""

import json
import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from django.contrib.auth import get_user_model
from django.db import connection

from memoryapp import embeddings, recall
from memoryapp.models import AgentSession, MemoryFact, Organization, Turn

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}  # LoCoMo's own numbering
KS = (5, 10, 20)
RRF_K = 60
MEM0_TOKENS = 1764
FULL_CONTEXT_TOKENS = 26031
_DIA = re.compile(r"D:?(\d+):(\d+)")
_WORD = re.compile(r"[a-z0-9]+")


def dia_ids(raw):
    """Every 'D<session>:<turn>' in a field that may be a string, a list or a list written as a string."""
    return [f"D{s}:{t}" for s, t in _DIA.findall(json.dumps(raw))]


def kind_for(text):
    """A kind by rule, so the facts look like ours (recall here ranks all kinds alike)."""
    t = text.lower()
    if re.search(r"\b(plans?|planning|wants?|hopes?|goal|going to|aims?|dreams?)\b", t):
        return "goal"
    if re.search(r"\b(likes?|loves?|enjoys?|prefers?|favou?rite|passionate)\b", t):
        return "preference"
    return "profile"


@dataclass
class Loaded:
    org: Organization
    users: dict = field(default_factory=dict)  # (sample_id, speaker) -> user
    fact_dias: dict = field(default_factory=dict)  # fact id -> set of dia ids
    questions: list = field(default_factory=list)  # dicts: sample, category, question, evidence, user_ids
    speakers: dict = field(default_factory=dict)  # sample_id -> (speaker_a, speaker_b)
    facts_by_sample: dict = field(default_factory=lambda: defaultdict(list))  # sample -> [(id, text, user_id)]

    def cleanup(self):
        get_user_model().objects.filter(id__in=[u.id for u in self.users.values()]).delete()
        self.org.delete()


def load(path, limit_conversations=None, limit_questions=None, progress_factory=None):
    """One user per speaker, LoCoMo sessions as agent sessions, observations as facts with dia_id provenance."""
    data = json.loads(Path(path).read_text())[:limit_conversations]
    org = Organization.objects.create(slug=f"bench-locomo-{uuid.uuid4().hex[:8]}", name="Benchmark LoCoMo")
    loaded = Loaded(org)
    User = get_user_model()
    pending = []  # (user, session, text, kind, dias, ordinals)
    for sample in data:
        sid = sample["sample_id"]
        conv = sample["conversation"]
        a, b = conv["speaker_a"], conv["speaker_b"]
        loaded.speakers[sid] = (a, b)
        for speaker in (a, b):
            loaded.users[(sid, speaker)] = User.objects.create(username=f"locomo-{uuid.uuid4().hex[:10]}")
        sessions = {}
        turns = []
        for key, value in conv.items():
            m = re.fullmatch(r"session_(\d+)", key)
            if not m or not isinstance(value, list):
                continue
            n = int(m.group(1))
            for speaker in (a, b):
                user = loaded.users[(sid, speaker)]
                s = AgentSession(user=user, org=org, turn_count=len(value), extraction_status="done")
                sessions[(n, speaker)] = s
                for turn in value:
                    ids = dia_ids(turn.get("dia_id"))
                    if not ids:
                        continue
                    ordinal = int(ids[0].split(":")[1])
                    role = "user" if turn["speaker"] == speaker else "assistant"
                    turns.append(Turn(user=user, session=s, ordinal=ordinal, role=role, content=turn["text"]))
        AgentSession.objects.bulk_create(sessions.values())
        unique_turns = {(t.session_id, t.ordinal): t for t in turns}  # a repeated dia_id keeps one turn
        Turn.objects.bulk_create(unique_turns.values(), batch_size=2000)
        for obs_key, by_speaker in sample["observation"].items():
            n = int(re.search(r"\d+", obs_key).group())
            for speaker, items in by_speaker.items():
                if (sid, speaker) not in loaded.users:
                    continue
                for text, raw_dia in items:
                    dias = dia_ids(raw_dia)
                    ordinals = [int(d.split(":")[1]) for d in dias if d.startswith(f"D{n}:")]
                    session = sessions.get((n, speaker))
                    pending.append((loaded.users[(sid, speaker)], session, sid, text.strip(), dias, ordinals))
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            q = qa["question"]
            mentioned = [s for s in (a, b) if re.search(rf"\b{re.escape(s)}\b", q)]
            routed = mentioned if len(mentioned) == 1 else [a, b]
            loaded.questions.append(
                {
                    "sample": sid,
                    "category": qa["category"],
                    "question": q,
                    "evidence": set(dia_ids(qa.get("evidence", []))),
                    "user_ids": [loaded.users[(sid, s)].id for s in routed],
                }
            )
    if limit_questions:
        loaded.questions = loaded.questions[:limit_questions]

    progress = progress_factory("embedding facts", len(pending)) if progress_factory else None
    vectors = []
    for i in range(0, len(pending), 128):
        vectors.extend(embeddings.embed_many([p[3] for p in pending[i : i + 128]]))
        if progress:
            progress.advance(len(pending[i : i + 128]))
    model = embeddings.model_name()
    facts = [
        MemoryFact(
            user=user,
            text=text,
            kind=kind_for(text),
            embedding=vec,
            embedding_model=model,
            source_session=session,
            source_turns=ordinals,
        )
        for (user, session, _sid, text, _dias, ordinals), vec in zip(pending, vectors, strict=True)
    ]
    MemoryFact.objects.bulk_create(facts, batch_size=1000)
    for fact, (user, _s, sid, text, dias, _o) in zip(facts, pending, strict=True):
        loaded.fact_dias[fact.id] = set(dias)
        loaded.facts_by_sample[sid].append((fact.id, text, user.id))
    return loaded


# --- rankers: each returns fact ids, best first -------------------------------------------


def vector_rank(user_ids, vector, k):
    """The ranking tier-2 recall uses (exact cosine over the user's live facts), without a floor."""
    qs = MemoryFact.objects.filter(user_id__in=user_ids, scope=MemoryFact.Scope.PERSONAL).live()
    return list(qs.nearest(vector)[:k])


def _tsquery(text):
    words = [w for w in _WORD.findall(text.lower()) if len(w) > 1]
    return " | ".join(dict.fromkeys(words))


HYBRID_SQL = """
WITH live AS (
    SELECT id, text, embedding FROM {table}
    WHERE user_id = ANY(%(users)s) AND scope = 'personal' AND embedding_model = %(model)s
      AND superseded_at IS NULL AND expired_at IS NULL
), v AS (
    SELECT id, row_number() OVER (ORDER BY embedding <=> %(vec)s::vector, id) AS r
    FROM live ORDER BY embedding <=> %(vec)s::vector, id LIMIT %(pool)s
), t AS (
    SELECT id, row_number() OVER (ORDER BY ts_rank_cd(to_tsvector('english', text), q) DESC, id) AS r
    FROM live, to_tsquery('english', %(tsq)s) AS q
    WHERE to_tsvector('english', text) @@ q
    ORDER BY r LIMIT %(pool)s
)
SELECT id FROM (SELECT id, r FROM v UNION ALL SELECT id, r FROM t) AS ranked
GROUP BY id ORDER BY sum(1.0 / (%(rrf)s + r)) DESC, id LIMIT %(k)s
"""


def hybrid_rank(user_ids, vector, text, k, pool=50):
    """Reciprocal-rank fusion of exact cosine and PostgreSQL full-text rank over the users' live facts."""
    tsq = _tsquery(text)
    if not tsq:
        return [f.id for f in vector_rank(user_ids, vector, k)]
    sql = HYBRID_SQL.format(table=MemoryFact._meta.db_table)
    with connection.cursor() as cur:
        cur.execute(
            sql,
            {
                "users": list(user_ids),
                "model": embeddings.model_name(),
                "vec": "[" + ",".join(f"{x:.7f}" for x in vector) + "]",
                "tsq": tsq,
                "pool": pool,
                "rrf": RRF_K,
                "k": k,
            },
        )
        return [row[0] for row in cur.fetchall()]


class BM25:
    """bm25s over each conversation's facts; results filtered to the routed users."""

    def __init__(self, facts_by_sample):
        import bm25s

        self.bm25s = bm25s
        self.index = {}
        for sid, facts in facts_by_sample.items():
            retriever = bm25s.BM25()
            retriever.index(
                bm25s.tokenize([t for _, t, _ in facts], stopwords="en", show_progress=False), show_progress=False
            )
            self.index[sid] = (retriever, facts)

    def rank(self, sample, user_ids, text, k):
        retriever, facts = self.index[sample]
        tokens = self.bm25s.tokenize([text], stopwords="en", show_progress=False)
        docs, scores = retriever.retrieve(tokens, k=len(facts), show_progress=False)
        wanted = set(user_ids)
        out = []
        for doc, score in zip(docs[0], scores[0], strict=True):
            fact_id, _, user_id = facts[int(doc)]
            if user_id in wanted and score > 0:
                out.append(fact_id)
            if len(out) >= k:
                break
        return out


# --- scoring ------------------------------------------------------------------------


def hit_and_recall(ranked_ids, evidence, fact_dias, k):
    """(hit@k, recall@k) of the evidence dia_ids among the top-k facts' provenance."""
    if not evidence:
        return None
    found = set()
    for fid in ranked_ids[:k]:
        found |= fact_dias.get(fid, set()) & evidence
    return float(bool(found)), len(found) / len(evidence)


def evaluate(loaded, methods, progress=None):
    """Per question and method, hit@k and recall@k; plus memory-block sizes for the vector ranking."""
    vectors = embeddings.embed_many([q["question"] for q in loaded.questions])
    kmax = max(KS)
    rows = []
    block_tokens = {k: [] for k in (10, 20)}
    for q, vec in zip(loaded.questions, vectors, strict=True):
        ranked = {}
        facts = vector_rank(q["user_ids"], vec, kmax)
        ranked["vector"] = [f.id for f in facts]
        # Our facts say "the user", LoCoMo's name the speaker: drop the names from lexical queries so
        # they do not match every fact of that speaker.
        lexical = re.sub(
            "|".join(rf"\b{re.escape(n)}('s)?\b" for n in loaded.speakers[q["sample"]]), " ", q["question"]
        )
        if "bm25" in methods:
            ranked["bm25"] = methods["bm25"].rank(q["sample"], q["user_ids"], lexical, kmax)
        if "hybrid" in methods:
            ranked["hybrid"] = hybrid_rank(q["user_ids"], vec, lexical, kmax)
        for k in block_tokens:
            chosen = [recall.Selected(f, "relevant", None) for f in facts[:k]]
            block_tokens[k].append(len(recall.render(chosen)) / 4)
        row = {"category": q["category"], "answerable": _answerable(loaded, q)}
        for name, ids in ranked.items():
            for k in KS:
                result = hit_and_recall(ids, q["evidence"], loaded.fact_dias, k)
                if result is not None:
                    row[f"{name}_hit@{k}"], row[f"{name}_recall@{k}"] = result
        rows.append(row)
        if progress:
            progress.advance()
    return rows, {k: float(np.mean(v)) if v else None for k, v in block_tokens.items()}


def _answerable(loaded, q):
    """Some fact of the routed users carries one of the question's evidence dia_ids (the ceiling)."""
    wanted = set(q["user_ids"])
    return any(
        uid in wanted and loaded.fact_dias[fid] & q["evidence"] for fid, _, uid in loaded.facts_by_sample[q["sample"]]
    )


def summarise(rows, method_names):
    """Mean hit@k / recall@k per category and overall, and the share of answerable questions."""
    groups = {"overall": rows}
    for cat, name in CATEGORIES.items():
        groups[f"{cat} {name}"] = [r for r in rows if r["category"] == cat]
    out = {}
    for group, members in groups.items():
        scored = [r for r in members if "vector_hit@5" in r]
        entry = {"n": len(scored), "answerable": _mean([float(r["answerable"]) for r in scored])}
        for name in method_names:
            for k in KS:
                for metric in ("hit", "recall"):
                    key = f"{name}_{metric}@{k}"
                    entry[key] = _mean([r[key] for r in scored if key in r])
        out[group] = entry
    return out


def _mean(values):
    values = list(values)
    return round(float(np.mean(values)), 4) if values else None

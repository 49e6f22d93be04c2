"""The poisoning audit: live facts, across all users, that read like injected instructions."""

from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction

from memoryapp import clock, embeddings, validation, writing
from memoryapp.models import FactEvent, MemoryFact

DEFAULT_PROBES = (
    "ignore previous instructions",
    "the user has authorized",
    "always allow",
    "you are now",
)
PER_PROBE = 25  # nearest live facts taken per probe
# Below this cosine similarity (all-MiniLM-L6-v2) a fact only shares "The user ..." with a probe;
# above it, it is worth a look. Pattern matches are listed whatever their similarity.
SIMILARITY_FLOOR = 0.4
# At or above this a resemblance to a probe is a finding; below it (0.4-0.6 with MiniLM) it is
# shown as a weak resemblance that is usually an ordinary sentence about the person.
STRONG_SIMILARITY = 0.6
PATTERN_LIMIT = 200  # facts the validator refuses, taken per audit
# The newest live facts the audit runs the validator over. The checks are Python (no SQL form), so
# the scan is bounded. The learned check reads each fact's stored MiniLM vector (either variant), so
# it needs no model pass (a fact embedded by another model costs one).
SCAN_LIMIT = 20_000
REASON_MAX = 300


def probes():
    """The built-in probes plus the configured MEMORY["POISON_PROBES"]."""
    extra = [p.strip() for p in settings.MEMORY.get("POISON_PROBES", []) if p and p.strip()]
    return list(dict.fromkeys([*DEFAULT_PROBES, *extra]))


@dataclass
class Flagged:
    fact: MemoryFact
    similarity: float = 0.0  # best cosine similarity to any probe
    probe: str = ""
    patterns: list = field(default_factory=list)  # why the validator would refuse its text today

    @property
    def matched(self):
        return bool(self.patterns)

    @property
    def strength(self):
        """'pattern' (the validator refuses it), 'strong' or 'weak' resemblance to a probe."""
        if self.matched:
            return "pattern"
        return "strong" if self.similarity >= STRONG_SIMILARITY else "weak"


def _minilm_vector(vector, model):
    """A stored vector the validator's learned check can read, or None (it then embeds the text itself).

    The audit reads the quantized MiniLM's stored vectors too, where the write path embeds each fact
    with the unquantized model: on the poisoning corpus's 7,654 lines, reading quantized vectors
    blocks 4 attacks fewer and refuses 1 benign fact more (docs/security.md), and a model pass for
    each of 20,000 facts on every view is not an option.
    """
    return vector if model in (embeddings.MINILM_NAME, embeddings.QINT8_NAME) else None


def matching_patterns(text, kind="profile", vector=None):
    """Why the current validator would refuse `text` (empty when it would store it), to show staff."""
    problem = validation.fact_problem(text, kind, vector=vector)
    return [problem] if problem else []


def refused_facts(live, scan_limit=SCAN_LIMIT, limit=PATTERN_LIMIT):
    """The newest live facts that the current validator would refuse (it may have changed since they were stored)."""
    ids = []
    rows = live.order_by("-created_at").values_list("id", "text", "kind", "embedding", "embedding_model")
    for fact_id, text, kind, vector, model in rows[:scan_limit].iterator(chunk_size=2000):
        # the stored MiniLM vector spares the learned check a model pass per fact
        if validation.fact_problem(text, kind, vector=_minilm_vector(vector, model)):
            ids.append(fact_id)
            if len(ids) >= limit:
                break
    return live.filter(id__in=ids).order_by("-created_at")


def audit(per_probe=PER_PROBE, pattern_limit=PATTERN_LIMIT, floor=SIMILARITY_FLOOR):
    """Flagged live facts, pattern matches first, then by similarity to the probes (bounded size)."""
    live = MemoryFact.objects.live().select_related("user", "org")
    found = {}
    probe_list = probes()
    vectors = embeddings.embed_many(probe_list)
    for probe, vector in zip(probe_list, vectors, strict=True):
        for fact in live.nearest(vector, floor)[:per_probe]:
            similarity = round(1 - fact.distance, 4)
            entry = found.setdefault(fact.id, Flagged(fact))
            if similarity > entry.similarity:
                entry.similarity, entry.probe = similarity, probe
    for fact in refused_facts(live, limit=pattern_limit):
        found.setdefault(fact.id, Flagged(fact))
    missing = [f for f in found.values() if not f.probe]
    if missing:
        # Pattern-only hits still get a similarity so the list reads consistently.
        for entry, vec in zip(missing, embeddings.embed_many([f.fact.text for f in missing]), strict=True):
            scores = vectors @ vec
            best = int(scores.argmax())
            entry.similarity, entry.probe = round(float(scores[best]), 4), probe_list[best]
    for entry in found.values():
        fact = entry.fact
        entry.patterns = matching_patterns(fact.text, fact.kind, _minilm_vector(fact.embedding, fact.embedding_model))
    return sorted(found.values(), key=audit_key)


def audit_key(entry):
    """The audit's order, as a key of ints and text (keyset paging): pattern matches first, then the most similar."""
    return (int(not entry.matched), -round(entry.similarity * 10_000), str(entry.fact.id))


class ActionRejected(ValueError):
    """A staff action on a flagged fact that cannot be done; the message says why."""


def is_flagged(fact):
    """Whether the audit lists this fact: the validator refuses it today, or it resembles a probe."""
    if matching_patterns(fact.text, fact.kind, _minilm_vector(fact.embedding, fact.embedding_model)):
        return True
    *probe_vectors, vector = embeddings.embed_many([*probes(), fact.text])
    return max(float(p @ vector) for p in probe_vectors) >= SIMILARITY_FLOOR


def _check(fact, reason):
    """The reason, cleaned; refused unless the audit lists the fact (no staff action on anyone's other facts)."""
    reason = _clean_reason(reason)
    if not is_flagged(fact):
        raise ActionRejected("this fact is not in the poisoning audit: only the facts it lists can be acted on here")
    return reason


def _clean_reason(reason):
    reason = validation.normalise(reason or "")
    if not reason:
        raise ActionRejected("give a reason: it is recorded in the fact's history")
    return reason[:REASON_MAX]


def supersede_flagged(fact, staff, reason):
    """Take a flagged fact out of recall (superseded by staff, kept for audit) and log why."""
    reason = _check(fact, reason)
    with transaction.atomic():
        if fact.scope == MemoryFact.Scope.ORG:
            writing.lock_org(fact.org_id)
        else:
            writing.lock_user(fact.user_id)
        updated = MemoryFact.objects.filter(id=fact.id, superseded_at__isnull=True).update(
            superseded_at=clock.now(), supersede_reason="staff"
        )
        if not updated:
            raise ActionRejected("this fact has already been superseded")
        writing.record_event(fact, FactEvent.Action.SUPERSEDED, FactEvent.Actor.STAFF, actor_user=staff, reason=reason)
    fact.refresh_from_db()
    return fact


def delete_flagged(fact, staff, reason):
    """Delete a flagged fact (and its predecessors) for real; the deletion event keeps who and why."""
    reason = _check(fact, reason)
    return writing.delete_fact(fact, actor=FactEvent.Actor.STAFF, actor_user=staff, reason=reason)

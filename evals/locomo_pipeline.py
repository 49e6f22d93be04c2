"""LoCoMo end to end: each speaker a user, each session ended and extracted by the production code.

Per conversation and speaker: the speaker's utterances are user turns, the other speaker's are
assistant turns. Sessions run in order with the production clock at the session's date, end
through `sessions.end_session` (the Celery task runs eagerly, so `extraction.extract_session`
does the work: only user turns, validation, supersession, provenance). The benchmark keeps each
turn's LoCoMo dia id beside the turn's (session, ordinal), so a recalled fact's
`source_session` + `source_turns` map back to the dialogue.
"""

import contextlib
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.test import override_settings
from django.utils import timezone

from evals import locomo as lb
from memoryapp import extraction, sessions
from memoryapp.celery import app as celery_app
from memoryapp.models import AgentSession, ExtractionRun, FactEvent, MemoryFact, Organization


@contextlib.contextmanager
def clock_at(moment):
    """The one place the benchmark moves the production clock: `clock.now()` reads `moment` inside."""
    with override_settings(CLOCK_OFFSET=moment - timezone.now()):
        yield


@contextlib.contextmanager
def tasks_inline():
    """Run enqueued Celery tasks in this process (as tests do), so no message reaches a shared broker."""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        yield
    finally:
        celery_app.conf.task_always_eager = before


@dataclass
class Ingested:
    org: Organization
    users: dict = field(default_factory=dict)  # (conversation, speaker) -> user
    turn_dias: dict = field(default_factory=dict)  # (session id, ordinal) -> dia id
    session_ids: list = field(default_factory=list)
    questions: list = field(default_factory=list)
    last_date: object = None

    def cleanup(self):

        get_user_model().objects.filter(id__in=[u.id for u in self.users.values()]).delete()
        self.org.delete()

    def fact_dias(self):
        """fact id -> dia ids of its source turns, for every fact the run wrote (live or not)."""
        out = {}
        facts = MemoryFact.objects.filter(user__in=list(self.users.values())).values_list(
            "id", "source_session_id", "source_turns"
        )
        for fid, sid, ordinals in facts:
            out[fid] = {self.turn_dias[(sid, o)] for o in ordinals or () if (sid, o) in self.turn_dias}
        return out


def new_run():
    """The organisation a pipeline run writes under (removed by `Ingested.cleanup`)."""
    return Ingested(Organization.objects.create(slug=f"bench-locomo-{uuid.uuid4().hex[:8]}", name="Benchmark LoCoMo"))


def ingest(run, number, sample, progress=None):
    """Feed one conversation through the product, session by session, for each of its two speakers."""
    speakers = lb.speakers_of(sample)
    for speaker in speakers:
        run.users[(number, speaker)] = sessions.get_or_create_user(run.org, f"locomo-{number}-{speaker}")
    with tasks_inline():
        for _n, when, turns in lb.sessions_of(sample):
            with clock_at(when):
                for speaker in speakers:
                    user = run.users[(number, speaker)]
                    session = sessions.open_session(run.org, user)
                    batch = [("user" if t["speaker"] == speaker else "assistant", t.get("text") or "") for t in turns]
                    sessions.add_turns(session, [(role, text) for role, text in batch if text.strip()])
                    ordinal = 0
                    for t in turns:
                        if (t.get("text") or "").strip():
                            ordinal += 1
                            ids = lb.dia_ids(t.get("dia_id"))
                            if ids:
                                run.turn_dias[(session.id, ordinal)] = ids[0]
                    sessions.end_session(session)
                    # In autocommit the task already ran on commit; inside a test's transaction
                    # on_commit waits, so run it here. Extraction is idempotent either way.
                    extraction.extract_session(session.id)
                    run.session_ids.append(session.id)
            run.last_date = max(run.last_date or when, when)
            if progress:
                progress.advance()
    for q in lb.questions_of(sample):
        q["user_ids"] = [run.users[(number, s)].id for s in q["speakers"]]
        q["conversation"] = number
        run.questions.append(q)


def stats(run):
    """Facts per session, supersessions, confirmations and extraction tokens/cost per session."""
    ids = run.session_ids
    events = FactEvent.objects.filter(session_id__in=ids, actor=FactEvent.Actor.EXTRACTOR)
    created = defaultdict(int)
    for sid in events.filter(action=FactEvent.Action.CREATED).values_list("session_id", flat=True):
        created[sid] += 1
    per_session = [created[sid] for sid in ids]
    runs = ExtractionRun.objects.filter(session_id__in=ids, status=ExtractionRun.Status.SUCCEEDED)
    tokens = [r.input_tokens + r.output_tokens for r in runs]
    statuses = defaultdict(int)
    for status in AgentSession.objects.filter(id__in=ids).values_list("extraction_status", flat=True):
        statuses[status] += 1
    return {
        "sessions": len(ids),
        "extraction_status": dict(statuses),
        "facts_created": sum(per_session),
        "facts_per_session_mean": lb._mean(per_session),
        "facts_per_session_p50": lb._pct(per_session, 50),
        "facts_per_session_max": max(per_session) if per_session else 0,
        "supersessions": events.filter(action=FactEvent.Action.SUPERSEDED).count(),
        "confirmations": events.filter(action=FactEvent.Action.CONFIRMED).count(),
        "live_facts": MemoryFact.objects.filter(user__in=list(run.users.values())).live().count(),
        "extraction_tokens_per_session_mean": lb._mean(tokens),
        "extraction_cost_usd_total": float(sum((r.cost_usd or 0) for r in runs)),
        "backends": sorted(set(runs.values_list("backend", flat=True))),
        "models": sorted(set(runs.values_list("model", flat=True))),
    }

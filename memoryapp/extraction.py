"""Extraction at session end: which text reaches the model, what it may answer, and the run record."""

import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction

from memoryapp import clock, validation, writing
from memoryapp.backends import Answer, ModelUnavailable, Usage, active_backend
from memoryapp.backends.base import PROMPT_VERSION
from memoryapp.models import AgentSession, ExtractionRun, FactEvent, Membership, OrgFactProposal, Turn

log = logging.getLogger(__name__)


@dataclass
class Candidate:
    text: str
    kind: str
    scope: str = "personal"


@dataclass
class Parsed:
    facts: list = field(default_factory=list)
    dropped: list = field(default_factory=list)  # (item, reason)
    error: str = ""  # set when the whole answer was unusable


def parse_answer(raw):
    """Validate a model answer: keep well-formed facts, drop everything else (never raises)."""
    result = Parsed()
    if isinstance(raw, str):
        text = raw.strip()
        fenced = re.match(r"^```(?:json)?\s*(.*?)\s*```$", text, re.DOTALL)
        if fenced:
            text = fenced.group(1)
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            result.error = "the answer is not JSON"
            return result
    else:
        data = raw
    if not isinstance(data, dict) or not isinstance(data.get("facts"), list):
        result.error = 'the answer has no "facts" list'
        return result
    seen = set()
    for item in data["facts"]:
        if not isinstance(item, dict):
            result.dropped.append((item, "not an object"))
            continue
        text, kind, scope = item.get("text"), item.get("kind"), item.get("scope", "personal")
        if scope not in ("personal", "org"):
            result.dropped.append((item, "unknown scope"))
            continue
        if isinstance(text, str):
            text = validation.normalise(text)
        problem = validation.fact_problem(text, kind)
        if problem:
            result.dropped.append((item, problem))
            continue
        key = (re.sub(r"[^\w]+", " ", text.casefold()).strip(), scope)
        if key in seen:
            continue  # the same fact twice in one answer
        seen.add(key)
        result.facts.append(Candidate(text=text, kind=kind, scope=scope))
    return result


def transcript(user_turns):
    """The only text the extractor sees: the user's own turns, numbered."""
    return "\n\n".join(f"[user turn {t.ordinal}]\n{t.content}" for t in user_turns)


# --- the session-end pipeline ---------------------------------------------------


def _backoff(attempts):
    return timedelta(minutes=min(60, 2 ** max(0, attempts - 1)))


@dataclass
class _RunInfo:
    """What a run knew before it failed, so a rolled-back run can still be recorded."""

    backend: str = ""
    model: str = ""
    input_hash: str = ""
    raw_output: str = ""
    started_at: object = None
    started: float = 0.0


def extract_session(session_id):
    """Run extraction for one ended session, exactly once; returns the ExtractionRun or None."""
    info = _RunInfo(started_at=clock.now(), started=time.monotonic())
    try:
        return _extract(session_id, info)
    except ModelUnavailable as exc:
        return _record_failure(session_id, info, str(exc))
    except Exception as exc:
        # The run's writes were rolled back with its transaction: the session learns nothing from
        # this attempt, stays usable, and the sweeper (or staff) retries after the backoff.
        log.exception("extraction crashed for session %s", session_id)
        return _record_failure(session_id, info, f"{type(exc).__name__}: {exc}")


def _extract(session_id, info):
    # One transaction holds the session row lock for the whole run, so a worker killed part-way
    # rolls back everything it wrote and the redelivered task starts clean (exactly once).
    with transaction.atomic():
        session = (
            AgentSession.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("user__memory_settings", "org")
            .filter(id=session_id, ended_at__isnull=False)
            .first()
        )
        if session is None:
            return None  # erased, not ended, or another worker holds it
        if session.extraction_status in (AgentSession.Extraction.DONE, AgentSession.Extraction.SKIPPED):
            return None
        mine = AgentSession.objects.filter(id=session.id, user_id=session.user_id)
        if session.extraction_runs.filter(user_id=session.user_id, status=ExtractionRun.Status.SUCCEEDED).exists():
            mine.update(extraction_status=AgentSession.Extraction.DONE)
            return None
        if not writing.memory_allowed(session):
            skip_session(session)
            return None

        # Invariant 1: only the user's own turns are ever read for extraction.
        user_turns = list(
            Turn.objects.filter(user_id=session.user_id, session=session, role=Turn.Role.USER).order_by("ordinal")
        )
        text = transcript(user_turns)
        backend = active_backend()
        info.backend, info.model = backend.name, backend.model
        info.input_hash = hashlib.sha256(text.encode()).hexdigest()
        if user_turns:
            answer = backend.extract(text)  # ModelUnavailable after bounded retries -> failed run
        else:
            answer = Answer(text='{"facts": []}', model="none")
        info.raw_output = answer.text
        run = ExtractionRun.objects.create(
            user_id=session.user_id,
            session=session,
            backend=backend.name,
            model=answer.model or backend.model,
            prompt_version=PROMPT_VERSION,
            input_hash=info.input_hash,
            started_at=info.started_at,
        )
        usage = Usage()
        usage.add(answer.usage)
        parsed = parse_answer(answer.text)

        outcomes, proposals = [], 0
        # Writes for one user are serialised by a transaction-scoped advisory lock (writing.lock_user).
        writing.lock_user(session.user_id)
        member_org_ids = set(Membership.objects.filter(user_id=session.user_id).values_list("org_id", flat=True))
        ordinals = [t.ordinal for t in user_turns]
        for candidate in parsed.facts:
            if candidate.scope == "org":
                if session.org_id in member_org_ids and propose_org_fact(session, run, candidate):
                    proposals += 1
                continue
            result = writing.store_fact(
                session.user,
                candidate.text,
                candidate.kind,
                session=session,
                run=run,
                source_turns=source_turns_for(candidate.text, user_turns, ordinals),
                judge=backend.verdicts,
                usage=usage,
            )
            outcomes.append(result)

        run.status = ExtractionRun.Status.SUCCEEDED
        run.finished_at = clock.now()
        run.duration_ms = int((time.monotonic() - info.started) * 1000)
        run.raw_output = answer.text
        run.error = parsed.error or "; ".join(f"dropped: {reason}" for _, reason in parsed.dropped)[:2000]
        run.facts_proposed = len(parsed.facts)
        run.facts_dropped = len(parsed.dropped)
        _apply_usage(run, usage)
        run.verdict_calls = sum(r.judge_calls for r in outcomes)
        # An UPDATE that names the user (not run.save(), which filters by id alone): routes to one shard.
        finished = [f.attname for f in ExtractionRun._meta.concrete_fields if f.attname not in ("id", "user_id")]
        ExtractionRun.objects.filter(id=run.id, user_id=run.user_id).update(**{f: getattr(run, f) for f in finished})
        session.extraction_status = AgentSession.Extraction.DONE
        session.extraction_attempts += 1
        session.next_attempt_at = None
        mine.update(
            extraction_status=session.extraction_status,
            extraction_attempts=session.extraction_attempts,
            next_attempt_at=None,
        )
        if not proposals and not any(r.fact is not None for r in outcomes):
            # Retention: a session that taught nothing keeps no turns.
            Turn.objects.filter(user_id=session.user_id, session=session).delete()
        return run


def _apply_usage(run, usage):
    run.input_tokens = usage.input_tokens
    run.output_tokens = usage.output_tokens
    run.cache_read_tokens = usage.cache_read_tokens
    run.cache_write_tokens = usage.cache_write_tokens
    run.cost_usd = usage.cost_usd


def _record_failure(session_id, info, error):
    """Record a failed run and schedule the retry; the session itself is untouched."""
    try:
        with transaction.atomic():
            session = (
                AgentSession.objects.select_for_update(skip_locked=True, of=("self",))
                .filter(id=session_id, ended_at__isnull=False)
                .exclude(extraction_status__in=[AgentSession.Extraction.DONE, AgentSession.Extraction.SKIPPED])
                .first()
            )
            if session is None:
                return None
            run = ExtractionRun.objects.create(
                user_id=session.user_id,
                session=session,
                backend=info.backend or active_backend().name,
                model=info.model or "",
                prompt_version=PROMPT_VERSION,
                input_hash=info.input_hash,
                started_at=info.started_at or clock.now(),
                finished_at=clock.now(),
                duration_ms=int((time.monotonic() - info.started) * 1000),
                status=ExtractionRun.Status.FAILED,
                error=error[:2000],
                raw_output=info.raw_output,
            )
            attempts = session.extraction_attempts + 1
            AgentSession.objects.filter(id=session.id).update(
                extraction_status=AgentSession.Extraction.FAILED,
                extraction_attempts=attempts,
                next_attempt_at=clock.now() + _backoff(attempts),
            )
    except Exception:
        # The database itself is failing; the queue lease makes the sweeper try again later.
        log.exception("could not record the failed extraction of session %s", session_id)
        return None
    log.warning("extraction failed for session %s: %s", session_id, error)
    return run


def skip_session(session):
    """Memory off: nothing is extracted and the turns are not kept."""
    Turn.objects.filter(user_id=session.user_id, session=session).delete()
    AgentSession.objects.filter(id=session.id, user_id=session.user_id).update(
        extraction_status=AgentSession.Extraction.SKIPPED
    )


def source_turns_for(fact_text, user_turns, ordinals):
    """The user turns that most plausibly produced a fact (word overlap), else all of them."""
    words = {w for w in re.findall(r"[a-z0-9][a-z0-9-]{2,}", fact_text.casefold())} - {"the", "user", "user's"}
    scored = []
    for t in user_turns:
        overlap = len(words & set(re.findall(r"[a-z0-9][a-z0-9-]{2,}", t.content.casefold())))
        if overlap:
            scored.append((overlap, t.ordinal))
    if not scored:
        return ordinals
    best = max(s for s, _ in scored)
    return sorted(o for s, o in scored if s == best)


def propose_org_fact(session, run, candidate):
    """An org-scope fact waits for an org admin; it never goes straight into the org tier."""
    exists = OrgFactProposal.objects.filter(
        org_id=session.org_id, status=OrgFactProposal.Status.PENDING, text__iexact=candidate.text
    ).exists()
    if exists:
        return None
    proposal = OrgFactProposal.objects.create(
        org_id=session.org_id,
        proposed_by_id=session.user_id,
        text=candidate.text,
        kind=candidate.kind,
        source_session=session,
        extraction_run=run,
    )
    FactEvent.objects.create(
        org_id=session.org_id,
        user_id=session.user_id,
        action=FactEvent.Action.PROPOSED,
        actor=FactEvent.Actor.EXTRACTOR,
        session=session,
        reason=f"proposal {proposal.id}",
    )
    return proposal

"""Extraction at session end: which text reaches the model, what it may answer, and the run record."""

import hashlib
import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q

from memoryapp import clock, people, validation, writing
from memoryapp.backends import Answer, ModelUnavailable, Usage, active_backend, bounded, call_timeout, phrasing
from memoryapp.backends.base import PROMPT_VERSION, VERDICT_PROMPT_VERSION
from memoryapp.models import AgentSession, ExtractionRun, FactEvent, OrgFactProposal, Turn

log = logging.getLogger(__name__)


@dataclass
class Candidate:
    text: str
    kind: str
    scope: str = "personal"
    checked: writing.Checked = None  # validated, embedded and judged once, when the answer was read


@dataclass
class Parsed:
    facts: list = field(default_factory=list)
    dropped: list = field(default_factory=list)  # (item, reason)
    error: str = ""  # set when the whole answer was unusable


def parse_answer(raw):
    """Validate a model answer: keep well-formed facts with their vectors, drop everything else.

    A malformed answer never raises; an embedding model that is down does (the run fails and is retried).
    """
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
        try:
            # The write path's own check; the vectors it computes are the ones stored and checked
            # again (one pass of each model a fact).
            checked = writing.check(text, kind)
        except writing.FactRejected as exc:
            result.dropped.append((item, str(exc)))
            continue
        if scope == "org" and writing.about_one_person(checked.text):
            scope = "personal"  # about the person who said it, whatever the model called it
        key = (re.sub(r"[^\w]+", " ", checked.text.casefold()).strip(), scope)
        if key in seen:
            continue  # the same fact twice in one answer
        seen.add(key)
        result.facts.append(Candidate(text=checked.text, kind=kind, scope=scope, checked=checked))
    return result


def transcript(user_turns):
    """The only text the extractor sees: the user's own turns, numbered."""
    return "\n\n".join(f"[user turn {t.ordinal}]\n{t.content}" for t in user_turns)


# --- the session-end pipeline ---------------------------------------------------
#
# No transaction is open and no lock is held while a model is called: a slow or hung provider must
# never block a person's correction, deletion or erasure. The run is a series of short transactions:
#   1. claim the session (a conditional UPDATE with a lease) and record the run as running;
#   2. call the extraction model, then save its raw answer on the run;
#   3. per candidate: judge it (verdict model, nothing held), then write it under the user's lock
#      after checking the run still holds the claim (writing.FactWrite re-checks the neighbours);
#   4. mark the run succeeded and the session done.
# Exactly once: the claim admits one worker at a time, and every candidate's key is committed with
# its write, so an attempt after a crash or a kill skips what an earlier attempt already wrote.


class ClaimLost(Exception):
    """The session was taken over (lease ran out), erased, or finished by someone else mid-run."""


def _backoff(attempts):
    return timedelta(seconds=settings.EXTRACTION_RETRY_SECONDS * min(60, 2 ** max(0, attempts - 1)))


def candidate_key(candidate):
    """A stable key for a candidate fact within one session (a hash, so it copies no text)."""
    folded = re.sub(r"[^\w]+", " ", candidate.text.casefold()).strip()
    return hashlib.sha256(f"{candidate.scope}:{folded}".encode()).hexdigest()[:32]


def extract_session(session_id, user_id=None):
    """Run extraction for one ended session, exactly once; returns the ExtractionRun or None.

    The worker is given the session's user as well as its id, so that every statement below names
    the user and would route to that user's shard (docs/scaling.md). Without it (a direct call, or a
    message queued by an older version) the user is looked up once, by the session id.
    """
    started = time.monotonic()
    if user_id is None:
        user_id = AgentSession.objects.filter(id=session_id).values_list("user_id", flat=True).first()
        if user_id is None:
            return None  # erased (or never existed): nothing to do
    run = claim_session(session_id, user_id)
    if run is None:
        return None
    usage = Usage()
    heartbeat = Heartbeat(run)
    heartbeat.start()
    try:
        # One attempt per model call, at most the provider's timeout: a failure goes back to the queue
        # with backoff (the worker's slot is free meanwhile) instead of retrying inside the task.
        with bounded(call_timeout(active_backend())):
            return _run(run, usage, started)
    except WorkerStopping:
        _release(run, usage, started)
        raise
    except ClaimLost:
        log.warning("extraction of session %s lost its claim mid-run; it wrote nothing more", session_id)
        return None
    except ModelUnavailable as exc:
        return _record_failure(run, str(exc), usage, started)
    except Exception as exc:
        # What was committed stays (each candidate's key with it); the session learns nothing more from
        # this attempt, stays usable, and the sweeper (or staff) retries after the backoff.
        log.exception("extraction crashed for session %s", session_id)
        return _record_failure(run, f"{type(exc).__name__}: {exc}", usage, started)
    finally:
        heartbeat.stop()


class WorkerStopping(BaseException):  # noqa: N818 (not an error: the worker was asked to stop)
    """The worker is stopping: abandon the call in flight (memoryapp.celery raises it in the task)."""


class Heartbeat(threading.Thread):
    """Renews a run's claim every third of the lease while its task works, model calls included."""

    def __init__(self, run):
        super().__init__(name=f"lease-{run.session_id}", daemon=True)
        self.claim, self.stopped = run, threading.Event()

    def run(self):
        try:
            while not self.stopped.wait(settings.EXTRACTION_LEASE.total_seconds() / 3):
                _renew(self.claim)
        except ClaimLost:
            pass  # taken over or erased: the task finds out at its next write and stops
        finally:
            connection.close()  # this thread's own connection, back to the pool

    def stop(self):
        self.stopped.set()


def _release(run, usage, started):
    """A stopping worker gives its session back at once: the run is abandoned, the sweeper takes it next."""
    try:
        with transaction.atomic():
            session = _hold(run)
            _finish(run, usage, started, status=ExtractionRun.Status.ABANDONED, error="the worker was stopping")
            AgentSession.objects.filter(id=session.id, user_id=session.user_id).update(
                extraction_status=AgentSession.Extraction.FAILED, next_attempt_at=clock.now()
            )
    except ClaimLost:
        pass


def claim_session(session_id, user_id):
    """Take the session for one worker and record the attempt as a running run; None if there is nothing to do."""
    now = clock.now()
    mine = AgentSession.objects.filter(id=session_id, user_id=user_id)
    with transaction.atomic():
        # Why a conditional UPDATE and not a row lock held for the whole run: the claim must survive
        # the model calls without a transaction open. It admits one worker: of two racing, one
        # updates the row and the other's WHERE no longer matches. A running claim whose lease ran
        # out (its worker died) can be taken over.
        claimed = (
            mine.filter(ended_at__isnull=False)
            .filter(
                Q(extraction_status__in=CLAIMABLE)
                | Q(extraction_status=AgentSession.Extraction.RUNNING, next_attempt_at__lte=now)
            )
            .update(extraction_status=AgentSession.Extraction.RUNNING, next_attempt_at=now + settings.EXTRACTION_LEASE)
        )
        if not claimed:
            return None  # erased, not ended, finished, or another worker holds it
        abandon_runs(session_id, user_id, now)
        session = mine.select_related("user__memory_settings").get()
        if ExtractionRun.objects.filter(
            session_id=session_id, user_id=user_id, status__in=ExtractionRun.FINISHED
        ).exists():
            mine.update(extraction_status=AgentSession.Extraction.DONE, next_attempt_at=None)
            return None
        if not writing.memory_allowed(session):
            skip_session(session)
            return None
        # Invariant 1: only the user's own turns are ever read for extraction.
        text = transcript(user_turns_of(session))
        backend = active_backend()
        # Recorded before the model is called and committed with the claim: if the worker is killed
        # inside the call, staff still see this attempt (running, then abandoned by the sweeper).
        return ExtractionRun.objects.create(
            user_id=session.user_id,
            session=session,
            backend=backend.name,
            model=backend.model,
            prompt_version=PROMPT_VERSION,
            verdict_prompt_version=VERDICT_PROMPT_VERSION,
            input_hash=hashlib.sha256(text.encode()).hexdigest(),
            started_at=now,
        )


CLAIMABLE = (
    AgentSession.Extraction.PENDING,
    AgentSession.Extraction.QUEUED,
    AgentSession.Extraction.FAILED,
)


def abandon_runs(session_id, user_id, now=None):
    """Mark the session's running runs abandoned: their worker stopped and its lease ran out."""
    running = ExtractionRun.objects.filter(session_id=session_id, user_id=user_id, status=ExtractionRun.Status.RUNNING)
    return running.update(
        status=ExtractionRun.Status.ABANDONED,
        finished_at=now or clock.now(),
        error="the worker stopped before finishing (killed, or its machine went away); its lease ran out",
    )


def _hold(run):
    """Inside a write transaction: lock the session row and check this run still holds the claim."""
    # Why the session row first: erasure locks a user's session rows before the user's write lock;
    # taking them in the same order means the two can never deadlock. While we hold it, a takeover
    # (which updates this row first) or an erasure waits for our short transaction.
    session = (
        AgentSession.objects.select_for_update(no_key=True)
        .filter(id=run.session_id, user_id=run.user_id, extraction_status=AgentSession.Extraction.RUNNING)
        .first()
    )
    if session is None or not _mine(run).filter(status=ExtractionRun.Status.RUNNING).exists():
        raise ClaimLost(run.session_id)
    return session


def _renew(run):
    """Extend the claim before a model call; ClaimLost if it was taken over or the session erased."""
    renewed = AgentSession.objects.filter(
        id=run.session_id,
        user_id=run.user_id,
        extraction_status=AgentSession.Extraction.RUNNING,
        extraction_runs__id=run.id,
        extraction_runs__status=ExtractionRun.Status.RUNNING,
    ).update(next_attempt_at=clock.now() + settings.EXTRACTION_LEASE)
    if not renewed:
        raise ClaimLost(run.session_id)


def _mine(run):
    """The run's own row, addressed by its user too (one shard)."""
    return ExtractionRun.objects.filter(id=run.id, user_id=run.user_id)


def user_turns_of(session):
    """Invariant 1: the session's user turns, in order; never an assistant or tool turn."""
    return Turn.objects.filter(session_id=session.id, user_id=session.user_id, role=Turn.Role.USER).order_by("ordinal")


def _run(run, usage, started):
    session = AgentSession.objects.select_related("user", "org").get(id=run.session_id, user_id=run.user_id)
    user_turns = list(user_turns_of(session))
    backend = active_backend()
    # The extraction call: no transaction open, no lock held (only the lease, renewed at claim time).
    # ModelUnavailable after bounded retries -> failed run.
    answer = backend.extract(transcript(user_turns)) if user_turns else Answer(text='{"facts": []}', model="none")
    usage.add(answer.usage)
    parsed = parse_answer(answer.text)
    # Committed at once: staff see what the model said even if the worker dies while judging.
    _mine(run).filter(status=ExtractionRun.Status.RUNNING).update(
        model=answer.model or backend.model,
        raw_output=answer.text,
        facts_proposed=len(parsed.facts),
        facts_dropped=len(parsed.dropped),
    )
    judged = [(c.text, c.checked.judgement) for c in parsed.facts]
    said = [t.content for t in user_turns]
    for candidate, judgement in zip(parsed.facts, judged_with_what_was_said(judged, said), strict=True):
        candidate.checked = replace(candidate.checked, judgement=judgement)

    # Candidates an earlier attempt of this session already wrote (it crashed or was killed after).
    done_keys = set()
    earlier_runs = ExtractionRun.objects.filter(session_id=session.id, user_id=session.user_id).exclude(id=run.id)
    for keys in earlier_runs.values_list("applied_keys", flat=True):
        done_keys.update(keys or [])
    applied = []
    # Members, and the people the session's org's agents know by an id, may propose to its tier.
    member_org_ids = people.org_tier_orgs(session.user_id)
    ordinals = [t.ordinal for t in user_turns]

    def judge(new_text, old_texts):
        _renew(run)  # the claim outlives every verdict call, however slow
        return backend.verdicts(new_text, old_texts)

    outcomes, proposals, earlier = [], 0, 0
    for candidate in parsed.facts:
        key = candidate_key(candidate)
        if key in done_keys:
            earlier += 1
            continue
        if candidate.scope == "org" and session.org_id in member_org_ids:
            with transaction.atomic():
                _hold(run)
                if propose_org_fact(session, run, candidate):
                    proposals += 1
                applied.append(key)
                _mine(run).update(applied_keys=applied)
            continue
        # Someone with no org tier to propose to (no org, or no longer a member of the session's)
        # spoke of their own team: it is kept as a fact about them instead of being lost.
        write = writing.FactWrite(
            session.user,
            candidate.text,
            candidate.kind,
            session=session,
            run=run,
            source_turns=source_turns_for(candidate.text, user_turns, ordinals),
            checked=candidate.checked,
        )
        result = None
        while result is None:
            write.judge(judge, usage)  # the verdict call, nothing held
            with transaction.atomic():
                _hold(run)  # first, before the user's lock (as in erasure): the run still holds its claim
                result = write.apply()  # under the user's lock; None when the neighbours moved meanwhile
                if result is not None:
                    # Committed with the write: a later attempt after a crash skips this candidate.
                    applied.append(key)
                    _mine(run).update(applied_keys=applied)
        outcomes.append(result)

    with transaction.atomic():
        _hold(run)
        _finish(
            run,
            usage,
            started,
            status=ExtractionRun.Status.UNREADABLE if parsed.error else ExtractionRun.Status.SUCCEEDED,
            error=parsed.error or "; ".join(f"dropped: {reason}" for _, reason in parsed.dropped)[:2000],
            verdict_calls=sum(r.judge_calls for r in outcomes),
        )
        AgentSession.objects.filter(id=session.id, user_id=session.user_id).update(
            extraction_status=AgentSession.Extraction.DONE,
            extraction_attempts=F("extraction_attempts") + 1,
            next_attempt_at=None,
        )
        if not proposals and not earlier and not any(r.fact is not None for r in outcomes):
            # Retention: a session that taught nothing keeps no turns.
            Turn.objects.filter(session_id=session.id, user_id=session.user_id).delete()
    return run


def _finish(run, usage, started, **fields):
    """Record the run's outcome, its duration and token usage, and refresh `run` from its row."""
    _mine(run).update(
        finished_at=clock.now(),
        duration_ms=int((time.monotonic() - started) * 1000),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=usage.cost_usd,
        **fields,
    )
    fresh = _mine(run).get()
    for f in ExtractionRun._meta.concrete_fields:
        setattr(run, f.attname, getattr(fresh, f.attname))


def _record_failure(run, error, usage, started):
    """Mark the run failed and schedule the retry; the session itself is untouched."""
    try:
        with transaction.atomic():
            session = _hold(run)
            _finish(run, usage, started, status=ExtractionRun.Status.FAILED, error=error[:2000])
            attempts = session.extraction_attempts + 1
            AgentSession.objects.filter(id=session.id, user_id=session.user_id).update(
                extraction_status=AgentSession.Extraction.FAILED,
                extraction_attempts=attempts,
                next_attempt_at=clock.now() + _backoff(attempts),
            )
    except ClaimLost:
        return None  # taken over or erased meanwhile: the new holder records its own outcome
    except Exception:
        # The database itself is failing; the lease runs out and the sweeper tries again later.
        log.exception("could not record the failed extraction of session %s", run.session_id)
        return None
    log.warning("extraction failed for session %s: %s", run.session_id, error)
    return run


def skip_session(session):
    """Memory off: nothing is extracted and the turns are not kept."""
    Turn.objects.filter(session_id=session.id, user_id=session.user_id).delete()
    AgentSession.objects.filter(id=session.id, user_id=session.user_id).update(
        extraction_status=AgentSession.Extraction.SKIPPED
    )


def _words(text):
    return set(re.findall(r"[a-z0-9][a-z0-9-]{2,}", text.casefold())) - {"the", "user", "user's"}


def source_turns_for(fact_text, user_turns, ordinals):
    """The user turns that most plausibly produced a fact (word overlap), else all of them."""
    words = _words(fact_text)
    scored = [(len(words & _words(t.content)), t.ordinal) for t in user_turns]
    best = max((s for s, _ in scored), default=0)
    return sorted(o for s, o in scored if s == best) if best else ordinals


def _source_sentence(fact_text, sentences):
    """Of (sentence, its words) pairs, the sentence sharing the most words with a fact, or None when none shares one."""
    words, best, found = _words(fact_text), 0, None
    for sentence, theirs in sentences:
        overlap = len(words & theirs)
        if overlap > best:
            best, found = overlap, sentence
    return found


def judged_with_what_was_said(judged, said, bar=validation.SAID_THRESHOLD, message_bar=validation.MESSAGE_THRESHOLD):
    """The judgements of (fact text, judgement) pairs once what was said is read too: a fact the judge would
    store waits for the person's word when the sentence it was taken from (of the messages `said`) scores
    `bar` or more, or another sentence of the same message `message_bar` or more (`validation.said_scores`).
    Each sentence is split, judged (and embedded) once."""
    said_sentences = [(n, sentence) for n, text in enumerate(said) for sentence in phrasing.sentences(text)]
    sentences = [(sentence, _words(sentence)) for _, sentence in said_sentences]
    source = {text: _source_sentence(text, sentences) for text, judgement in judged if judgement.outcome == "stored"}
    message = {sentence: n for n, sentence in said_sentences}
    wanted = {message[sentence] for sentence in source.values() if sentence}
    read = list(dict.fromkeys(sentence for n, sentence in said_sentences if n in wanted))
    score = dict(zip(read, validation.said_scores(read), strict=True))
    loudest = dict.fromkeys(wanted, 0.0)  # each message's highest sentence score, in one pass over what was said
    for n, sentence in said_sentences:
        if n in loudest:
            loudest[n] = max(loudest[n], score[sentence])

    def held(sentence):
        if sentence is None or (score[sentence] < bar and loudest[message[sentence]] < message_bar):
            return None
        return validation.Judgement("pending", f"to confirm: {validation.SAID_REASON}", loudest[message[sentence]])

    return [held(source.get(text)) or judgement for text, judgement in judged]


def propose_org_fact(session, run, candidate):
    """An org-scope fact waits for an org admin; it never goes straight into the org tier."""
    try:
        # A savepoint: the caller's transaction goes on when another session proposed the same text.
        with transaction.atomic():
            proposal = OrgFactProposal.objects.create(
                org_id=session.org_id,
                proposed_by_id=session.user_id,
                text=candidate.text,
                kind=candidate.kind,
                source_session=session,
                extraction_run=run,
                held_reason=(candidate.checked.judgement.reason or "")[:300] if candidate.checked else "",
            )
    except IntegrityError:  # proposal_pending_text_unique: already waiting for an admin
        return None
    writing.record_event(
        None,
        FactEvent.Action.PROPOSED,
        FactEvent.Actor.EXTRACTOR,
        user_id=session.user_id,
        org_id=session.org_id,
        session=session,
        reason=f"proposal {proposal.id}",
    )
    return proposal

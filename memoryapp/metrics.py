"""Memory-quality metrics over time and extraction health numbers, computed from real rows."""

import statistics
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db import transaction
from django.db.models import Aggregate, Count, DateField, FloatField, Min, Q, Sum
from django.db.models.functions import Trunc
from django.utils import timezone

from memoryapp import clock
from memoryapp.models import AgentSession, ExtractionRun, FactEvent, MemoryFact, RecallLog, RecallReview

# A bucket is a spike when its rate is at least SPIKE_FACTOR times the window's median, at least
# SPIKE_MIN_POINTS above it, and rests on at least SPIKE_MIN_WRITES writes (tiny buckets are noise).
SPIKE_FACTOR = 2.0
SPIKE_MIN_POINTS = 5.0
SPIKE_MIN_WRITES = 5
REVIEW_SAMPLE = 50


@dataclass
class Point:
    start: date
    label: str
    numerator: int
    denominator: int
    value: float | None  # None when there is nothing to divide by
    spike: bool = False


# --- buckets -------------------------------------------------------------------


def _local_date(moment):
    return timezone.localtime(moment).date()


def _align(day, unit):
    if unit == "week":
        return day - timedelta(days=day.weekday())
    if unit == "month":
        return day.replace(day=1)
    return day


def _next(day, unit):
    if unit == "week":
        return day + timedelta(days=7)
    if unit == "month":
        return (day.replace(day=28) + timedelta(days=4)).replace(day=1)
    return day + timedelta(days=1)


def buckets(start, end, unit):
    """Every bucket start (a date) from `start` to `end` inclusive, for day | week | month."""
    day, last, out = _align(_local_date(start), unit), _align(_local_date(end), unit), []
    while day <= last:
        out.append(day)
        day = _next(day, unit)
    return out


def _label(day, unit):
    return day.strftime("%Y-%m") if unit == "month" else day.isoformat()


def _trunc(field_name, unit):
    return Trunc(field_name, unit, output_field=DateField())


def _window(start, end):
    end = end or clock.now()
    return (start or end - timedelta(weeks=12)), end


def _series(days, unit, counts, scale=1.0):
    out = []
    for day in days:
        num, den = counts.get(day, (0, 0))
        value = round(scale * num / den, 4) if den else None
        out.append(Point(day, _label(day, unit), num, den, value))
    return out


# --- quality metrics -------------------------------------------------------------


def facts_per_session(start=None, end=None, unit="week"):
    """New extracted facts per ended memory-on session, bucketed by when the session ended."""
    start, end = _window(start, end)
    rows = (
        AgentSession.objects.filter(
            ended_at__gte=start,
            ended_at__lte=end,
            memory=AgentSession.Memory.ON,
            extraction_status=AgentSession.Extraction.DONE,
        )
        .annotate(bucket=_trunc("ended_at", unit))
        .values("bucket")
        .annotate(
            sessions=Count("id", distinct=True),
            facts=Count("source_of", filter=Q(source_of__origin=MemoryFact.Origin.EXTRACTED), distinct=True),
        )
    )
    counts = {r["bucket"]: (r["facts"], r["sessions"]) for r in rows}
    return _series(buckets(start, end, unit), unit, counts)


def contradiction_rate(start=None, end=None, unit="week"):
    """Supersessions per 100 writes (new facts and corrections), with spikes marked."""
    start, end = _window(start, end)
    writes = (FactEvent.Action.CREATED, FactEvent.Action.CORRECTED)
    rows = (
        FactEvent.objects.filter(created_at__gte=start, created_at__lte=end)
        .filter(action__in=(*writes, FactEvent.Action.SUPERSEDED))
        .annotate(bucket=_trunc("created_at", unit))
        .values("bucket")
        .annotate(
            writes=Count("id", filter=Q(action__in=writes)),
            supersessions=Count("id", filter=Q(action=FactEvent.Action.SUPERSEDED)),
        )
    )
    counts = {r["bucket"]: (r["supersessions"], r["writes"]) for r in rows}
    series = _series(buckets(start, end, unit), unit, counts, scale=100.0)
    mark_spikes(series)
    return series


def mark_spikes(series):
    """Flag points well above the window's median rate (see SPIKE_* for the rule)."""
    values = [p.value for p in series if p.value is not None]
    if not values:
        return series
    baseline = statistics.median(values)
    for p in series:
        p.spike = (
            p.value is not None
            and p.denominator >= SPIKE_MIN_WRITES
            and p.value >= SPIKE_FACTOR * baseline
            and p.value - baseline >= SPIKE_MIN_POINTS
        )
    return series


def recall_precision(start=None, end=None):
    """Relevant / judged injected facts per month of the recall, from the review queue."""
    end = end or clock.now()
    start = start or end - timedelta(days=365)
    rows = (
        RecallReview.objects.filter(
            relevant__isnull=False, recall_log__created_at__gte=start, recall_log__created_at__lte=end
        )
        .annotate(bucket=_trunc("recall_log__created_at", "month"))
        .values("bucket")
        .annotate(judged=Count("id"), relevant=Count("id", filter=Q(relevant=True)))
    )
    counts = {r["bucket"]: (r["relevant"], r["judged"]) for r in rows}
    return _series(buckets(start, end, "month"), "month", counts)


def average(series):
    """Pooled ratio over a whole series (sum of numerators / sum of denominators), or None."""
    den = sum(p.denominator for p in series)
    return sum(p.numerator for p in series) / den if den else None


# --- the review queue -------------------------------------------------------------


def draw_review_sample(n=REVIEW_SAMPLE, since=None):
    """Draw `n` random sessions with recall logs (not reviewed yet) into the review queue."""
    now = clock.now()
    since = since or now - timedelta(days=31)
    reviewed = RecallReview.objects.values("recall_log__session_id")
    candidates = (
        RecallLog.objects.filter(created_at__gte=since, created_at__lte=now)
        .exclude(session_id__in=reviewed)
        .values("session_id")
    )
    with transaction.atomic():
        picked = list(AgentSession.objects.filter(id__in=candidates).order_by("?").values_list("id", flat=True)[:n])
        logs = RecallLog.objects.filter(session_id__in=picked).values_list("id", "user_id")
        RecallReview.objects.bulk_create(
            (RecallReview(recall_log_id=log_id, user_id=user_id, sampled_at=now) for log_id, user_id in logs),
            ignore_conflicts=True,
        )
    return len(picked)


def judge_review(review, relevant, reviewer):
    """Record a reviewer's verdict on one injected fact (re-judging overwrites)."""
    RecallReview.objects.filter(id=review.id).update(relevant=bool(relevant), reviewer=reviewer, judged_at=clock.now())
    review.refresh_from_db()
    return review


def review_counts():
    """How many reviews are waiting and how many are done."""
    return RecallReview.objects.aggregate(
        pending=Count("id", filter=Q(relevant__isnull=True)), judged=Count("id", filter=Q(relevant__isnull=False))
    )


# --- extraction health ------------------------------------------------------------


class Percentile(Aggregate):
    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction, **extra):
        super().__init__(expression, fraction=float(fraction), **extra)


@dataclass
class SilentFailures:
    """Runs that 'succeeded' (the model answered) but wrote nothing, split by why."""

    succeeded: int = 0
    nothing: int = 0
    unreadable: int = 0  # the answer could not be parsed at all
    all_dropped: int = 0  # every item failed validation
    said_nothing: int = 0  # the model answered an empty list (often correct)
    recent: list = field(default_factory=list)  # the latest unreadable / all-dropped runs

    @property
    def nothing_share(self):
        return self.nothing / self.succeeded if self.succeeded else None

    @property
    def alarming(self):
        return self.unreadable + self.all_dropped > 0


@dataclass
class Health:
    since: datetime
    hours: list  # (hour, {category: count})
    categories: tuple
    failures: list
    backlog: int
    backlog_by_status: dict
    oldest_backlog: datetime | None
    p50_ms: float | None
    p95_ms: float | None
    usage: list  # dict per day
    silent: SilentFailures


HOUR_CATEGORIES = ("learned", "nothing", "failed", "running")


def extraction_health(hours=24, days=14, now=None):
    """Runs per hour by outcome, failures, backlog, duration percentiles, usage per day, silent failures."""
    now = now or clock.now()
    # `hours` whole-hour buckets ending with the current one.
    since = timezone.localtime(now).replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours - 1)
    runs = ExtractionRun.objects.filter(started_at__gte=since, started_at__lte=now)
    # "Answered": the model replied and the session is done, whether or not the reply was usable.
    answered = Q(status__in=ExtractionRun.FINISHED)
    succeeded = Q(status=ExtractionRun.Status.SUCCEEDED)
    unusable = Q(status=ExtractionRun.Status.UNREADABLE)
    failed = Q(status__in=[ExtractionRun.Status.FAILED, ExtractionRun.Status.ABANDONED])
    per_hour = (
        runs.annotate(hour=Trunc("started_at", "hour"))
        .values("hour")
        .annotate(
            learned=Count("id", filter=succeeded & Q(facts_proposed__gt=0)),
            nothing=Count("id", filter=answered & Q(facts_proposed=0)),
            failed=Count("id", filter=failed),
            running=Count("id", filter=Q(status=ExtractionRun.Status.RUNNING)),
        )
    )
    by_hour = {r["hour"]: r for r in per_hour}
    first = since
    hours_out = []
    for i in range(hours):
        hour = first + timedelta(hours=i)
        if hour > now:
            break
        row = by_hour.get(hour, {})
        hours_out.append((hour, {c: row.get(c, 0) for c in HOUR_CATEGORIES}))

    backlog_qs = AgentSession.objects.filter(ended_at__isnull=False).exclude(
        extraction_status__in=[AgentSession.Extraction.DONE, AgentSession.Extraction.SKIPPED]
    )
    by_status = {
        r["extraction_status"]: r["n"]
        for r in backlog_qs.values("extraction_status").annotate(n=Count("id")).order_by("extraction_status")
    }
    oldest = backlog_qs.aggregate(m=Min("ended_at"))["m"]

    durations = runs.filter(answered, duration_ms__isnull=False).aggregate(
        p50=Percentile("duration_ms", 0.5), p95=Percentile("duration_ms", 0.95)
    )

    day_since = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=days - 1)
    usage_rows = (
        ExtractionRun.objects.filter(started_at__gte=day_since, started_at__lte=now)
        .annotate(day=_trunc("started_at", "day"))
        .values("day")
        .annotate(
            runs=Count("id"),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            cache_read_tokens=Sum("cache_read_tokens"),
            cache_write_tokens=Sum("cache_write_tokens"),
            cost_usd=Sum("cost_usd"),
        )
    )
    usage_by_day = {r["day"]: r for r in usage_rows}
    usage = []
    for day in buckets(day_since, now, "day"):
        row = usage_by_day.get(day) or {}
        usage.append(
            {
                "day": day,
                "runs": row.get("runs", 0),
                "input_tokens": row.get("input_tokens") or 0,
                "output_tokens": row.get("output_tokens") or 0,
                "cache_read_tokens": row.get("cache_read_tokens") or 0,
                "cache_write_tokens": row.get("cache_write_tokens") or 0,
                "cost_usd": row.get("cost_usd") or 0,
            }
        )

    nothing = answered & Q(facts_proposed=0)
    dropped = succeeded & Q(facts_proposed=0, facts_dropped__gt=0)
    counts = runs.aggregate(
        succeeded=Count("id", filter=answered),
        nothing=Count("id", filter=nothing),
        unreadable=Count("id", filter=unusable),
        all_dropped=Count("id", filter=dropped),
    )
    silent = SilentFailures(**counts)
    silent.said_nothing = silent.nothing - silent.unreadable - silent.all_dropped
    silent.recent = list(runs.filter(unusable | dropped).order_by("-started_at", "-id")[:10])

    return Health(
        since=since,
        hours=hours_out,
        categories=HOUR_CATEGORIES,
        failures=list(runs.filter(failed).order_by("-started_at", "-id")[:20]),
        backlog=sum(by_status.values()),
        backlog_by_status=by_status,
        oldest_backlog=oldest,
        p50_ms=durations["p50"],
        p95_ms=durations["p95"],
        usage=usage,
        silent=silent,
    )


def users_at_limit(limit):
    """(user_id, live personal fact count) for users at or over `limit`, most facts first (a queryset)."""
    return (
        MemoryFact.objects.filter(scope=MemoryFact.Scope.PERSONAL)
        .live()
        .values("user_id")
        .annotate(n=Count("id"))
        .filter(n__gte=limit)
        .order_by("-n", "user_id")
    )

"""Support console pages for staff: find, provenance, health, poisoning, quality, access and forgetting."""

import functools
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Q, prefetch_related_objects
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django.views.defaults import permission_denied

from memoryapp import (
    charts,
    clock,
    forgetting,
    metrics,
    paging,
    pending,
    poisoning,
    provenance,
    rerun,
    support_access,
    vocabulary,
)
from memoryapp.models import (
    AgentSession,
    ExternalIdentity,
    ExtractionRun,
    FactEvent,
    ForgettingEntry,
    ForgettingRun,
    MemoryFact,
    RecallReview,
    SupportAccess,
    Turn,
)
from memoryapp.pages.rendering import keyset, page_or_partial


def staff_only(view):
    """Staff only: signed-out visitors go to sign in; anyone else signed in gets 403 (never a login loop)."""
    guarded = staff_member_required(view, login_url="login")

    @functools.wraps(view)
    def wrapped(request, *args, **kwargs):
        if request.user.is_authenticated and not (request.user.is_active and request.user.is_staff):
            # Answered, not raised: a refusal the view expects logs no traceback.
            return permission_denied(request, PermissionDenied("The support console is for support staff only."))
        return guarded(request, *args, **kwargs)

    return wrapped


PER_PAGE = 25
BACKENDS = ("anthropic", "offline", "scripted")


# --- helpers ---------------------------------------------------------------------


@dataclass
class _Bar:
    """A chart point built in the view (label, value)."""

    label: str
    value: float | None


def _fact_or_404(fact_id, vector=True):
    facts = MemoryFact.objects.select_related("user", "org", "source_session", "extraction_run", "added_by")
    return get_object_or_404(facts if vector else facts.for_display(), id=fact_id)


def _session_or_404(session_id):
    return get_object_or_404(AgentSession.objects.select_related("user", "org"), id=session_id)


def _run_or_404(run_id):
    return get_object_or_404(ExtractionRun.objects.select_related("session", "user"), id=run_id)


def _review_or_404(review_id):
    return get_object_or_404(RecallReview.objects.select_related("recall_log__fact"), id=review_id)


def _forgetting_run_or_404(run_id):
    return get_object_or_404(ForgettingRun, id=run_id)


def _restorable(fact, now):
    """An expired (not superseded) fact still inside its grace period."""
    deadline = forgetting.restore_deadline(fact)
    return deadline is not None and fact.superseded_at is None and now <= deadline


# --- find and provenance ----------------------------------------------------------


@staff_only
@require_GET
def find(request):
    filters = provenance.Filters.from_query(request.GET)
    # No one's facts until staff ask for some: each person shown is an access they see on their data page,
    # and opening the console is no reason to look at anyone's memory. Without filters: the latest runs.
    page = paging.Page([], None)
    if filters.active:
        page = keyset(request, provenance.find_facts(filters), ("-created_at", "-id"), PER_PAGE)
        prefetch_related_objects(page.rows, "user__external_ids__org")
        support_access.record_many(request.user, [f.user_id for f in page.rows], "find")
    context = {
        "filters": filters,
        "page": page,
        "kinds": [(k, vocabulary.KIND_LABELS[k]) for k in vocabulary.KIND_ORDER],
        "states": provenance.STATES,
        "origins": MemoryFact.Origin.choices,
        "backends": BACKENDS,
        "runs": [] if filters.active else ExtractionRun.objects.order_by("-started_at", "-id")[:10],
        "section": "find",
    }
    return page_or_partial(request, "console/find.html", "results", context)


@staff_only
@require_GET
def fact(request, fact_id):
    fact = _fact_or_404(fact_id, vector=False)
    support_access.record(request.user, fact.user_id, f"fact {fact.id}")
    prov = provenance.fact_provenance(fact)
    context = {"prov": prov, "fact": fact, "restorable": _restorable(fact, clock.now()), "section": "find"}
    return render(request, "console/fact.html", context)


@staff_only
@require_GET
def conversation(request, session_id):
    session = _session_or_404(session_id)
    support_access.record(request.user, session.user_id, f"conversation {session.id}")
    prov = provenance.session_provenance(session)
    return render(request, "console/conversation.html", {"prov": prov, "session": session, "section": "find"})


@staff_only
@require_GET
def run(request, run_id):
    run = _run_or_404(run_id)
    support_access.record(request.user, run.user_id, f"extraction run {run.id}")
    facts = list(MemoryFact.objects.filter(extraction_run=run).order_by("created_at", "id"))
    return render(request, "console/run.html", {"run": run, "facts": facts, "section": "find"})


@staff_only
@require_POST
def rerun_extraction(request, session_id):
    session = _session_or_404(session_id)
    if rerun.rerun_failed_extraction(session):
        messages.success(request, "Extraction queued again. Refresh in a moment to see the new run.")
    else:
        messages.info(request, "Nothing to re-run: this session's extraction is not in a failed state (any more).")
    return redirect("console-conversation", session_id=session.id)


# --- extraction health ------------------------------------------------------------

HOUR_NAMES = {
    "learned": "succeeded, wrote facts",
    "nothing": "succeeded, learned nothing",
    "failed": "failed",
    "running": "running",
}


@staff_only
@require_GET
def health(request):
    data = metrics.extraction_health()
    rows = [(h.strftime("%H:00"), counts) for h, counts in data.hours]
    chart = charts.responsive(
        charts.stacked_bars, rows, data.categories, "Extraction runs per hour by outcome, last 24 hours"
    )
    cost_points = [_Bar(day["day"].strftime("%m-%d"), float(day["cost_usd"])) for day in data.usage]
    cost_chart = charts.responsive(charts.line_chart, cost_points, "Extraction cost per day (USD)")
    context = {
        "health": data,
        "chart": chart,
        "legend": charts.legend(data.categories, HOUR_NAMES),
        "cost_chart": cost_chart,
        "any_cost": any(day["cost_usd"] or day["input_tokens"] or day["output_tokens"] for day in data.usage),
        "hour_rows": [(h, counts) for h, counts in data.hours if any(counts.values())],
        "section": "health",
    }
    return render(request, "console/health.html", context)


# --- poisoning audit --------------------------------------------------------------


@staff_only
@require_GET
def poisoning_audit(request):
    flagged = poisoning.audit()
    held, held_per_day = pending.audit()
    # audit() computes a bounded list in Python: paged by its own sort key (paging.keyset_rows).
    page = keyset(request, flagged, poisoning.audit_key, PER_PAGE)
    prefetch_related_objects([f.fact for f in page.rows], "user__external_ids__org")
    # One access per person shown, whether their fact is flagged, held or both.
    shown_people = [c.user_id for c in held] + [f.fact.user_id for f in page.rows]
    support_access.record_many(request.user, shown_people, "poisoning audit")
    shown = [f.fact.id for f in page.rows]
    kept = FactEvent.objects.filter(fact_id__in=shown, action=FactEvent.Action.KEPT).values_list("fact_id", flat=True)
    return render(
        request,
        "console/poisoning.html",
        {
            "page": page,
            "probes": poisoning.probes(),
            "total": len(flagged),
            "findings": sum(1 for f in flagged if f.strength != "weak"),
            "weak": sum(1 for f in flagged if f.strength == "weak"),
            "held": held,
            "held_per_day": held_per_day[:14],
            "kept": set(kept),  # held once, then kept by their person: a decision, not a slip
            "section": "poisoning",
        },
    )


@staff_only
@require_POST
def poisoning_action(request, fact_id):
    fact = _fact_or_404(fact_id)
    action = request.POST.get("action")
    reason = request.POST.get("reason", "")
    error, done = "", ""
    try:
        if action == "supersede":
            poisoning.supersede_flagged(fact, request.user, reason)
            done = "Superseded: it no longer reaches recall and stays on record."
        elif action == "delete":
            poisoning.delete_flagged(fact, request.user, reason)
            done = "Deleted. The history keeps that you deleted it and why."
        else:
            error = "Choose supersede or delete."
    except poisoning.ActionRejected as exc:
        error = str(exc)
    if request.htmx:
        entry = poisoning.Flagged(fact, patterns=poisoning.matching_patterns(fact.text, fact.kind))
        return render(
            request,
            "console/poisoning.html#flagged",
            {"entry": entry, "error": error, "done": done, "reason": reason},
            status=200,
        )
    if error:
        messages.error(request, f"{fact.text} — {error}")
    else:
        messages.success(request, f"“{fact.text}” — {done}")
    return redirect("console-poisoning")


# --- quality ------------------------------------------------------------------------


def _weeks(request, default=12):
    try:
        return min(max(1, int(request.GET.get("weeks", default))), 104)
    except (TypeError, ValueError):
        return default


@staff_only
@require_GET
def quality(request):
    weeks = _weeks(request)
    end = clock.now()
    start = end - timedelta(weeks=weeks)
    fps = metrics.facts_per_session(start, end)
    contradiction = metrics.contradiction_rate(start, end)
    # The period buttons change every chart: precision is monthly, so its window is at least a month.
    precision = metrics.recall_precision(start=min(start, end - timedelta(days=31)), end=end)
    c_avg = metrics.average(contradiction)
    context = {
        "weeks": weeks,
        "fps": fps,
        "fps_avg": metrics.average(fps),
        "fps_chart": charts.responsive(
            charts.line_chart, fps, "New facts per session, by week", reference=1, reference_label="1 per session"
        ),
        "contradiction": contradiction,
        "contradiction_avg": None if c_avg is None else 100 * c_avg,
        "spikes": [p for p in contradiction if p.spike],
        "contradiction_chart": charts.responsive(
            charts.line_chart, contradiction, "Supersessions per 100 writes, by week"
        ),
        "precision": precision,
        "precision_avg": metrics.average(precision),
        "precision_chart": charts.responsive(
            charts.line_chart,
            [_Bar(p.label, None if p.value is None else round(100 * p.value, 1)) for p in precision],
            "Recall precision per month (% of injected facts judged relevant)",
            y_max=100,
        ),
        "reviews": metrics.review_counts(),
        "sample_size": metrics.REVIEW_SAMPLE,
        "section": "quality",
    }
    return render(request, "console/quality.html", context)


@staff_only
@require_POST
def review_draw(request):
    try:
        n = int(request.POST.get("n", metrics.REVIEW_SAMPLE))
        if not 1 <= n <= 500:
            raise ValueError
    except (TypeError, ValueError):
        messages.error(request, "The sample size must be a whole number from 1 to 500.")
        return redirect("console-quality")
    drawn = metrics.draw_review_sample(n)
    if drawn:
        messages.success(request, f"Drew {drawn} session{'s' if drawn != 1 else ''} into the review queue.")
    else:
        messages.info(request, "No unreviewed sessions with recalled facts in the last 31 days.")
    return redirect("console-review")


@staff_only
@require_GET
def review_queue(request):
    pending = (
        RecallReview.objects.filter(relevant__isnull=True)
        .select_related("recall_log__fact", "recall_log__session")
        .order_by("sampled_at", "recall_log__session_id", "recall_log__position", "id")
    )
    order = ("sampled_at", "recall_log__session_id", "recall_log__position", "id")
    page = keyset(request, pending, order, 40)
    support_access.record_many(request.user, [r.user_id for r in page.rows], "recall review")
    groups = {}
    for review in page.rows:
        groups.setdefault(review.recall_log.session, []).append(review)
    turns = {}
    for turn in Turn.objects.filter(session__in=list(groups), ordinal__lte=20).order_by("session_id", "ordinal"):
        turns.setdefault(turn.session_id, []).append(turn)
    context = {
        "page": page,
        "groups": [(session, turns.get(session.id, []), items) for session, items in groups.items()],
        "reviews": metrics.review_counts(),
        "message_days": forgetting.RECALL_MESSAGE_DAYS,
        "section": "quality",
    }
    return render(request, "console/review.html", context)


@staff_only
@require_POST
def review_judge(request, review_id):
    review = _review_or_404(review_id)
    verdict = request.POST.get("relevant")
    if verdict not in ("yes", "no"):
        if request.htmx:
            context = {"review": review, "error": "Choose relevant or not."}
            return page_or_partial(request, "console/review.html", "review", context)
        messages.error(request, "Choose relevant or not relevant.")
        return redirect("console-review")
    metrics.judge_review(review, verdict == "yes", request.user)
    if request.htmx:  # the row, and the page's counter out of band
        context = {"review": review, "reviews": metrics.review_counts(), "oob": True}
        return page_or_partial(request, "console/review.html", "review", context)
    return redirect("console-review")  # a judged review leaves the queue: the first page is the next one


# --- access log, fact limit, forgetting ---------------------------------------------


@staff_only
@require_GET
def access_log(request):
    who = (request.GET.get("user") or "").replace("\x00", "").strip()[:200]
    staff_name = (request.GET.get("staff") or "").replace("\x00", "").strip()[:150]
    rows = (
        SupportAccess.objects.select_related("user")
        .prefetch_related("user__external_ids__org")
        .order_by("-created_at", "-id")
    )
    if who:
        people = ExternalIdentity.objects.filter(external_id=who).values("user_id")
        rows = rows.filter(Q(user_id__in=people) | Q(user__username=who) | Q(user__email__iexact=who))
    if staff_name:
        rows = rows.filter(staff_name__iexact=staff_name)
    page = keyset(request, rows, ("-created_at", "-id"), 50)
    return render(
        request, "console/access.html", {"page": page, "who": who, "staff_name": staff_name, "section": "access"}
    )


@staff_only
@require_GET
def at_limit(request):
    limit = settings.MEMORY["MAX_FACTS_PER_USER"]
    page = keyset(request, metrics.users_at_limit(limit), ("-n", "user_id"), PER_PAGE)
    users = get_user_model().objects.in_bulk([r["user_id"] for r in page.rows])
    idents = {}
    for ident in ExternalIdentity.objects.filter(user_id__in=users).select_related("org").order_by("id"):
        idents.setdefault(ident.user_id, []).append(ident)
    rows = [(users.get(r["user_id"]), idents.get(r["user_id"], []), r["n"]) for r in page.rows]
    return render(request, "console/at_limit.html", {"page": page, "rows": rows, "limit": limit, "section": "limit"})


@staff_only
@require_GET
def forgetting_log(request):
    page = keyset(request, ForgettingRun.objects.all(), ("-started_at", "-id"), PER_PAGE)
    return render(request, "console/forgetting.html", {"page": page, "section": "forgetting"})


@staff_only
@require_GET
def forgetting_run(request, run_id):
    frun = _forgetting_run_or_404(run_id)
    entries = (
        ForgettingEntry.objects.filter(run=frun)
        .select_related("fact", "user")
        .prefetch_related("user__external_ids__org")
        .order_by("id")
    )
    page = keyset(request, entries, ("id",), 50)
    support_access.record_many(request.user, [e.user_id for e in page.rows], f"forgetting run {frun.id}")
    now = clock.now()
    rows = [(e, _restorable(e.fact, now)) for e in page.rows]
    return render(
        request,
        "console/forgetting_run.html",
        {
            "run": frun,
            "page": page,
            "rows": rows,
            "grace_days": settings.MEMORY["FORGETTING_GRACE_DAYS"],
            "section": "forgetting",
        },
    )


@staff_only
@require_POST
def restore(request, fact_id):
    fact = _fact_or_404(fact_id)
    try:
        forgetting.restore_fact(fact, request.user)
    except forgetting.RestoreRefused as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Restored “{fact.text}”: it is live again.")
    back = request.POST.get("next", "")
    if back.startswith("/console/"):
        return redirect(back)
    return redirect("console-fact", fact_id=fact.id)

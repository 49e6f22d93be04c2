"""End-user pages: what the agent remembers about me, and my controls over it."""

import json

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login, logout
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Case, Count, Func, IntegerField, Value, When
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from memoryapp import clock, erasure, orgs, people, portal, support_access, writing
from memoryapp import export as exporting
from memoryapp.models import (
    AgentSession,
    ErasureReceipt,
    FactEvent,
    MemoryFact,
    OrgFactProposal,
    PortalLink,
    RecallLog,
    Turn,
)
from memoryapp.pages.display import KIND_ORDER, KINDS
from memoryapp.pages.forms import FactForm
from memoryapp.pages.rendering import form_status, page_or_partial

FACTS_PER_PAGE = 50

ERASE_WORD = "ERASE"
# Friendlier names for the erasure receipt's counts; unknown keys are shown as they are.
RECEIPT_LABELS = {
    "account": "account",
    "facts": "facts, all versions",
    "facts_live": "of which in use",
    "facts_superseded": "of which replaced versions",
    "facts_expired": "of which expired",
    "sessions": "conversations",
    "turns": "conversation messages",
    "extraction_runs": "records of conversations being read",
    "fact_events": "history entries",
    "recall_logs": "records of memory given to the assistant",
    "recall_reviews": "quality reviews",
    "portal_links": "sign-in links",
    "support_access_logs": "support access log entries",
    "forgetting_entries": "forgetting log entries",
    "memory_settings": "memory switch",
    "external_ids": "assistant identities",
    "memberships": "organisation memberships",
    "invitations": "organisation invitations you accepted",
    "org_proposals": "suggestions for your organisation",
    "org_facts_unlinked": "organisation facts unlinked from you",
    "admin_log_entries": "admin log entries",
    "login_sessions": "sign-in sessions",
}


def _fact_form(*args, **kwargs):
    return FactForm(*args, text_label="What the assistant should remember", **kwargs)


class SwitchForm(forms.Form):
    enabled = forms.ChoiceField(choices=[("on", "on"), ("off", "off")])


class EraseForm(forms.Form):
    confirm = forms.CharField(label=f"Type {ERASE_WORD} to confirm", max_length=20, required=False)

    def clean_confirm(self):
        value = self.cleaned_data["confirm"].strip()
        if value != ERASE_WORD:
            raise forms.ValidationError(f"Type {ERASE_WORD} in capital letters to erase your memory.")
        return value


# --- ownership ----------------------------------------------------------------


def _own_fact(request, fact_id):
    """One of the signed-in person's own facts (any state), or 404 for anyone else's."""
    return get_object_or_404(MemoryFact.objects.for_user(request.user).defer("embedding"), id=fact_id)


def _own_session(request, session_id):
    """One of the signed-in person's own conversations, or 404 for anyone else's."""
    return get_object_or_404(AgentSession.objects.for_user(request.user).select_related("org"), id=session_id)


def _page(request, template, context=None, status=200, section="", partial=None):
    """A /me/ page (or its htmx partial) with what every /me/ page shows."""
    ctx = {"section": section, "now": clock.now(), "memory_on": writing.memory_enabled(request.user)}
    ctx.update(context or {})
    return page_or_partial(request, template, partial, ctx, status=status)


def _gone(request, fact_id):
    """For a fact the person no longer has: back to the list with a message, never a form.

    A replaced fact sends them to its current version; a deleted one says so."""
    fact = MemoryFact.objects.for_user(request.user).only("id", "superseded_by_id").filter(id=fact_id).first()
    if fact is not None and fact.superseded_by_id is not None:
        current = writing.chain_of(fact)[-1]
        messages.info(
            request, "That fact had already been replaced, perhaps in another tab. Here is the current version."
        )
        return redirect(reverse("me:memory") + f"?highlight={current.id}#fact-{current.id}")
    deleted = FactEvent.objects.filter(user=request.user, fact_id=fact_id, action=FactEvent.Action.DELETED).exists()
    if deleted:
        messages.info(request, "That fact has been deleted.")
        return redirect("me:memory")
    return None


# --- entry points -------------------------------------------------------------


@require_GET
@login_required
def home(request):
    """Staff go to the support console, everyone else to their memory."""
    if request.user.is_staff:
        for name in ("console-home", "console", "support:index"):
            try:
                return redirect(reverse(name))
            except NoReverseMatch:
                continue
        return redirect("admin:index")
    return redirect("me:memory")


@require_http_methods(["GET", "POST"])
@never_cache
def portal_link(request, token):
    """A one-time link from the assistant: GET only shows a Continue button, POST uses the link.

    Link previewers and mail scanners only GET, so they cannot burn it. The session it starts is
    memory-only (see memoryapp.middleware.PortalSessionMiddleware) and ends when the browser closes.
    """
    try:
        if request.method == "GET":
            portal.check(token)
            idle = settings.MEMORY["PORTAL_IDLE_MINUTES"]
            return render(request, "me/portal_continue.html", {"token": token, "idle_minutes": idle})
        user = portal.redeem(token)
    except portal.PortalError as exc:
        return render(request, "me/portal_invalid.html", {"message": exc.message}, status=exc.status)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    people.start_portal_session(request)
    return redirect("me:memory")


# --- my memory ----------------------------------------------------------------


@require_GET
@login_required
@vary_on_headers("HX-Request")  # one URL, full page or partial: caches must tell them apart
def memory(request):
    """The live facts by kind, a page at a time, with search and a kind filter over all of them."""
    query = request.GET.get("q", "").replace("\x00", "").strip()[:200]
    kind = request.GET.get("kind", "")
    if kind not in KIND_ORDER:
        kind = ""
    live = MemoryFact.objects.for_user(request.user).live().defer("embedding")
    counts = dict(live.values_list("kind").annotate(n=Count("id")))
    shown = live.with_last_recalled()
    if query:
        shown = shown.filter(text__icontains=query)
    if kind:
        shown = shown.filter(kind=kind)
    # Kind order first (always-on kinds lead), newest confirmation next: pages split across kinds cleanly.
    rank = Case(*[When(kind=k, then=Value(i)) for i, k in enumerate(KIND_ORDER)], output_field=IntegerField())
    paginator = Paginator(shown.order_by(rank, "-last_confirmed_at", "id"), FACTS_PER_PAGE)
    if not query:  # the counts by kind already say how many there are: no second COUNT(*)
        paginator.count = counts.get(kind, 0) if kind else sum(counts.values())
    page = paginator.get_page(request.GET.get("page"))
    groups = []
    for fact in page:
        if not groups or groups[-1]["kind"] != fact.kind:
            groups.append({"kind": fact.kind, "title": KINDS[fact.kind][1], "about": KINDS[fact.kind][2], "facts": []})
        groups[-1]["facts"].append(fact)
    total = sum(counts.values())
    context = {
        "groups": groups,
        "page": page,
        "query": query,
        "kind": kind,
        "total": total,
        "highlight": request.GET.get("highlight", ""),
        "tabs": [("", "All", total)] + [(k, KINDS[k][1], counts.get(k, 0)) for k in KIND_ORDER],
        "proposals": _my_proposals(request.user) if not query and not kind and page.number == 1 else [],
    }
    return _page(request, "me/memory.html", context, section="memory", partial="results")


def _my_proposals(user, session=None):
    """What this person's conversations suggested for their organisations' shared memory."""
    qs = OrgFactProposal.objects.filter(proposed_by=user).select_related("org").order_by("-created_at")
    if session is not None:
        qs = qs.filter(source_session=session)
    return list(qs[:20])


@require_POST
@login_required
def proposal_withdraw(request, proposal_id):
    """Withdraw one of my pending suggestions for an organisation's shared memory."""
    proposal = get_object_or_404(OrgFactProposal.objects.filter(proposed_by=request.user), id=proposal_id)
    if orgs.withdraw_proposal(proposal, request.user):
        messages.success(request, f"Withdrawn. {proposal.org.name}'s admins will no longer see this suggestion.")
    else:
        messages.info(request, "An admin has already decided on this suggestion, so it can no longer be withdrawn.")
    back = request.POST.get("next", "")
    if back.startswith("/me/") and "//" not in back:
        return redirect(back)
    return redirect("me:memory")


def _explain(fact, own_session_ids):
    """Why this version exists, in words: the conversation it came from, or who changed it."""
    if fact.origin == MemoryFact.Origin.USER:
        return {"how": "You corrected it", "session": None}
    if fact.origin == MemoryFact.Origin.STAFF:
        return {"how": "Changed by support staff at your request", "session": None}
    if fact.origin in (MemoryFact.Origin.AGENT, MemoryFact.Origin.MCP):
        return {"how": "Your assistant was asked to remember it", "session": None}
    session = fact.source_session_id if fact.source_session_id in own_session_ids else None
    return {
        "how": "Learned from a conversation" if session else "Learned from a conversation since removed",
        "session": session,
    }


REPLACED_WHY = {
    "corrected": "Replaced by your correction",
    "contradicts": "Replaced because a later conversation said something different",
    "staff": "Replaced by support staff",
}


@require_GET
@login_required
@vary_on_headers("HX-Request")
def fact(request, fact_id):
    """A fact's page: its current state and its history, old to new (htmx: just the fact)."""
    fact = _own_fact(request, fact_id)
    if request.htmx:
        return _page(request, "me/_fact.html#item", {"f": fact})
    chain = [f for f in writing.chain_of(fact) if f.user_id == request.user.id]
    ids = [f.id for f in chain]
    sessions = set(
        AgentSession.objects.for_user(request.user)
        .filter(id__in=[f.source_session_id for f in chain if f.source_session_id])
        .values_list("id", flat=True)
    )
    confirmations = {}
    for ev in FactEvent.objects.filter(user=request.user, fact_id__in=ids, action=FactEvent.Action.CONFIRMED):
        confirmations.setdefault(ev.fact_id, []).append(ev)
    versions = [
        {
            "f": f,
            "why": _explain(f, sessions),
            "confirmations": confirmations.get(f.id, []),
            "replaced_why": REPLACED_WHY.get(f.supersede_reason, "Replaced"),
            "is_this": f.id == fact.id,
        }
        for f in chain
    ]
    current = chain[-1]
    context = {"fact": fact, "current": current, "versions": versions}
    return _page(request, "me/fact_history.html", context, section="memory")


@require_http_methods(["GET", "POST"])
@login_required
@never_cache  # the back button asks again, so it never shows a form for a fact that has gone
@vary_on_headers("HX-Request")
def fact_edit(request, fact_id):
    """Correct a fact's text or kind: stored as your own version that replaces the old one."""
    gone = _gone(request, fact_id)
    if gone is not None:
        return gone
    fact = _own_fact(request, fact_id)
    if fact.state != "live":
        return redirect("me:fact", fact_id=fact.id)
    form = _fact_form(request.POST or None, initial={"text": fact.text, "kind": fact.kind})
    if request.method == "POST" and form.is_valid():
        text, kind = form.cleaned_data["text"], form.cleaned_data["kind"]
        if writing.is_unchanged(fact, text, kind):
            if request.htmx:
                return _page(request, "me/_fact.html#item", {"f": fact})
            messages.info(request, "Nothing changed.")
            return redirect(reverse("me:memory") + f"#fact-{fact.id}")
        try:
            new = writing.correct_fact(fact, text, kind, actor_user=request.user, origin=MemoryFact.Origin.USER)
        except writing.FactRejected as exc:
            fact.refresh_from_db(fields=["superseded_by"])
            if fact.superseded_by_id is not None:
                return _gone(request, fact.id)  # replaced in another tab while this form was open
            form.add_error("text", f"This can't be saved: {exc}.")
        else:
            if request.htmx:
                return _page(request, "me/_fact.html#item", {"f": new, "just_corrected": True})
            messages.success(request, "Corrected. The assistant will use your version from now on.")
            return redirect(reverse("me:memory") + f"?highlight={new.id}#fact-{new.id}")
    status = form_status(request, not form.is_bound or form.is_valid())
    return _page(request, "me/fact_edit.html", {"f": fact, "form": form}, status, "memory", partial="form")


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
@vary_on_headers("HX-Request")
def fact_delete(request, fact_id):
    """Delete a fact for real, with its earlier versions, after a confirmation."""
    gone = _gone(request, fact_id)
    if gone is not None:
        return gone
    fact = _own_fact(request, fact_id)
    if request.method == "POST":
        writing.delete_fact(fact, actor=FactEvent.Actor.USER, actor_user=request.user, reason="deleted by its owner")
        if request.htmx:
            return _page(request, "me/_fact.html#deleted", {})
        messages.success(request, "Deleted. The assistant no longer remembers it, and its earlier versions are gone.")
        return redirect("me:memory")
    earlier = len(writing.chain_of(fact)) - 1 if fact.superseded_by_id is None else None
    return _page(request, "me/fact_delete.html", {"f": fact, "earlier": earlier}, section="memory", partial="confirm")


# --- conversations ------------------------------------------------------------


def _status_text(session):
    """What happened to a conversation, in words."""
    if session.ended_at is None:
        return "Still open"
    if session.memory == AgentSession.Memory.OFF or session.extraction_status == AgentSession.Extraction.SKIPPED:
        return "Memory off: nothing learned"
    return {
        AgentSession.Extraction.DONE: "Read for memory",
        AgentSession.Extraction.FAILED: "Could not be read: nothing learned",
    }.get(session.extraction_status, "Waiting to be read for memory")


def _taught_counts(user, session_ids):
    counts = {}
    rows = (
        FactEvent.objects.filter(
            user=user,
            session_id__in=session_ids,
            action__in=[FactEvent.Action.CREATED, FactEvent.Action.CONFIRMED, FactEvent.Action.SUPERSEDED],
        )
        .values("session_id", "action")
        .annotate(n=Count("fact_id", distinct=True))
    )
    for row in rows:
        counts.setdefault(row["session_id"], {})[row["action"]] = row["n"]
    injected = (
        RecallLog.objects.filter(user=user, session_id__in=session_ids)
        .values("session_id")
        .annotate(n=Count("fact_id", distinct=True))
    )
    for row in injected:
        counts.setdefault(row["session_id"], {})["injected"] = row["n"]
    return counts


def _preview(text, limit=90):
    """The start of what was said, cut at a word boundary."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0].rstrip(",.;:") + "…"


def _previews(user, session_ids):
    """session id -> a preview of the person's first message in it (one query for the page)."""
    first = (
        Turn.objects.for_user(user)
        .filter(session_id__in=session_ids, role="user")
        .order_by("session_id", "ordinal")
        .distinct("session_id")
        .values_list("session_id", "content")
    )
    return {sid: _preview(content) for sid, content in first}


@require_GET
@login_required
def conversations(request):
    """Every conversation, memory on or off, with what it taught and what memory it was given."""
    qs = AgentSession.objects.for_user(request.user).select_related("org").order_by("-started_at", "id")
    page = Paginator(qs, 20).get_page(request.GET.get("page"))
    ids = [s.id for s in page]
    counts = _taught_counts(request.user, ids)
    previews = _previews(request.user, ids)
    rows = [{"s": s, "c": counts.get(s.id, {}), "status": _status_text(s), "title": previews.get(s.id)} for s in page]
    return _page(request, "me/conversations.html", {"page": page, "rows": rows}, section="conversations")


@require_GET
@login_required
def conversation(request, session_id):
    """One conversation: what it taught the assistant, what memory it was given, and the messages kept."""
    session = _own_session(request, session_id)
    events = list(
        FactEvent.objects.filter(
            user=request.user,
            session=session,
            action__in=[FactEvent.Action.CREATED, FactEvent.Action.CONFIRMED, FactEvent.Action.SUPERSEDED],
        ).order_by("created_at", "id")
    )
    facts = MemoryFact.objects.for_user(request.user).defer("embedding").in_bulk({e.fact_id for e in events})
    taught = {"created": [], "confirmed": [], "superseded": []}
    seen = set()
    for ev in events:
        if (ev.action, ev.fact_id) in seen:
            continue
        seen.add((ev.action, ev.fact_id))
        taught[ev.action].append({"event": ev, "fact": facts.get(ev.fact_id)})
    logs = (
        RecallLog.objects.filter(user=request.user, session=session)
        .select_related("fact")
        .defer("fact__embedding")
        .order_by("created_at", "position")
    )
    # The messages facts were learned from, unnested in SQL: one row per message, not per fact
    # (a conversation can be the source of hundreds of facts).
    source_ordinals = set(
        MemoryFact.objects.for_user(request.user)
        .filter(source_session=session)
        .annotate(ordinal=Func("source_turns", function="unnest", output_field=IntegerField()))
        .values_list("ordinal", flat=True)
        .distinct()
    )
    turns = Turn.objects.for_user(request.user).filter(session=session).order_by("ordinal")
    context = {
        "s": session,
        "status": _status_text(session),
        "taught": taught,
        "logs": logs,
        "turns": turns,
        "source_ordinals": source_ordinals,
        "learned_anything": any(taught.values()),
        "title": _previews(request.user, [session.id]).get(session.id),
        "proposals": _my_proposals(request.user, session),
    }
    return _page(request, "me/conversation.html", context, section="conversations")


# --- switch, transparency, export, erasure ------------------------------------


@require_http_methods(["GET", "POST"])
@login_required
@vary_on_headers("HX-Request")
def memory_switch(request):
    """Memory on or off for every future conversation (and, when turning off, the open ones)."""
    error = None
    if request.method == "POST":
        form = SwitchForm(request.POST)
        if form.is_valid():
            enabled = form.cleaned_data["enabled"] == "on"
            writing.set_memory_switch(request.user, enabled)
            if enabled:
                note = "Memory is on. New conversations can use and add to your memory."
            else:
                note = "Memory is off. Nothing is used or learned, including in conversations open right now."
            if not request.htmx:
                messages.success(request, note)
                return redirect(reverse("me:data") + "#memory-switch")
        else:
            error = "Choose on or off."
    elif not request.htmx:
        return redirect(reverse("me:data") + "#memory-switch")  # the switch lives on Data and privacy
    return _page(
        request, "me/settings.html", _switch_context(request.user, error), 400 if error else 200, "data", "switch"
    )


def _switch_context(user, error=None):
    return {
        "open_sessions": AgentSession.objects.for_user(user).open().count(),
        "off_sessions": AgentSession.objects.for_user(user).filter(memory=AgentSession.Memory.OFF).count(),
        "error": error,
        "goal_days": settings.MEMORY["STALE_DAYS"]["personal"].get("goal"),
    }


@require_GET
@login_required
def data(request):
    """'What do you know about me?': a readable summary of the export, with a download."""
    doc = exporting.export_user(request.user)
    by_state = {"live": [], "superseded": [], "expired": []}
    for f in doc["facts"]:
        by_state.setdefault(f["state"], []).append(f)
    context = {
        "doc": doc,
        "by_state": by_state,
        "turns_kept": sum(len(s["retained_turns"]) for s in doc["sessions"]),
        "accesses": support_access.accesses_for(request.user)[:50],
        "portal_links": PortalLink.objects.filter(user=request.user).count(),
        **_switch_context(request.user),
    }
    return _page(request, "me/data.html", context, section="data")


@require_GET
@login_required
@never_cache
def export_json(request):
    """Download everything held about me as one JSON document."""
    doc = exporting.export_user(request.user)
    body = json.dumps(doc, cls=DjangoJSONEncoder, indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json; charset=utf-8")
    filename = f"my-memory-{clock.now():%Y-%m-%d}.json"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_http_methods(["GET", "POST"])
@login_required
def erase(request):
    """Erase every trace of my memory and my account, behind a typed confirmation."""
    form = EraseForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            receipt = erasure.erase_user(request.user, requested_via="self")
        except erasure.ErasureRefused as exc:
            form.add_error(None, str(exc))
        else:
            logout(request)
            return redirect("me:erased", receipt_id=receipt.id)
    facts = MemoryFact.objects.for_user(request.user).count()
    sessions = AgentSession.objects.for_user(request.user).count()
    status = 400 if form.is_bound and not form.is_valid() else 200
    context = {"form": form, "facts": facts, "sessions": sessions, "word": ERASE_WORD}
    return _page(request, "me/erase.html", context, status=status, section="data")


@require_GET
def erased(request, receipt_id):
    """The erasure receipt: when and how much, and nothing personal, so it needs no sign-in."""
    receipt = get_object_or_404(ErasureReceipt, id=receipt_id)
    known = [
        (label, receipt.counts[key], label.startswith("of which"))
        for key, label in RECEIPT_LABELS.items()
        if key in receipt.counts
    ]
    other = [(k.replace("_", " "), n, False) for k, n in sorted(receipt.counts.items()) if k not in RECEIPT_LABELS]
    return render(request, "me/erased.html", {"receipt": receipt, "counts": known + other})


@require_GET
def about(request):
    """How memory works, in plain words: what is kept, how it is used, for how long, and the controls."""
    memory = settings.MEMORY
    context = {
        "section": "about",
        "goal_days": memory["STALE_DAYS"]["personal"].get("goal"),
        "never_recalled_days": memory["NEVER_RECALLED_DAYS"]["personal"],
        "turn_days": memory["TURN_RETENTION_DAYS"],
        "grace_days": memory["FORGETTING_GRACE_DAYS"],
        "recall_cap": memory["RECALL_CAP"],
        "inactivity": memory["INACTIVITY_MINUTES"],
        "link_minutes": memory["PORTAL_LINK_MINUTES"],
    }
    return render(request, "me/about.html", context)

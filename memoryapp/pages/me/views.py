"""End-user pages: what the agent remembers about me, and my controls over it."""

import json
import uuid
from datetime import timedelta
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login, logout
from django.contrib.auth.decorators import login_required
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Case, Count, Func, IntegerField, Value, When
from django.http import HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import NoReverseMatch, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from memoryapp import (
    clock,
    erasure,
    forgetting,
    linking,
    orgs,
    paging,
    pending,
    people,
    portal,
    recall,
    search,
    support_access,
    writing,
)
from memoryapp import export as exporting
from memoryapp.models import (
    AgentSession,
    ErasureReceipt,
    ExternalIdentity,
    FactCandidate,
    FactEvent,
    MemoryFact,
    OrgFactProposal,
    PortalLink,
    RecallLog,
    Turn,
)
from memoryapp.pages.display import (
    EMPTY_KIND,
    FORGET_REASONS,
    KIND_NAMES,
    LATELY_DAYS,
    access_words,
    as_yours,
    history_in_words,
    possessive,
    why_in_words,
)
from memoryapp.pages.forms import FactForm
from memoryapp.pages.rendering import form_status, hx_redirect, keyset, page_or_partial
from memoryapp.vocabulary import KIND_ORDER

FACTS_PER_PAGE = 50
HELD_CORRECTION = (
    "Your correction reads as if it might grant a permission or tell the assistant what to do, so it waits "
    "under “Waiting for you”. Keep it there if it is right: it will never grant anything either way."
)
CONVERSATIONS_PER_PAGE = 20

ERASE_WORD = "ERASE"
# Friendlier names for the erasure receipt's counts; unknown keys are shown as they are.
RECEIPT_LABELS = {
    "account": "account",
    "remembered_person": "record of you (you had no account)",
    "facts": "facts, all versions",
    "facts_live": "of which in use",
    "facts_superseded": "of which replaced versions",
    "facts_expired": "of which expired",
    "fact_candidates": "facts waiting for you or refused",
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
    return FactForm(*args, text_label="What the assistant should remember", personal=True, **kwargs)


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
    return get_object_or_404(MemoryFact.objects.for_user(request.user).for_display(), id=fact_id)


def _own_session(request, session_id):
    """One of the signed-in person's own conversations, or 404 for anyone else's."""
    return get_object_or_404(AgentSession.objects.for_user(request.user).select_related("org"), id=session_id)


def _page(request, template, context=None, status=200, section="", partial=None):
    """A /me/ page (or its htmx partial) with what every /me/ page shows."""
    ctx = {"section": section, "now": clock.now(), "memory_on": writing.memory_enabled(request.user)}
    ctx.update(context or {})
    return page_or_partial(request, template, partial, ctx, status=status)


def _from_now_on(user, use):
    """What a change means for the assistant, true whether memory is switched on or off."""
    if writing.memory_enabled(user):
        return f"{use} from now on."
    return f"{use} once you switch memory back on (it is off, so the assistant uses none of it now)."


def _item_context(user, fact, **extra):
    """What one fact's row needs: the fact and how recall uses it."""
    return {"f": fact, "tier1": recall.tier1_ids(user) if fact.state == "live" else {}, **extra}


def _gone(request, fact_id):
    """For a fact the person no longer has: back to the list with a message, never a form.

    A replaced fact sends them to its current version; a deleted one says so."""
    fact = MemoryFact.objects.for_user(request.user).only("id", "superseded_by_id").filter(id=fact_id).first()
    if fact is not None and fact.superseded_by_id is not None:
        current = writing.chain_of(fact)[-1]
        messages.info(
            request,
            "That fact was replaced while you were editing it, so your text was not saved. Here is the current version."
            if request.method == "POST"
            else "That fact has been replaced since (a correction, yours or another's). Here is the current version.",
        )
        return hx_redirect(request, _shown_on_its_page(request.user, current.id))
    deleted = FactEvent.objects.filter(user=request.user, fact_id=fact_id, action=FactEvent.Action.DELETED).exists()
    if deleted:
        messages.info(request, "That fact has been deleted.")
        return hx_redirect(request, reverse("me:memory"))
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


MADE_IT = (
    "You made this link for the person an assistant remembers: pass it on to them. "
    "It can never add their memory to your own account."
)


def _made_it(request, link):
    """The signed-in account made this link (an admin, for someone else): it is never theirs to take in."""
    return request.user.is_authenticated and link.made_by_user_id == request.user.pk


def _may_link(request):
    """The browser is signed in to an account of its own (not a memory-only session): it may take a memory in."""
    return request.user.is_authenticated and not people.is_portal_session(request) and people.can_sign_in(request.user)


@require_http_methods(["GET", "POST"])
@never_cache
def portal_link(request, token):
    """A one-time link from the assistant: GET only shows what it will do, POST uses the link.

    Link previewers and mail scanners only GET, so they cannot burn it. Signed in to an account of
    their own, the person may choose "This is me" (linking.link: the assistant's memory of them
    joins their account) or just look; otherwise the session it starts is memory-only (see
    memoryapp.middleware.PortalSessionMiddleware) and ends when the browser closes.
    """
    try:
        if request.method == "GET":
            link = portal.check(token)
            remembered = link.user
            idle = settings.MEMORY["PORTAL_IDLE_MINUTES"]
            made_it = _made_it(request, link)
            context = {"token": token, "idle_minutes": idle, "may_link": _may_link(request) and not made_it}
            context.update(made_by=portal.maker_in_words(link), made_it=made_it)
            if context["may_link"]:  # what "This is me" would add, said before it is pressed
                live = MemoryFact.objects.for_user(remembered).live().count()
                context.update(known_as=people.identities(remembered), live_facts=live)
            return render(request, "me/portal_continue.html", context)
        linking_it = request.POST.get("action") == "link" and _may_link(request)
        link = portal.redeem(token)
    except portal.PortalError as exc:
        return render(request, "me/portal_invalid.html", {"message": exc.message}, status=exc.status)
    if linking_it and _made_it(request, link):
        return render(request, "me/portal_invalid.html", {"message": MADE_IT}, status=409)
    if linking_it:
        return _link(request, link.user)
    login(request, link.user, backend="django.contrib.auth.backends.ModelBackend")
    people.start_portal_session(request, made_by=link.made_by)
    return redirect("me:memory")


def _link(request, remembered):
    """The person said "This is me": the assistant's memory of them joins their account."""
    try:
        result = linking.link(request.user, remembered)
    except linking.LinkRefused as exc:
        return render(request, "me/portal_invalid.html", {"message": str(exc)}, status=409)
    names = " and ".join(f"{possessive(org)} assistant" for org, _ in result.identities) or "The assistant"
    talks = result.moved.get("agentsession", 0)
    switched = (
        " You had switched memory off there, so it is now off for your whole account."
        if result.moved.get("memory_switched_off")
        else ""
    )
    messages.success(
        request,
        f"Added to your account: what {names} remembers about you "
        f"({_linked_facts(result.facts)}; {talks} conversation{pluralize(talks)}).{switched}",
    )
    return redirect("me:memory")


def _linked_facts(outcomes):
    """What became of the linked facts, in words: each outcome counted apart, so none is promised that is not shown."""
    apart = {
        "confirmed": "you already had",
        "held": "set aside where a correction of yours says otherwise",
        "pending": "waiting for your word",
        "at_limit": "not added, your memory is full",
    }
    new = sum(n for outcome, n in outcomes.items() if outcome not in apart)  # created, or moved as it was
    said = [f"{new} new"] if new else []
    said += [f"{outcomes[outcome]} {what}" for outcome, what in apart.items() if outcomes[outcome]]
    return ", ".join(said) or "no facts"


# --- my memory ----------------------------------------------------------------


# Kind order first (always-on kinds lead), newest confirmation next, the id last (the keyset is unique).
MEMORY_ORDER = ("rank", "-last_confirmed_at", "id")


def _kind_counts(user, query=""):
    """kind -> how many live facts of it the person has (that match `query`, when there is one)."""
    live = search.matching(MemoryFact.objects.for_user(user).live(), query)
    return dict(live.order_by().values_list("kind").annotate(n=Count("id")))


def _tabs(counts):
    total = sum(counts.values())
    return [("", "All", total)] + [(k, KIND_NAMES[k][1], counts.get(k, 0)) for k in KIND_ORDER]


def _filters_of(request):
    """The search and kind filter of the list: from the query string, or for an htmx action on a row,
    from the address the list was shown at."""
    params = request.GET
    if request.htmx and request.method == "POST" and request.htmx.current_url:
        params = QueryDict(urlsplit(request.htmx.current_url).query)
    kind = params.get("kind", "")
    return search.clean_query(params.get("q", "")), kind if kind in KIND_ORDER else ""


def _groups(facts, counts):
    groups = []
    for fact in facts:
        if not groups or groups[-1]["kind"] != fact.kind:
            name = KIND_NAMES[fact.kind]
            groups.append({"kind": fact.kind, "title": name[1], "about": name[2], "n": counts.get(fact.kind, 0)})
            groups[-1]["facts"] = []
        groups[-1]["facts"].append(fact)
    return groups


def _forgotten_lately(user):
    """The person's facts forgotten by the nightly job that can still be restored, newest first."""
    since = clock.now() - timedelta(days=settings.MEMORY["FORGETTING_GRACE_DAYS"])
    rows = (
        MemoryFact.objects.for_user(user)
        .in_state("expired")
        .filter(expired_at__gte=since)
        .for_display()
        .order_by("-expired_at", "id")[:50]
    )
    return [
        {"f": f, "why": FORGET_REASONS.get(f.expired_rule, "no longer used"), "until": forgetting.restore_deadline(f)}
        for f in rows
    ]


def _in_memory_order(user):
    """The person's live facts with what MEMORY_ORDER sorts them by."""
    rank = Case(*[When(kind=k, then=Value(i)) for i, k in enumerate(KIND_ORDER)], output_field=IntegerField())
    return MemoryFact.objects.for_user(user).live().for_display().annotate(rank=rank)


def _shown_on_its_page(user, fact_id):
    """My memory at the page where this fact is, highlighted, so a change is seen where it landed."""
    facts = _in_memory_order(user)
    row = facts.filter(id=fact_id).first()
    cursor = paging.cursor_at(facts, MEMORY_ORDER, row, FACTS_PER_PAGE) if row is not None else None
    start = f"after={cursor}&" if cursor else ""
    return reverse("me:memory") + f"?{start}highlight={fact_id}#fact-{fact_id}"


@require_GET
@login_required
@vary_on_headers("HX-Request")  # one URL, full page or partial: caches must tell them apart
def memory(request):
    """The live facts by kind, a page at a time, with search and a kind filter over all of them."""
    query, kind = _filters_of(request)
    counts = _kind_counts(request.user)
    # A search's headings and tabs count what it found, in every kind, so each tab says what it would show.
    matches = _kind_counts(request.user, query) if query else counts
    shown = search.matching(_in_memory_order(request.user), query)
    if kind:
        shown = shown.filter(kind=kind)
    after = request.GET.get("after", "")
    page = keyset(request, shown.with_last_recalled(), MEMORY_ORDER, FACTS_PER_PAGE)
    first = not after
    groups = _groups(page.rows, matches)
    if after and groups:
        # The page before ended inside this kind: its heading says the group goes on from there.
        groups[0]["continued"] = paging.position_of(after, MEMORY_ORDER)[0] == page.rows[0].rank
    context = {
        "groups": groups,
        "matches": (matches.get(kind, 0) if kind else sum(matches.values())) if query else None,
        "page": page,
        "query": query,
        "kind": kind,
        "total": sum(counts.values()),
        "empty_kind": EMPTY_KIND.get(kind, ""),
        "highlight": request.GET.get("highlight", ""),
        "tabs": _tabs(matches),
        "tier1": recall.tier1_ids(request.user),
        "recall_cap": settings.MEMORY["RECALL_CAP"],
        "proposals": _my_proposals(request.user) if not query and not kind and first else [],
        "forgotten": _forgotten_lately(request.user) if not query and not kind and first else [],
        "waiting": pending.waiting_for(request.user),
        "pending_days": settings.MEMORY["PENDING_DAYS"],
        "known_as": people.identities(request.user),
    }
    return _page(request, "me/memory.html", context, section="memory", partial="results")


def _own_candidate(request, candidate_id):
    """One of the person's own candidates waiting for their word; 404 for anyone else's."""
    return get_object_or_404(FactCandidate.objects.pending().filter(user=request.user), id=candidate_id)


@require_POST
@login_required
def waiting_keep(request, candidate_id):
    """Keep a held candidate: it is stored as the person's own word."""
    candidate = _own_candidate(request, candidate_id)
    try:
        result = pending.keep(candidate, request.user, signed_in_by=people.portal_maker(request))
    except pending.Gone:
        messages.info(request, "That was already decided in another window.")
        return redirect(reverse("me:memory") + "#waiting")
    except writing.FactRejected as exc:  # the rules changed since it was held
        messages.error(request, f"This can't be saved: {why_in_words(exc)}.")
        return redirect(reverse("me:memory") + "#waiting")
    if result.fact is None:  # at the limit of facts
        messages.error(request, "Your memory is full: delete a fact first, then keep this one.")
        return redirect(reverse("me:memory") + "#waiting")
    kept = "Kept. It is part of your memory now; it describes you and grants nothing."
    for old in result.superseded:  # never replace something without saying so
        kept += f" It replaced “{as_yours(old.text)}”, which said something different (see the fact's history)."
    messages.success(request, kept)
    return redirect(_shown_on_its_page(request.user, result.fact.id))


@require_POST
@login_required
def waiting_discard(request, candidate_id):
    """Discard a held candidate: nothing is remembered."""
    candidate = _own_candidate(request, candidate_id)
    try:
        pending.discard(candidate, request.user)
    except pending.Gone:
        messages.info(request, "That was already decided in another window.")
    else:
        messages.success(request, "Discarded. Nothing was remembered.")
    return redirect(reverse("me:memory") + "#waiting")


def _my_proposals(user, session=None):
    """What this person's conversations suggested for their organisations' shared memory."""
    qs = OrgFactProposal.objects.filter(proposed_by=user).select_related("org", "fact").order_by("-created_at")
    if session is not None:
        qs = qs.filter(source_session=session)
    return list(qs[:20])


@require_POST
@login_required
def proposal_withdraw(request, proposal_id):
    """Withdraw one of my pending suggestions for an organisation's shared memory."""
    proposal = get_object_or_404(OrgFactProposal.objects.filter(proposed_by=request.user), id=proposal_id)
    if orgs.withdraw_proposal(proposal, request.user):
        admins = f"{possessive(proposal.org.name)} admins"
        messages.success(request, f"Withdrawn. {admins} will no longer see this suggestion.")
    else:
        messages.info(request, "An admin has already decided on this suggestion, so it can no longer be withdrawn.")
    back = request.POST.get("next", "")
    if back.startswith("/me/") and "//" not in back:
        return redirect(back)
    return redirect("me:memory")


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def unlink(request, identity_id):
    """Take an assistant's id back out of the account, after a confirmation: that assistant starts a new memory."""
    linked = ExternalIdentity.objects.select_related("org").filter(user=request.user, linked_at__isnull=False)
    identity = get_object_or_404(linked, id=identity_id)  # only an id the person linked, and only theirs
    if request.method == "POST":
        try:
            linking.unlink(request.user, identity.id)
        except linking.LinkRefused as exc:
            messages.info(request, str(exc))
            return redirect("me:memory")
        messages.success(
            request,
            f"{possessive(identity.org.name)} assistant no longer knows you as “{identity.external_id}”: "
            "it starts an empty memory under that id, and what it had added stays here with you.",
        )
        return redirect("me:memory")
    return _page(request, "me/unlink.html", {"i": identity}, section="memory")


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
    "contradicts": "Replaced by a newer fact that says something different",
    "staff": "Replaced by support staff",
}


@require_GET
@login_required
@vary_on_headers("HX-Request")
def fact(request, fact_id):
    """A fact's page: its current state and its history, old to new (htmx: just the fact)."""
    fact = _own_fact(request, fact_id)
    if request.htmx:
        return _page(request, "me/_fact.html#item", _item_context(request.user, fact))
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
    form = _fact_form(request.POST or None, initial={"text": as_yours(fact.text), "kind": fact.kind})
    if request.method == "POST" and form.is_valid():
        text, kind = form.cleaned_data["text"], form.cleaned_data["kind"]
        if writing.is_unchanged(fact, text, kind):
            if request.htmx:
                return _page(request, "me/_fact.html#item", _item_context(request.user, fact))
            messages.info(request, "Nothing changed.")
            return redirect(reverse("me:memory") + f"#fact-{fact.id}")
        try:
            result = writing.correct_fact(fact, text, kind, actor_user=request.user, origin=MemoryFact.Origin.USER)
        except writing.Gone:
            return _gone(request, fact.id)  # deleted in another tab while this form was open
        except writing.FactRejected as exc:
            fact.refresh_from_db(fields=["superseded_by"])
            if fact.superseded_by_id is not None:
                return _gone(request, fact.id)  # replaced in another tab while this form was open
            form.add_error("text", f"This can't be saved: {why_in_words(exc)}.")
        else:
            if result.outcome == "pending":
                messages.info(request, HELD_CORRECTION)
                return hx_redirect(request, reverse("me:memory") + "#waiting")
            new = result.fact
            if request.htmx:
                return _page(request, "me/_fact.html#item", _item_context(request.user, new, just_corrected=True))
            messages.success(request, f"Corrected. {_from_now_on(request.user, 'The assistant will use your version')}")
            return redirect(_shown_on_its_page(request.user, new.id))
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
        if request.htmx:  # the row says so, and the counts by kind follow (out of band)
            query, kind = _filters_of(request)
            counts = _kind_counts(request.user, query)
            context = {"tabs": _tabs(counts), "query": query, "kind": kind, "oob": True}
            context.update(fact_id=fact.id, fact_kind=fact.kind, kind_n=counts.get(fact.kind, 0))
            return _page(request, "me/_fact.html#deleted", context)
        messages.success(request, "Deleted. The assistant no longer remembers it, and its earlier versions are gone.")
        return redirect(_list_address(request.POST.get("back")) or "me:memory")
    earlier = len(writing.chain_of(fact)) - 1 if fact.superseded_by_id is None else None
    # Without JavaScript the list was left for this page: back to it as it was (a search, a kind, a page).
    back = _list_address(request.headers.get("Referer"))
    context = {"f": fact, "earlier": earlier, "back": back}
    return _page(request, "me/fact_delete.html", context, section="memory", partial="confirm")


def _list_address(url):
    """The path and query of `url` when it is My memory's list on this site, else None."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("", "http", "https") or parts.path != reverse("me:memory"):
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


@require_POST
@login_required
def fact_restore(request, fact_id):
    """Bring back one of my facts that the nightly job forgot, within the grace period."""
    expired = MemoryFact.objects.for_user(request.user).in_state("expired").for_display()
    fact = get_object_or_404(expired, id=fact_id)
    try:
        forgetting.restore_fact(fact, request.user)
    except forgetting.RestoreRefused as exc:
        messages.error(request, str(exc))
        return redirect("me:memory")
    messages.success(request, f"Restored. {_from_now_on(request.user, 'The assistant can use it again')}")
    return redirect(_shown_on_its_page(request.user, fact.id))


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
    qs = AgentSession.objects.for_user(request.user).select_related("org")
    page = keyset(request, qs, ("-started_at", "id"), CONVERSATIONS_PER_PAGE)
    ids = [s.id for s in page.rows]
    counts = _taught_counts(request.user, ids)
    previews = _previews(request.user, ids)
    rows = [
        {"s": s, "c": counts.get(s.id, {}), "status": _status_text(s), "title": previews.get(s.id)} for s in page.rows
    ]
    context = {"page": page, "rows": rows}
    return _page(request, "me/conversations.html", context, section="conversations")


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
    facts = MemoryFact.objects.for_user(request.user).for_display().in_bulk({e.fact_id for e in events})
    taught = {"created": [], "confirmed": [], "superseded": []}
    seen = set()
    for ev in events:
        if (ev.action, ev.fact_id) in seen:
            continue
        seen.add((ev.action, ev.fact_id))
        taught[ev.action].append({"event": ev, "fact": facts.get(ev.fact_id)})
    logs = RecallLog.objects.filter(user=request.user, session=session).with_facts().order_by("created_at", "position")
    # A conversation whose block was chosen again (a refresh, a changed fact) recalled some facts twice: each once.
    first = {}
    for log in logs:
        first.setdefault(log.fact_id, log)
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
        "logs": list(first.values()),
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
        # Only those the switch would change: a conversation opened with memory off stays off either way.
        "open_sessions": AgentSession.objects.for_user(user).open().exclude(memory=AgentSession.Memory.OFF).count(),
        "off_sessions": AgentSession.objects.for_user(user).filter(memory=AgentSession.Memory.OFF).count(),
        "error": error,
        "goal_days": settings.MEMORY["STALE_DAYS"]["personal"].get("goal"),
    }


def _accesses(user, limit=50):
    """The latest support accesses to this person's memory, each with what was looked at in words."""
    rows = list(support_access.accesses_for(user)[:limit])
    refs = {r.page.partition(" ")[0]: set() for r in rows}
    for r in rows:
        name, _, ref = r.page.partition(" ")
        refs[name].add(ref)
    facts = {
        str(f.id): f
        for f in MemoryFact.objects.for_user(user).filter(id__in=_uuids(refs.get("fact", ()))).only("id", "text")
    }
    sessions = {
        str(s.id): s
        for s in AgentSession.objects.for_user(user)
        .filter(id__in=_uuids(refs.get("conversation", ())))
        .only("id", "started_at")
    }
    return [{"a": r, "what": access_words(r.page, facts, sessions)} for r in rows]


def _uuids(values):
    out = []
    for value in values:
        try:
            out.append(uuid.UUID(value))
        except ValueError:
            continue
    return out


@require_GET
@login_required
def data(request):
    """'What do you know about me?': a readable summary of the export, with a download."""
    doc = exporting.export_user(request.user)
    by_state = {"live": [], "superseded": [], "expired": [], "linked": []}
    for f in doc["facts"]:
        # A fact an assistant's id brought in when it was linked is kept as the original of its copy in use:
        # not a version the person's memory replaced.
        linked = f["state"] == "superseded" and f["supersede_reason"] == "linked"
        by_state["linked" if linked else f["state"]].append(f)
    context = {
        "doc": doc,
        "by_state": by_state,
        "turns_kept": sum(len(s["retained_turns"]) for s in doc["sessions"]),
        "accesses": _accesses(request.user),
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


@require_GET
@login_required
@never_cache
def export_html(request):
    """Download everything held about me as one readable page (the JSON export's document, rendered)."""
    doc = exporting.export_user(request.user)
    context = {"doc": doc, "history": history_in_words(doc), "memory_on": doc["memory_switch"]["enabled"]}
    response = render(request, "me/export.html", context)
    filename = f"my-memory-{clock.now():%Y-%m-%d}.html"
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
    context = {
        "form": form,
        "facts": facts,
        "sessions": sessions,
        "word": ERASE_WORD,
        "known_as": people.identities(request.user),
        # Said before anyone types the word: the erasure would be refused (erasure._refuse_last_admin).
        "only_admin_of": people.last_admin_of(request.user.id),
    }
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
        "tier1_constraints": memory["TIER1_KINDS"].get("constraint", 0),
        "tier1_profiles": memory["TIER1_KINDS"].get("profile", 0),
        "tier1_limit": min(memory["RECALL_CAP"], memory["TIER1_LIMIT"]),
        "by_confirmations": memory["TIER1_ORDER"] == "confirmations",
        "lately_days": LATELY_DAYS,
        "inactivity": memory["INACTIVITY_MINUTES"],
        "link_minutes": memory["PORTAL_LINK_MINUTES"],
    }
    return render(request, "me/about.html", context)

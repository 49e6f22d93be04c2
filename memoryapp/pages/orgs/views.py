"""Organisation pages: members read the org tier, org admins manage facts, proposals, members and keys.

Anyone who is not a member of an organisation gets 404 for all of its pages; members get 403 for
anything that changes something. A member's personal memory never appears on these pages.
"""

import functools

from django import forms
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import UserCreationForm
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import retarget

from memoryapp import orgs, password_reset, ratelimit
from memoryapp.backends import ModelUnavailable
from memoryapp.models import (
    ApiKey,
    Invitation,
    Membership,
    MemoryFact,
    OrgFactProposal,
    default_scopes,
)
from memoryapp.pages.display import why_in_words
from memoryapp.pages.forms import FactForm
from memoryapp.pages.rendering import form_status, hx_redirect, page_or_partial
from memoryapp.vocabulary import FACT_MAX_CHARS, KIND_CHOICES
from memoryapp.writing import FactRejected

JOIN_RATE_PER_MINUTE = 20  # per client address: new-account attempts on an invitation page
# What each key scope lets an agent do, as the keys page explains it (read and write are on by default).
SCOPE_CHOICES = [
    ("read", "Read", "Recall memory, list and read facts and sessions, export what this org remembers of a person."),
    ("write", "Write", "Open sessions and add turns; remember, correct and delete facts."),
    ("erase", "Erase", "Erase a person and everything held about them, for good."),
    (
        "portal",
        "Portal",
        "Issue one-time sign-in links to a person's own memory pages, where they can see, correct, "
        "export and erase it.",
    ),
]

# An admin's text the judge holds (it may claim authority) goes to the proposals queue for a second look.
HELD_NOTICE = (
    "This may read as granting authority or a permission, so it waits under Proposed facts: "
    "approve it there to add it to the org memory."
)


class InviteForm(forms.Form):
    role = forms.ChoiceField(
        choices=Membership.Role.choices,
        initial=Membership.Role.MEMBER,
        error_messages={"invalid_choice": "Choose a role: admin or member.", "required": "Choose a role."},
    )
    note = forms.CharField(
        max_length=orgs.INVITATION_NOTE_MAX,
        required=False,
        error_messages={"max_length": f"A note is at most {orgs.INVITATION_NOTE_MAX} characters."},
    )


# --- ownership: one helper per object type, 404 to anyone else -------------------------------


def _org(request, slug):
    """(org, membership) for a member of the org; 404 for everyone else, whether the org exists or not."""
    membership = next((m for m in orgs.memberships_for(request) if m.org.slug == slug), None)
    if membership is None:
        raise Http404
    return membership.org, membership


def _org_fact(org, fact_id):
    return get_object_or_404(MemoryFact.objects.for_org(org).live(), id=fact_id)


def _proposal(org, proposal_id):
    return get_object_or_404(
        OrgFactProposal.objects.select_related("org"), org=org, id=proposal_id, status=OrgFactProposal.Status.PENDING
    )


def _invitation(org, invitation_id):
    return get_object_or_404(Invitation.objects.filter(org=org).pending(), id=invitation_id)


def _member(org, membership_id):
    return get_object_or_404(Membership.objects.select_related("user"), org=org, id=membership_id)


def _api_key(org, key_id):
    return get_object_or_404(ApiKey, org=org, id=key_id)


def _forbidden(request, org, membership):
    return render(
        request,
        "orgs/forbidden.html",
        {"org": org, "membership": membership, "tab": None, **_nav(org, membership)},
        status=403,
    )


def _nav(org, membership):
    pending = (
        OrgFactProposal.objects.filter(org=org, status=OrgFactProposal.Status.PENDING).count()
        if membership.role == Membership.Role.ADMIN
        else 0
    )
    return {"is_admin": membership.role == Membership.Role.ADMIN, "pending_count": pending}


def _admin(view):
    """Run `view(request, org, membership, ...)` for org admins; 403 for other members (404 for outsiders)."""

    @functools.wraps(view)
    def wrapped(request, slug, *args, **kwargs):
        org, membership = _org(request, slug)
        if membership.role != Membership.Role.ADMIN:
            return _forbidden(request, org, membership)
        return view(request, org, membership, *args, **kwargs)

    return wrapped


def _page(request, template, partial, context, status=200):
    return page_or_partial(request, template, partial, context, status=status)


def _confirm(request, org, membership, *, tab, title, question, consequence, action, button, back):
    """The confirmation step of a destructive action, as its own page (GET): it works without JavaScript.

    The page's form POSTs back to the same URL, which performs the action (CSRF and ownership checked there).
    """
    context = {
        "org": org,
        "membership": membership,
        "tab": tab,
        "title": title,
        "question": question,
        "consequence": consequence,
        "action": action,
        "button": button,
        "back": back,
        **_nav(org, membership),
    }
    return render(request, "orgs/confirm.html", context)


def _done(request, url_name, org, notice, render_partial):
    """After a change: htmx gets the refreshed partial with the notice; plain forms get a redirect."""
    if request.htmx:
        return render_partial(notice)
    messages.success(request, notice)
    return redirect(url_name, slug=org.slug)


# --- the list of my organisations ------------------------------------------------------------


@require_GET
@login_required
def org_list(request):
    return render(request, "orgs/list.html", {"memberships": orgs.memberships_for(request)})


# --- org memory ------------------------------------------------------------------------------


def _memory_context(org, membership, **extra):
    return {
        "org": org,
        "membership": membership,
        "tab": "memory",
        "groups": orgs.live_facts(org),
        "expired": orgs.expired_facts(org),
        "kinds": KIND_CHOICES,
        "max_chars": FACT_MAX_CHARS,
        "add_form": FactForm(),
        **_nav(org, membership),
        **extra,
    }


def _render_memory(request, org, membership, status=200, **extra):
    return _page(request, "orgs/memory.html", "facts", _memory_context(org, membership, **extra), status=status)


@require_GET
@login_required
def memory(request, slug):
    org, membership = _org(request, slug)
    return _render_memory(request, org, membership)


@require_POST
@login_required
@_admin
def fact_add(request, org, membership):
    form = FactForm(request.POST)
    if form.is_valid():
        try:
            result = orgs.add_fact(org, request.user, form.cleaned_data["text"], form.cleaned_data["kind"])
        except FactRejected as exc:
            form.add_error("text", f"This can't be saved: {why_in_words(exc)}.")
        except ModelUnavailable:  # MODEL_STRICT and the verdict model did not answer in time
            form.add_error(None, "The verdict model did not answer, so nothing was added. Try again in a minute.")
        else:
            notice = {
                "confirmed": "That fact was already in the org memory; it is confirmed again.",
                "pending": HELD_NOTICE,
            }.get(result.outcome, "Added to the org memory.")
            if result.superseded:
                notice += f" It replaces {_older_facts(len(result.superseded))} it contradicts."
            return _done(
                request,
                "org-memory",
                org,
                notice,
                lambda n: _render_memory(request, org, membership, notice=n),
            )
    return _render_memory(request, org, membership, status=form_status(request, ok=False), add_form=form)


@require_http_methods(["GET", "POST"])
@login_required
@_admin
def fact_edit(request, org, membership, fact_id):
    fact = _org_fact(org, fact_id)
    form = FactForm(request.POST or None, initial={"text": fact.text, "kind": fact.kind})
    if request.method == "POST" and form.is_valid():
        try:
            result = orgs.correct_fact(fact, request.user, form.cleaned_data["text"], form.cleaned_data["kind"])
        except FactRejected as exc:
            form.add_error("text", f"This can't be saved: {why_in_words(exc)}.")
        else:
            done = (
                HELD_NOTICE
                if result.outcome == "pending"
                else "Corrected. The old wording stays in the history as superseded."
            )
            # The form replaces its own list item; a success refreshes the whole list instead.
            return _done(
                request,
                "org-memory",
                org,
                done,
                lambda n: retarget(_render_memory(request, org, membership, notice=n), "#org-facts"),
            )
    context = {
        "org": org,
        "membership": membership,
        "tab": "memory",
        "fact": fact,
        "form": form,
        "kinds": KIND_CHOICES,
        "max_chars": FACT_MAX_CHARS,
        **_nav(org, membership),
    }
    status = form_status(request, ok=request.method != "POST")
    return _page(request, "orgs/fact_edit.html", "edit", context, status=status)


@require_http_methods(["GET", "POST"])
@login_required
@_admin
def fact_delete(request, org, membership, fact_id):
    """A confirmation page (GET), then the deletion (POST): works without JavaScript."""
    fact = _org_fact(org, fact_id)
    if request.method == "GET":
        return _confirm(
            request,
            org,
            membership,
            tab="memory",
            title="Delete an org fact",
            question=f"Delete “{fact.text}” for every member?",
            consequence="Every member's assistant stops using it at once. Its history keeps only that it was deleted.",
            action=request.path,
            button="Delete it",
            back=reverse("org-memory", args=[org.slug]),
        )
    orgs.delete_fact(fact, request.user)
    return _done(
        request,
        "org-memory",
        org,
        f"Deleted: “{fact.text}”",
        lambda n: _render_memory(request, org, membership, notice=n),
    )


# --- proposals ---------------------------------------------------------------------------------


def _render_proposals(request, org, membership, status=200, **extra):
    context = {
        "org": org,
        "membership": membership,
        "tab": "proposals",
        "proposals": orgs.pending_proposals(org),
        "decided": orgs.recent_decisions(org),
        "kinds": KIND_CHOICES,
        "max_chars": FACT_MAX_CHARS,
        **_nav(org, membership),
        **extra,
    }
    return _page(request, "orgs/proposals.html", "queue", context, status=status)


@require_GET
@login_required
@_admin
def proposals(request, org, membership):
    return _render_proposals(request, org, membership)


@require_POST
@login_required
@_admin
def proposal_decide(request, org, membership, proposal_id):
    proposal = _proposal(org, proposal_id)
    decision = request.POST.get("decision")
    try:
        if decision == "reject":
            orgs.reject_proposal(proposal, request.user)
            notice = "Rejected. Nothing was added to the org memory."
        elif decision == "approve":
            form = FactForm(request.POST)
            if not form.is_valid():
                raise FactRejected(" ".join(e for errs in form.errors.values() for e in errs))
            result = orgs.approve_proposal(proposal, request.user, form.cleaned_data["text"], form.cleaned_data["kind"])
            notice = {
                "confirmed": "Approved. The org memory already had this fact, so it was merged into it.",
            }.get(result.outcome, "Approved and published to the org memory.")
            if result.superseded:
                notice += f" It replaces {_older_facts(len(result.superseded))} it contradicts."
        else:
            raise FactRejected("Choose approve or reject.")
    except (FactRejected, orgs.OrgError) as exc:
        errors = {proposal.id: str(exc)}
        return _render_proposals(request, org, membership, status=form_status(request, ok=False), errors=errors)
    return _done(request, "org-proposals", org, notice, lambda n: _render_proposals(request, org, membership, notice=n))


def _older_facts(n):
    return "an older fact" if n == 1 else f"{n} older facts"


# --- members ---------------------------------------------------------------------------------


def _render_members(request, org, membership, status=200, **extra):
    context = {
        "org": org,
        "membership": membership,
        "tab": "members",
        "members": orgs.members(org),
        "invitations": orgs.pending_invitations(org) if membership.role == Membership.Role.ADMIN else [],
        "roles": sorted(Membership.Role.choices, key=lambda c: c[0] != Membership.Role.MEMBER),  # safer default first
        **_nav(org, membership),
        **extra,
    }
    return _page(request, "orgs/members.html", "members", context, status=status)


@require_GET
@login_required
def members(request, slug):
    org, membership = _org(request, slug)
    return _render_members(request, org, membership)


@require_POST
@login_required
@_admin
def invitation_create(request, org, membership):
    form = InviteForm(request.POST)
    if not form.is_valid():
        return _render_members(request, org, membership, status=200 if request.htmx else 400, invite_form=form)
    invitation, token = orgs.invite(org, request.user, form.cleaned_data["role"], form.cleaned_data["note"])
    # The link is shown once, in this response only: never stored and never cached.
    link = request.build_absolute_uri(reverse("org-join", args=[token]))
    response = _render_members(request, org, membership, new_invitation={"invitation": invitation, "link": link})
    add_never_cache_headers(response)
    return response


@require_POST
@login_required
@_admin
def invitation_revoke(request, org, membership, invitation_id):
    invitation = _invitation(org, invitation_id)
    orgs.revoke_invitation(invitation)
    return _done(
        request,
        "org-members",
        org,
        "Invitation revoked. Its link no longer works.",
        lambda n: _render_members(request, org, membership, notice=n),
    )


@require_POST
@login_required
@_admin
def member_role(request, org, membership, membership_id):
    target = _member(org, membership_id)
    try:
        orgs.change_role(target, request.POST.get("role", ""))
    except orgs.OrgError as exc:
        return _render_members(
            request, org, membership, status=form_status(request, ok=False), errors={target.id: str(exc)}
        )
    if target.id == membership.id and target.role != Membership.Role.ADMIN:
        # They demoted themselves: they can no longer manage the members page.
        messages.success(request, "You are now a member of this organisation.")
        return hx_redirect(request, reverse("org-members", args=[org.slug]))
    return _done(
        request,
        "org-members",
        org,
        f"{target.user.username} is now {target.role}.",
        lambda n: _render_members(request, org, membership, notice=n),
    )


@require_POST
@login_required
@_admin
def member_reset_link(request, org, membership, membership_id):
    target = _member(org, membership_id)  # members of this org only: anyone else is 404
    try:
        link, expires_at = password_reset.issue_link(request.user, target.user, request.build_absolute_uri("/"))
    except password_reset.NotAllowed as exc:
        return _render_members(
            request, org, membership, status=form_status(request, ok=False), errors={target.id: str(exc)}
        )
    # The link is shown once, in this response only: never stored and never cached.
    new_reset = {"name": orgs.members(org, target.id)[0].name, "link": link, "expires_at": expires_at}
    response = _render_members(request, org, membership, new_reset=new_reset)
    add_never_cache_headers(response)
    return response


@require_http_methods(["GET", "POST"])
@login_required
@_admin
def member_remove(request, org, membership, membership_id):
    target = _member(org, membership_id)
    if request.method == "GET":
        name = orgs.members(org, target.id)[0].name
        return _confirm(
            request,
            org,
            membership,
            tab="members",
            title=f"Remove {name}",
            question=f"Remove {name} from {org.name}?",
            consequence="The assistant stops using the org memory in their conversations at once. "
            "Their personal memory stays theirs; facts they proposed stay with the organisation, without their name.",
            action=reverse("org-member-remove", args=[org.slug, target.id]),
            button=f"Remove {name}",
            back=reverse("org-members", args=[org.slug]),
        )
    try:
        orgs.remove_member(target)
    except orgs.OrgError as exc:
        return _render_members(
            request, org, membership, status=form_status(request, ok=False), errors={target.id: str(exc)}
        )
    if target.id == membership.id:
        messages.success(request, f"You left {org.name}.")
        return hx_redirect(request, reverse("org-list"))
    return _done(
        request,
        "org-members",
        org,
        f"Removed {target.user.username}. Their personal memory stays theirs.",
        lambda n: _render_members(request, org, membership, notice=n),
    )


@require_http_methods(["GET", "POST"])
@login_required
def leave(request, slug):
    org, membership = _org(request, slug)
    if request.method == "GET":
        return _confirm(
            request,
            org,
            membership,
            tab="members",
            title=f"Leave {org.name}",
            question=f"Leave {org.name}?",
            consequence=f"Your personal memory stays yours. The assistant stops using {org.name}'s org memory "
            "in your conversations at once. Facts you proposed stay with the organisation, without your name.",
            action=reverse("org-leave", args=[org.slug]),
            button=f"Leave {org.name}",
            back=reverse("org-members", args=[org.slug]),
        )
    try:
        orgs.remove_member(membership)
    except orgs.OrgError as exc:
        return _render_members(
            request, org, membership, status=form_status(request, ok=False), errors={membership.id: str(exc)}
        )
    messages.success(request, f"You left {org.name}. Your personal memory is unchanged.")
    return hx_redirect(request, reverse("org-list"))


# --- people the org's agents remember ----------------------------------------------------------


def _remembered(org, identity_id):
    identity = orgs.remembered_person(org, identity_id)
    if identity is None:
        raise Http404
    return identity


def _render_people(request, org, membership, status=200, **extra):
    context = {
        "org": org,
        "membership": membership,
        "tab": "people",
        "people": orgs.remembered(org),
        **_nav(org, membership),
        **extra,
    }
    return _page(request, "orgs/people.html", "people", context, status=status)


@require_GET
@login_required
@_admin
def remembered(request, org, membership):
    return _render_people(request, org, membership)


@require_POST
@login_required
@_admin
def remembered_portal(request, org, membership, identity_id):
    identity = _remembered(org, identity_id)
    try:
        url, expires_at = orgs.portal_link_for(identity, request.build_absolute_uri("/"), request.user)
    except orgs.OrgError as exc:
        return _render_people(
            request, org, membership, status=form_status(request, ok=False), errors={identity.id: str(exc)}
        )
    # Shown once, in this response only: never stored and never cached.
    link = {"identity": identity, "url": url, "expires_at": expires_at}
    response = _render_people(request, org, membership, new_link=link)
    add_never_cache_headers(response)
    return response


@require_http_methods(["GET", "POST"])
@login_required
@_admin
def remembered_erase(request, org, membership, identity_id):
    """A confirmation page (GET), then the erasure (POST with the typed id): works without JavaScript."""
    identity = _remembered(org, identity_id)
    error = None
    refused = orgs.erase_refusal(identity)  # shown instead of a form that could only fail
    if request.method == "POST" and not refused:
        if request.POST.get("confirm", "").strip() == identity.external_id:
            try:
                receipt = orgs.erase_remembered(identity)
            except orgs.OrgError as exc:
                error = str(exc)
            else:
                receipt_url = reverse("me:erased", args=[receipt.id])  # counts only, nothing personal; no sign-in
                messages.success(
                    request,
                    format_html(
                        'Erased {} and everything held about them. <a href="{}">Receipt {}</a>.',
                        identity.external_id,
                        receipt_url,
                        receipt.id,
                    ),
                )
                return hx_redirect(request, reverse("org-people", args=[org.slug]))
        else:
            error = f"Type {identity.external_id} exactly to confirm."
    context = {"org": org, "membership": membership, "tab": "people", "identity": identity, "error": error}
    status = 409 if refused and request.method == "POST" else 400 if error else 200
    return render(
        request, "orgs/people_erase.html", {**context, "refused": refused, **_nav(org, membership)}, status=status
    )


# --- API keys --------------------------------------------------------------------------------


def _render_keys(request, org, membership, status=200, **extra):
    context = {
        "org": org,
        "membership": membership,
        "tab": "keys",
        "keys": orgs.api_keys(org),
        "scopes": SCOPE_CHOICES,
        "chosen": default_scopes(),
        **_nav(org, membership),
        **extra,
    }
    return _page(request, "orgs/keys.html", "keys", context, status=status)


@require_GET
@login_required
@_admin
def keys(request, org, membership):
    return _render_keys(request, org, membership)


@require_POST
@login_required
@_admin
def key_create(request, org, membership):
    try:
        api_key, secret = orgs.create_key(org, request.POST.get("name", ""), request.POST.getlist("scopes"))
    except orgs.OrgError as exc:
        return _render_keys(
            request,
            org,
            membership,
            status=form_status(request, ok=False),
            key_error=str(exc),
            name=request.POST.get("name", ""),
            chosen=request.POST.getlist("scopes"),
        )
    # Shown once, in this response only: never stored (not even in the session) and never cached.
    response = _render_keys(request, org, membership, new_key={"name": api_key.name, "key": secret})
    add_never_cache_headers(response)
    return response


@require_http_methods(["GET", "POST"])
@login_required
@_admin
def key_revoke(request, org, membership, key_id):
    api_key = _api_key(org, key_id)
    if request.method == "GET":
        if api_key.revoked_at is not None:
            messages.info(request, f"“{api_key.name}” is already revoked.")
            return redirect("org-keys", slug=org.slug)
        return _confirm(
            request,
            org,
            membership,
            tab="keys",
            title=f"Revoke “{api_key.name}”",
            question=f"Revoke “{api_key.name}” ({api_key.prefix}…)?",
            consequence="Agents using it stop working at once (they get 401). This cannot be undone: "
            "make a new key for them if they still need one.",
            action=reverse("org-key-revoke", args=[org.slug, api_key.id]),
            button="Revoke key",
            back=reverse("org-keys", args=[org.slug]),
        )
    api_key = orgs.revoke_key(api_key)
    return _done(
        request,
        "org-keys",
        org,
        f"Revoked “{api_key.name}”. Agents using it now get 401.",
        lambda n: _render_keys(request, org, membership, notice=n),
    )


# --- deleting the organisation -----------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@login_required
@_admin
def delete(request, org, membership):
    error = None
    if request.method == "POST":
        if request.POST.get("confirm", "").strip() == org.slug:
            name = org.name
            orgs.delete_org(org)
            messages.success(request, f"{name} was deleted. Every member's personal memory is unchanged.")
            return hx_redirect(request, reverse("org-list"))
        error = f"Type {org.slug} exactly to confirm."
    context = {"org": org, "membership": membership, "tab": "delete", "error": error, **_nav(org, membership)}
    return render(request, "orgs/delete.html", context, status=400 if error else 200)


# --- joining through an invitation --------------------------------------------------------------


def _join_page(request, invitation, token, form=None, error=None, status=200):
    context = {"invitation": invitation, "token": token, "form": form or UserCreationForm(), "error": error}
    return render(request, "orgs/join.html", context, status=status)


@require_http_methods(["GET", "POST"])
@never_cache
def join(request, invite_token):
    """Open an invitation: a signed-in person accepts with their account; anyone else makes their own.

    GET only shows the invitation, so link previewers cannot use it up.
    """
    token = invite_token
    try:
        invitation = orgs.invitation_for(token)
    except orgs.OrgError as exc:
        return render(request, "orgs/join_invalid.html", {"message": str(exc)}, status=410)
    if request.method == "GET":
        return _join_page(request, invitation, token)
    allowed, retry_after = ratelimit.hit(f"join-ip:{request.META.get('REMOTE_ADDR', '')}", JOIN_RATE_PER_MINUTE)
    if not allowed:
        message = f"Too many attempts from here; try again in {retry_after} s."
        return _join_page(request, invitation, token, error=message, status=429)
    form = None
    try:
        if request.user.is_authenticated:
            orgs.accept_invitation(token, request.user)
        else:
            form = UserCreationForm(request.POST)
            if not form.is_valid():
                return _join_page(request, invitation, token, form=form, status=400)
            membership = orgs.join_with_new_account(
                token, form.cleaned_data["username"], form.cleaned_data["password1"]
            )
            login(request, membership.user, backend="django.contrib.auth.backends.ModelBackend")
    except orgs.OrgError as exc:
        return _join_page(request, invitation, token, form=form, error=str(exc), status=400)
    messages.success(request, f"You joined {invitation.org.name} as {invitation.role}.")
    return redirect("org-memory", slug=invitation.org.slug)

"""One way to answer a page request: the whole page, or only a named partial for htmx."""

from django.core.exceptions import BadRequest
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django_htmx.http import HttpResponseClientRedirect

from memoryapp import paging


def page_or_partial(request, template, partial=None, context=None, status=200):
    """Render `template`, or just its `partial` (django-template-partials) when htmx asked for it."""
    # Back or Forward to a page htmx no longer holds asks the server with HX-Request set: that swaps the
    # answer in for the whole page, so it gets the whole page, not the list it asked for the first time.
    wants_partial = request.htmx and not request.htmx.history_restore_request
    name = f"{template}#{partial}" if partial and wants_partial else template
    response = render(request, name, context or {}, status=status)
    # One URL, two answers (page or partial): a cache must key on the header that chooses between them.
    patch_vary_headers(response, ["HX-Request"])
    return response


def hx_redirect(request, url):
    """A redirect that also works for htmx (which would otherwise follow it and swap the whole page into a partial)."""
    if request.htmx:
        return HttpResponseClientRedirect(url)
    return redirect(url)


def keyset(request, rows, order, limit):
    """One page of `rows` after the ?after= cursor, with the cursors of the pages on either side: a queryset in
    `order` (paging.keyset_page), or a sorted list with `order` its key function (paging.keyset_rows). A cursor
    we never handed out is a 400."""
    cursor = request.GET.get("after") or None
    try:
        if callable(order):
            return paging.keyset_rows(rows, order, cursor, limit)
        return paging.keyset_page(rows, order, cursor, limit, previous=True)
    except paging.BadCursor as exc:
        raise BadRequest("That page address is not one this site made. Start again from the first page.") from exc


def form_status(request, ok):
    """The status for a form answer: 400 on a whole page with errors; htmx swaps only 2xx, so 200."""
    return 200 if ok or request.htmx else 400


def bad_request(request, exception):
    """The 400 page, with what was wrong in words (a BadRequest's message is written for people here)."""
    message = str(exception) if isinstance(exception, BadRequest) else ""  # never a SuspiciousOperation's
    return render(request, "400.html", {"exception": message}, status=400)

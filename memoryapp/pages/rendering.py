"""One way to answer a page request: the whole page, or only a named partial for htmx."""

from django.shortcuts import render


def page_or_partial(request, template, partial=None, context=None, status=200):
    """Render `template`, or just its `partial` (django-template-partials) when htmx asked for it."""
    name = f"{template}#{partial}" if partial and request.htmx else template
    return render(request, name, context or {}, status=status)


def form_status(request, ok):
    """The status for a form answer: 400 on a whole page with errors; htmx swaps only 2xx, so 200."""
    return 200 if ok or request.htmx else 400

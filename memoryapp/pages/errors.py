"""The pages' answers to errors: the styled 503 when the database is unavailable, and a stale form's 403."""

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpResponse
from django.shortcuts import render
from django.template import loader
from django.views import defaults

RETRY_AFTER_SECONDS = 5


def server_error(request):
    """handler500: a database outage gets 503 with Retry-After (it passes); anything else Django's 500 page."""
    exc = sys.exc_info()[1]  # Django calls handler500 while handling the exception
    if isinstance(exc, OperationalError | InterfaceError):
        # Rendered without the request: its context processors would reach for the database again.
        response = HttpResponse(loader.render_to_string("503.html"), status=503)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    return defaults.server_error(request)


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW: a form from before a sign-in or sign-out elsewhere, said in words, not Django's debug text."""
    return render(request, "403_csrf.html", status=403)

"""Content-Security-Policy (our own scripts and styles only), the confinement of portal sessions,
the server's own time per request, and the page for an action's address opened as a page."""

import time

from django.contrib import messages
from django.contrib.auth import logout
from django.shortcuts import render

from memoryapp import people
from memoryapp.api.errors import error_json

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'; object-src 'none'"
)
# Swagger UI (served from our own static files, no CDN) sets inline styles on the elements it
# draws and shows its logo as a data: image; its scripts are still our own files only.
DOCS_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'; object-src 'none'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = DOCS_CSP if request.path.startswith("/api/docs") else CSP
        response.headers.setdefault("Content-Security-Policy", policy)
        return response


# What a memory-only session may reach: the person's own pages, signing out (or in as someone
# else), the probes and static files. The agent API never reads the cookie anyway.
PORTAL_PATHS = ("/me/", "/logout/", "/login/", "/static/", "/healthz", "/readyz", "/api/")


class PortalSessionMiddleware:
    """Confine sessions opened by a portal link to /me/, and end them after the idle limit."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if people.is_portal_session(request):
            if people.portal_session_idle(request):
                logout(request)
                messages.info(request, "You were signed out after a while without activity.")
            else:
                people.touch_portal_session(request)
                if request.path != "/" and not request.path.startswith(PORTAL_PATHS):
                    return render(request, "auth/portal_only.html", status=403)
        return self.get_response(request)


# Errors Django answers before (or around) the agent API, said in the API's own words.
API_ERRORS = {
    400: ("bad_request", "The request was refused before it reached the API (for example, an unknown Host header)."),
    403: ("forbidden", "This request is not allowed."),
    404: ("not_found", "No such API route: the routes are listed at /api/docs."),
    405: ("method_not_allowed", "This route does not accept that HTTP method."),
    413: ("too_large", "The request body is too large."),
    500: ("internal_error", "Something went wrong on our side; nothing was stored."),
    503: ("unavailable", "The database is unavailable; nothing from this request was stored. Retry shortly."),
}


class ApiJsonErrorsMiddleware:
    """Every error response under /api/ is JSON {"error": ...}, including Django's own 400/404/405."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            request.path_info.startswith("/api/")
            and response.status_code >= 400
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            code, message = API_ERRORS.get(response.status_code, ("error", "The request failed."))
            replacement = error_json(response.status_code, code, message)
            for header in ("Allow", "Retry-After"):
                if header in response:
                    replacement[header] = response[header]
            return replacement
        return response


class ServerTimingMiddleware:
    """`Server-Timing: app;dur=<ms>` on every response: the time Django spent on the request."""

    # Why a response header: uvicorn's access log has no duration (gunicorn's had %(D)s). The header
    # needs no log to switch on or parse, browsers' developer tools show it, and any client can tell
    # the server's own time from the queueing it saw (bench_pages reads it). Outermost middleware, so
    # it covers every other middleware and the view; not uvicorn's HTTP parsing or the wait for a
    # thread, which the client's own clock includes.
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"
        return response


class ActionPageMiddleware:
    """A 405 on a page says why in words, not an empty body: an action's address opened as a page (a bookmark,
    a sign-in's ?next=), or a form sent to a page that takes none."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code == 405
            and request.method != "HEAD"
            and not request.path_info.startswith("/api/")
            and not response.content
        ):
            page = render(request, "405.html", status=405)
            page["Allow"] = response.get("Allow", "")
            return page
        return response

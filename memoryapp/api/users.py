"""Agent API routes about one end user: portal links, export, erasure."""

import uuid
from datetime import datetime

from django.http import HttpRequest
from ninja import Router, Schema, Status

from memoryapp import erasure, export, portal, sessions
from memoryapp.api.auth import requires
from memoryapp.api.errors import ApiError, ErrorOut

router = Router(tags=["users"])


def _errors():
    """Error responses for the OpenAPI spec."""
    return {401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut, 422: ErrorOut, 429: ErrorOut, 503: ErrorOut}


# --- portal links (account pages) -------------------------------------------------


class PortalOut(Schema):
    url: str
    expires_at: datetime


@router.post("/{user}/portal", response={200: PortalOut, **_errors()})
@requires("portal")
def portal_link(request: HttpRequest, user: str):
    """A one-time sign-in link to the user's "My memory" pages, valid for a few minutes."""

    person = _person(request, user)
    try:
        made_by = f"API key '{request.api_key.name}'"
        url, expires_at = portal.issue_link(person, request.build_absolute_uri("/"), org=request.org, made_by=made_by)
    except portal.NotAllowed as exc:
        # 409: the person exists, but is not one an API key may sign in (see memoryapp.people).
        raise ApiError(409, "conflict", str(exc)) from None
    return Status(200, {"url": url, "expires_at": expires_at})


# --- export and erasure (privacy) ---------------------------------------------------


class ReceiptOut(Schema):
    receipt: uuid.UUID
    created_at: datetime
    requested_via: str
    subject_ref: str
    counts: dict[str, int]
    identities: list[str] = []  # the organisations whose assistants knew the person by an id of theirs


def _person(request, external_id):
    """The person the key's organisation calls `external_id`; 404 for anyone else."""

    person = sessions.find_user(request.org, external_id)
    if person is None:
        raise ApiError(404, "not_found", "No such user for this API key.")
    return person


@router.get("/{user}/export", response={200: dict, **_errors()})
@requires("read")
def export_user(request: HttpRequest, user: str):
    """What this organisation remembers of the user, as one JSON document described by `schema_version`.

    Their facts with history, and the sessions (kept turns), extraction runs and recall logs of this
    organisation's sessions. No account data (username, e-mail, other organisations) and no support
    access log: those are in the person's own export on their memory pages.
    """

    return Status(200, export.export_user(_person(request, user), for_org=request.org))


@router.delete("/{user}", response={202: ReceiptOut, **_errors()})
@requires("erase")
def erase_user(request: HttpRequest, user: str):
    """Erase the user and everything held about them; the receipt holds no personal data."""

    person = _person(request, user)
    try:
        receipt = erasure.erase_member(request.org, person, requested_via="api")
    except erasure.ErasureRefused as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return Status(202, erasure.receipt_json(receipt))

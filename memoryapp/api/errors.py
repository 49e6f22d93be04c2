"""The API's one error shape: {"error": {"code", "message", "field"}} with a 4xx (or 503) status."""

from django.http import JsonResponse
from ninja import Schema


class ApiError(Exception):
    def __init__(self, status, code, message, field=None, headers=None):
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field
        self.headers = headers or {}


class ErrorBody(Schema):
    code: str
    message: str
    field: str | None = None


class ErrorOut(Schema):
    error: ErrorBody


ERRORS = {
    **dict.fromkeys((400, 401, 403, 404, 409, 413, 422, 429), ErrorOut),
    503: ErrorOut,  # the database is unavailable: nothing was stored, retry
}


def error_json(status, code, message, field=None):
    """The error shape as a plain Django response, for errors raised before the API itself runs."""
    return JsonResponse({"error": {"code": code, "message": message, "field": field}}, status=status)

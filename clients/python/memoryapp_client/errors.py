"""The one exception the client raises for an API error."""


class MemoryappError(Exception):
    """An error answer from memoryapp (or no answer at all: status 0, code `unreachable`)."""

    def __init__(self, status, code, message, field=None, retry_after=None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after

    @classmethod
    def from_response(cls, response):
        """The error carried by a non-2xx httpx response (the API's {"error": {...}} shape, or its status)."""
        try:
            body = response.json()["error"]
            code, message, field = body["code"], body["message"], body.get("field")
        except (ValueError, KeyError, TypeError):
            code, message, field = "http_error", response.reason_phrase or "unexpected answer", None
        return cls(response.status_code, code, message, field, retry_after=_retry_after(response))


def _retry_after(response):
    value = response.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None

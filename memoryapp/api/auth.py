"""Bearer API keys: each key acts for one organisation, within its rate limit."""

from django.conf import settings
from ninja.security import HttpBearer

from memoryapp import ratelimit, sessions
from memoryapp.api.errors import ApiError


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request, token):
        api_key = sessions.authenticate_key(token)
        if api_key is not None:
            allowed, retry_after = ratelimit.hit(f"api-key:{api_key.id}", settings.MEMORY["API_RATE_PER_MINUTE"])
            if not allowed:
                raise ApiError(
                    429,
                    "rate_limited",
                    f"Too many requests for this API key; retry in {retry_after} s.",
                    headers={"Retry-After": str(retry_after)},
                )
            request.api_key = api_key
            request.org = api_key.org
        return api_key

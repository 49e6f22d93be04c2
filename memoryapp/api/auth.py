"""Bearer API keys: each key acts for one organisation, within its rate limit and its scopes."""

import functools

from ninja.security import HttpBearer

from memoryapp import ratelimit, sessions
from memoryapp.api.errors import ApiError


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request, token):
        api_key = sessions.authenticate_key(token)
        if api_key is not None:
            allowed, retry_after = ratelimit.hit_key(api_key)
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


def requires(scope):
    """Refuse (403 `forbidden`) a key without `scope`; the route's OpenAPI description says which it needs."""

    def decorate(view):
        @functools.wraps(view)
        def checked(request, *args, **kwargs):
            if not request.api_key.allows(scope):
                raise ApiError(
                    403,
                    "forbidden",
                    f"This API key does not have the '{scope}' scope. An admin of the organisation "
                    f"can create a key with it on the API keys page.",
                )
            return view(request, *args, **kwargs)

        checked.__doc__ = f"{(view.__doc__ or '').strip()}\n\nNeeds an API key with the `{scope}` scope."
        return checked

    return decorate

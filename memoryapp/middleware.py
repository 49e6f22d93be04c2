"""Content-Security-Policy: our own scripts and styles only, no inline scripts."""

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'; object-src 'none'"
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.path.startswith("/api/docs"):
            return response  # ninja's Swagger UI loads its own assets
        response.headers.setdefault("Content-Security-Policy", CSP)
        return response

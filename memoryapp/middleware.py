"""Content-Security-Policy: our own scripts and styles only, no inline scripts."""

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

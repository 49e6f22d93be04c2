"""A trivial view: the ceiling that page benchmarks compare against, and a liveness probe."""

from django.http import HttpResponse
from django.views.decorators.http import require_GET


@require_GET
def healthz(request):
    return HttpResponse("ok", content_type="text/plain")

"""Probes: /healthz (liveness: the process answers; also the ceiling page benchmarks compare against)
and /readyz (readiness: the database and the Celery broker are reachable)."""

from django.http import HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from memoryapp import readiness


@require_GET
def healthz(request):
    return HttpResponse("ok", content_type="text/plain")


@require_GET
def readyz(request):
    down = readiness.unavailable()
    if down:
        response = JsonResponse({"status": "unavailable", "down": down}, status=503)
        response["Retry-After"] = "5"
        return response
    return JsonResponse({"status": "ready", "down": []})

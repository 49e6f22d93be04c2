"""A stalled model provider: how long a person's correction and erasure wait while a verdict call hangs.

A fake Anthropic Messages endpoint on loopback answers extraction at once and holds every verdict
call for `stall` seconds. Two people's extractions run in threads through the real SDK; once both
verdict calls are in flight, one person corrects the fact being judged on /me/ and an agent erases
the other through the API (Django's test client, so the views and their transactions are included).
"""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.db import connection
from django.test import Client, override_settings

from memoryapp import backends, erasure, extraction, sessions, writing
from memoryapp.backends.base import VERDICT_SYSTEM
from memoryapp.models import ExternalIdentity, ExtractionRun, MemoryFact, Organization, all_scopes

BENCH_ORG = "bench-stall"
OLD = "The user's code editor is Vim."
NEW = "The user's code editor is Emacs."
CORRECTED = "The user's code editor is Helix."


class StalledModel(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, stall):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.stall = stall
        self.verdicts_started = threading.Semaphore(0)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        if body["system"][0]["text"] == VERDICT_SYSTEM:
            self.server.verdicts_started.release()
            time.sleep(self.server.stall)
            listing = body["messages"][0]["content"].split("EXISTING facts:\n", 1)[1]
            answer = {"verdicts": ["CONTRADICTS"] * len(listing.strip().splitlines())}
        else:
            answer = {"facts": [{"text": NEW, "kind": "profile"}]}
        reply = {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5-20251001",
            "content": [{"type": "text", "text": json.dumps(answer)}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 40, "output_tokens": 10},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def _ended_session(org, external_id, said):
    person = sessions.get_or_create_user(org, external_id)
    session = sessions.open_session(org, person)
    sessions.add_turns(session, [("user", said)])
    sessions.end_session(session)
    return person, session


def _extract_in_thread(session, outcome, key):
    def work():
        try:
            outcome[key] = extraction.extract_session(session.id)
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def run_round(org, api_key, server, n):
    """One measurement: two people's extractions stalled in their verdict calls; one person corrects
    the fact being judged on /me/, the other is erased through the API."""
    judge = backends.ScriptedBackend().verdicts
    corrector = sessions.get_or_create_user(org, f"stall-{n}-a")
    old = writing.store(corrector, OLD, "profile", judge=judge).fact
    _, session_a = _ended_session(org, f"stall-{n}-a", "I moved to Emacs.")
    erased_person = sessions.get_or_create_user(org, f"stall-{n}-b")
    writing.store(erased_person, OLD, "profile", judge=judge)
    _, session_b = _ended_session(org, f"stall-{n}-b", "I moved to Emacs.")
    outcome = {}
    started = time.monotonic()
    workers = [_extract_in_thread(session_a, outcome, "a"), _extract_in_thread(session_b, outcome, "b")]
    for _ in workers:
        if not server.verdicts_started.acquire(timeout=60):
            raise RuntimeError("an extraction never reached its verdict call")

    # The correction and the erasure start together, each in its own thread, so neither's wait hides the other's.
    timings = {}

    def correct():
        try:
            page = Client()
            page.force_login(corrector)
            t = time.monotonic()
            timings["corrected"] = page.post(f"/me/facts/{old.id}/correct/", {"text": CORRECTED, "kind": "profile"})
            timings["correction_s"] = time.monotonic() - t
        finally:
            connection.close()

    def erase():
        try:
            api = Client(headers={"Authorization": f"Bearer {api_key}"})
            t = time.monotonic()
            timings["erased"] = api.delete(f"/api/v1/users/stall-{n}-b")
            timings["erasure_s"] = time.monotonic() - t
        finally:
            connection.close()

    people = [threading.Thread(target=correct), threading.Thread(target=erase)]
    for person in people:
        person.start()
    for person in people:
        person.join(3 * server.stall + 60)
    correction_s, erasure_s = timings["correction_s"], timings["erasure_s"]
    corrected, erased = timings["corrected"], timings["erased"]

    for worker in workers:
        worker.join(3 * server.stall + 60)
    while server.verdicts_started.acquire(blocking=False):
        pass  # the re-judging call of the corrected fact
    run = outcome.get("a")
    kept = MemoryFact.objects.filter(text=CORRECTED, user=corrector, superseded_at__isnull=True).exists()
    return {
        "correction_seconds": round(correction_s, 3),
        "correction_status": corrected.status_code,
        "correction_kept": kept,
        "erasure_seconds": round(erasure_s, 3),
        "erasure_status": erased.status_code,
        "erased_extraction_wrote_nothing": outcome.get("b") is None
        and not MemoryFact.objects.filter(user_id=erased_person.id).exists(),
        "extraction_seconds": round(time.monotonic() - started, 3),
        "extraction_status": run.status if isinstance(run, ExtractionRun) else None,
        "verdict_calls": run.verdict_calls if isinstance(run, ExtractionRun) else None,
    }


def measure(stall, rounds):
    """Run `rounds` rounds against a provider that holds each verdict call `stall` seconds."""
    server = StalledModel(stall)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    saved = os.environ.get("ANTHROPIC_BASE_URL")
    os.environ["ANTHROPIC_BASE_URL"] = server.url
    org = Organization.objects.create(slug=BENCH_ORG, name="Stall benchmark")
    try:
        _, api_key = sessions.create_api_key(org, "bench", all_scopes())  # it erases: every scope
        with override_settings(
            EXTRACTION_BACKEND="anthropic",
            ANTHROPIC_API_KEY="sk-bench",
            ANTHROPIC_MAX_RETRIES=0,
            ANTHROPIC_TIMEOUT=stall + 30,
        ):
            return [run_round(org, api_key, server, n) for n in range(rounds)]
    finally:
        cleanup(org)
        server.shutdown()
        server.server_close()
        if saved is None:
            os.environ.pop("ANTHROPIC_BASE_URL", None)
        else:
            os.environ["ANTHROPIC_BASE_URL"] = saved


def cleanup(org):
    """Erase every person the benchmark created, then its organisation."""

    for ident in ExternalIdentity.objects.filter(org=org).select_related("user"):
        erasure.erase_user(ident.user, requested_via="command")
    Organization.objects.filter(id=org.id).delete()

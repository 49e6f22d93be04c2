"""Benchmark erasure beside many stored sign-in sessions: seed N other people's django_session rows and
one person with sign-ins, facts and conversations, erase the person, report the time.
`manage.py bench_erase --sessions 100000 --json out.json`."""

import json
import time
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.core.management.base import BaseCommand

from bench import common as benchmarks
from memoryapp import clock, erasure, sessions, writing
from memoryapp.models import Organization, SignIn

BENCH_ORG = "bench-erase"
PREFIX = "bench-erase-"


class Command(BaseCommand):
    help = "Erase one person beside N stored sign-in sessions of others; report how long erasure takes."

    def add_arguments(self, parser):
        parser.add_argument("--sessions", type=int, default=100_000)
        parser.add_argument("--smoke", action="store_true", help="2,000 stored sessions")
        parser.add_argument("--json", dest="json_file", metavar="FILE")

    def handle(self, *args, sessions, smoke, json_file, **options):
        benchmarks.migrate_first(self.stderr)
        n = 2_000 if smoke else sessions
        self._clean()
        started = time.monotonic()
        person = self._seed(n)
        self.stdout.write(f"Seeded {n:,} other sessions in {time.monotonic() - started:.1f} s; erasing one person:")

        started = time.monotonic()
        receipt = erasure.erase_user(person, "command")
        erase_s = time.monotonic() - started
        # What erasure cost before sign-ins were recorded: decoding every stored session to find the person's.
        started = time.monotonic()
        store = SessionStore()
        for data in Session.objects.filter(session_key__startswith=PREFIX).values_list("session_data", flat=True):
            store.decode(data)
        decode_all_s = time.monotonic() - started

        result = {
            "stored_sessions": n,
            "erase_seconds": round(erase_s, 3),
            "decode_every_session_seconds": round(decode_all_s, 3),
            "login_sessions_ended": receipt.counts.get("login_sessions", 0),
            "others_left": Session.objects.filter(session_key__startswith=PREFIX + "other-").count(),
            "machine": benchmarks.machine(),
        }
        columns = ("stored_sessions", "erase_seconds", "decode_every_session_seconds", "login_sessions_ended")
        self.stdout.write(benchmarks.table(columns, [[result[c] for c in columns]]))
        if json_file:
            with open(json_file, "w") as fh:
                json.dump(result, fh, indent=2)
        self._clean()

    def _clean(self):
        Session.objects.filter(session_key__startswith=PREFIX).delete()
        get_user_model().objects.filter(username__startswith=PREFIX).delete()
        Organization.objects.filter(slug=BENCH_ORG).delete()

    def _seed(self, n):
        """N sessions of other signed-in people, and one person with 3 sign-ins, facts and a conversation."""
        User = get_user_model()
        store = SessionStore()
        expires = clock.now() + timedelta(days=14)
        others = User.objects.bulk_create(User(username=f"{PREFIX}{i}") for i in range(max(1, n // 100)))
        chunk = []
        for i in range(n):
            data = store.encode({"_auth_user_id": str(others[i % len(others)].pk)})
            chunk.append(Session(session_key=f"{PREFIX}other-{i}", session_data=data, expire_date=expires))
            if len(chunk) == 5_000:
                Session.objects.bulk_create(chunk)
                chunk = []
        Session.objects.bulk_create(chunk)

        org = Organization.objects.create(slug=BENCH_ORG, name="Bench erase")
        person = User.objects.create(username=f"{PREFIX}person")
        for k in range(3):
            key = f"{PREFIX}person-{k}"
            data = store.encode({"_auth_user_id": str(person.pk)})
            Session.objects.create(session_key=key, session_data=data, expire_date=expires)
            SignIn.objects.create(user=person, session_key=key)
        for text in ("The user prefers tea.", "The user lives in Porto.", "The user's editor is Neovim."):
            writing.store(person, text, "preference")
        sessions.open_session(org, person)
        return person

"""Benchmark the forgetting job: seed N synthetic facts, run `manage.py forget` in a child process,
report its time and peak memory (RSS). `manage.py bench_forget --facts 100000 --json out.json`."""

import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from bench import common as benchmarks
from memoryapp import clock, db
from memoryapp.forgetting import NEVER_RECALLED
from memoryapp.models import AgentSession, MemoryFact, Organization, RecallLog

BENCH_ORG = "bench-forget"
FACTS_PER_USER = 200
DIM = 384


class Command(BaseCommand):
    help = "Seed synthetic facts of every kind and age, run `forget` on them, report time and peak memory."

    def add_arguments(self, parser):
        parser.add_argument("--facts", type=int, default=100_000)
        parser.add_argument("--smoke", action="store_true", help="2,000 facts")
        parser.add_argument("--mode", choices=["log", "enforce"], default="enforce")
        parser.add_argument("--batch", type=int, default=None)
        parser.add_argument("--keep", action="store_true", help="leave the synthetic facts in place afterwards")
        parser.add_argument("--json", dest="json_file", metavar="FILE")

    def handle(self, *args, facts, smoke, mode, batch, keep, json_file, **options):
        benchmarks.migrate_first(self.stderr)
        n = 2_000 if smoke else facts
        if MemoryFact.objects.exclude(org__slug=BENCH_ORG).exclude(user__username__startswith="bench-forget-").exists():
            raise CommandError(
                "This database holds real facts, and the forgetting job runs over all of them. "
                "Point DATABASE_URL at an empty database for this benchmark."
            )
        self._clean()
        started = time.monotonic()
        self._seed(n)
        seed_s = time.monotonic() - started
        self.stdout.write(f"Seeded {n:,} facts in {seed_s:.1f} s; running `manage.py forget --mode {mode}`:")

        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = [sys.executable, str(settings.BASE_DIR / "manage.py"), "forget", "--mode", mode, "--json", out.name]
            if batch:
                cmd += ["--batch", str(batch)]
            started = time.monotonic()
            subprocess.run(cmd, check=True, env={**os.environ, "DATABASE_URL": db.connection_url(connection)})
            wall = time.monotonic() - started
            child = json.loads(Path(out.name).read_text())
        peak_children_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        result = {
            "facts": n,
            "mode": mode,
            "batch": batch or settings.MEMORY["FORGETTING_BATCH"],
            "examined": child["examined"],
            "matched": child["matched"],
            "removed": child["removed"],
            "by_rule": child["by_rule"],
            "seconds": round(wall, 2),
            "facts_per_second": round(child["examined"] / child["seconds"]) if child["seconds"] else None,
            "peak_rss_mb": round(peak_children_mb, 1),
        }
        columns = ("facts", "examined", "matched", "removed", "seconds", "facts_per_second", "peak_rss_mb")
        row = {**result, "facts_per_second": result["facts_per_second"] or 0}
        self.stdout.write("\n" + " ".join(f"{c:>16}" for c in columns))
        self.stdout.write(" ".join(f"{row[c]:>16,}" for c in columns))
        if json_file:
            with open(json_file, "w") as fh:
                json.dump(result, fh, indent=2)
        if not keep:
            self._clean()

    def _clean(self):
        get_user_model().objects.filter(username__startswith="bench-forget-").delete()
        Organization.objects.filter(slug=BENCH_ORG).delete()

    @staticmethod
    def _store(facts, recalls, users, sessions):
        MemoryFact.objects.bulk_create(facts)
        RecallLog.objects.bulk_create(
            RecallLog(user=users[u], session=sessions[u], fact=f, tier="relevant", created_at=when)
            for f, u, when in recalls
        )

    def _seed(self, n):
        """Facts spread over 0..200 days of age: every kind, some recalled, some confirmed lately."""
        rng = random.Random(7)
        now = clock.now()
        User = get_user_model()
        org = Organization.objects.create(slug=BENCH_ORG, name="Bench forget")
        users = User.objects.bulk_create(User(username=f"bench-forget-{i}") for i in range(max(1, n // FACTS_PER_USER)))
        vector = [0.0] * (DIM - 1) + [1.0]
        kinds = ["preference", "constraint", "profile", "goal"]
        # A fact's last recall is its newest recall log row (one session per user holds them).
        sessions = AgentSession.objects.bulk_create(AgentSession(user=u) for u in users)
        chunk, recalls = [], []
        for i in range(n):
            created = now - timedelta(days=rng.uniform(0, 200))
            confirmed = created + (now - created) * rng.random() * rng.choice([0, 1])
            recalled = created + (now - created) * rng.random() if rng.random() < 0.5 else None
            org_fact = i % 50 == 0
            # One in ten expired a month or two ago and never restored: the purge has work too.
            expired = now - timedelta(days=rng.uniform(31, 60)) if rng.random() < 0.1 else None
            if expired is not None:
                created = min(created, expired - timedelta(days=61))
                confirmed = min(confirmed, created)
            chunk.append(
                MemoryFact(
                    user=None if org_fact else users[i % len(users)],
                    org=org if org_fact else None,
                    scope="org" if org_fact else "personal",
                    text=f"Synthetic fact number {i} for the forgetting benchmark.",
                    kind=kinds[i % 4],
                    embedding=vector,
                    embedding_model="bench",
                    created_at=created,
                    last_confirmed_at=confirmed,
                    expired_at=expired,
                    expired_rule=NEVER_RECALLED if expired else "",
                )
            )
            if recalled is not None and expired is None:
                recalls.append((chunk[-1], i % len(users), recalled))
            if len(chunk) == 5000:
                self._store(chunk, recalls, users, sessions)
                chunk, recalls = [], []
        self._store(chunk, recalls, users, sessions)

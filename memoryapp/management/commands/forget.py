"""Run the forgetting job by hand: `manage.py forget [--mode log|enforce] [--batch N] [--json FILE]`."""

import json
import resource
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memoryapp import forgetting


class Command(BaseCommand):
    help = "Expire stale and never-recalled facts (log mode records only) and purge those past the grace period."

    def add_arguments(self, parser):
        parser.add_argument("--mode", choices=forgetting.MODES, help="default: MEMORY['FORGETTING_MODE']")
        parser.add_argument("--batch", type=int, help="facts per batch (default: MEMORY['FORGETTING_BATCH'])")
        parser.add_argument("--json", dest="json_file", metavar="FILE", help="also write the run's numbers to FILE")

    def handle(self, *args, mode=None, batch=None, json_file=None, **options):
        if batch is not None and batch < 1:
            raise CommandError("--batch must be at least 1")
        mode = mode or settings.MEMORY["FORGETTING_MODE"]
        started = time.monotonic()
        self._last_pct = -1

        def progress(examined, total, matched):
            pct = int(100 * examined / total) if total else 100
            if pct != self._last_pct:  # one line per percent, however many batches
                self._last_pct = pct
                self.stdout.write(f"  {examined:>9,}/{total:,} facts examined ({pct:3d}%), {matched:,} matched")

        self.stdout.write(f"Forgetting run, mode {mode}.")
        run = forgetting.run_forgetting(mode=mode, batch=batch, progress=progress)
        if run is None:
            self.stdout.write(self.style.WARNING("Another forgetting run is in progress; this one did nothing."))
            return
        seconds = time.monotonic() - started
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
        verb = "expired" if mode == "enforce" else "would have expired (log mode: nothing changed)"
        by_rule = {r: run.entries.filter(rule=r).count() for r in forgetting.RULE_LABELS}
        self.stdout.write(
            self.style.SUCCESS(
                f"Run {run.id}: examined {run.examined:,} facts, {run.matched:,} {verb}; "
                f"{run.removed:,} removed after the grace period."
            )
        )
        for rule, n in by_rule.items():
            self.stdout.write(f"  {rule}: {n:,}")
        self.stdout.write(f"  {seconds:.1f} s, peak memory {peak_mb:.0f} MB")
        if json_file:
            numbers = {
                "run": run.id,
                "mode": mode,
                "examined": run.examined,
                "matched": run.matched,
                "removed": run.removed,
                "by_rule": by_rule,
                "seconds": round(seconds, 2),
                "peak_rss_mb": round(peak_mb, 1),
            }
            with open(json_file, "w") as fh:
                json.dump(numbers, fh, indent=2)

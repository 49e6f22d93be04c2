"""How long a person waits while the model provider stalls: `manage.py bench_stall --stall 8 --json out.json`."""

import subprocess

from django.core.management.base import BaseCommand, CommandError

from bench import common
from bench import stall as stall_bench
from memoryapp.models import Organization


class Command(BaseCommand):
    help = (
        "Hold every verdict call of a fake Anthropic endpoint (real SDK) for --stall seconds and time a "
        "correction on /me/ and an erasure through the API made while it is in flight."
    )

    def add_arguments(self, parser):
        parser.add_argument("--stall", type=float, default=8.0, help="seconds each verdict call hangs")
        parser.add_argument("--rounds", type=int, default=3)
        parser.add_argument("--json", dest="json_file", metavar="FILE")

    def handle(self, *args, stall, rounds, json_file, **options):
        common.migrate_first(self.stderr)
        if Organization.objects.filter(slug=stall_bench.BENCH_ORG).exists():
            raise CommandError(f"an organisation '{stall_bench.BENCH_ORG}' exists already; remove it first")
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        rows = stall_bench.measure(stall, rounds)
        summary = {
            key: common.percentiles((r[key] for r in rows), points=(50, 95))
            for key in ("correction_seconds", "erasure_seconds", "extraction_seconds")
        }
        self.stdout.write(f"verdict call held {stall:g} s, {rounds} rounds; uptime: {uptime}\n")
        self.stdout.write(
            common.table(
                ["round", "correction s", "kept", "erasure s", "erased: nothing", "extraction s", "run", "verdicts"],
                [
                    [
                        n,
                        r["correction_seconds"],
                        r["correction_kept"],
                        r["erasure_seconds"],
                        r["erased_extraction_wrote_nothing"],
                        r["extraction_seconds"],
                        r["extraction_status"],
                        r["verdict_calls"],
                    ]
                    for n, r in enumerate(rows)
                ],
            )
        )
        for key, p in summary.items():
            self.stdout.write(f"\n{key}: median {p['p50']:.3f}  p95 {p['p95']:.3f}")
        self.stdout.write("\n")
        common.write_json(json_file, {"stall_seconds": stall, "uptime": uptime, "rounds": rows, "summary": summary})

import random
import time
import uuid

import redis
from django.core.management.base import BaseCommand, CommandError

from bench import common as benchmarks
from bench import write as wb
from memoryapp import embeddings


class Command(BaseCommand):
    help = "Write path: sessions through a real Celery worker on Redis, and store_fact's per-fact cost."

    def add_arguments(self, parser):
        parser.add_argument("--broker", default="redis://127.0.0.1:6379/0", help="Redis broker URL for the workers")
        parser.add_argument("--workers", type=int, default=1, help="worker processes (solo pool each)")
        parser.add_argument("--users", type=int, default=50)
        parser.add_argument("--sessions", type=int, default=400, help="sessions ended back to back (throughput)")
        parser.add_argument("--latency-sessions", type=int, default=100, help="sessions ended one at a time")
        parser.add_argument("--facts", type=int, default=1000, help="store_fact calls timed in this process")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", dest="json_path", help="write the results here")
        parser.add_argument("--smoke", action="store_true", help="a few sessions, finishes in seconds")

    def handle(self, *args, **o):
        benchmarks.migrate_first(self.stderr)
        if o["smoke"]:
            o.update(users=3, sessions=6, latency_sessions=3, facts=20)

        try:
            redis.Redis.from_url(o["broker"], socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            raise CommandError(f"bench_write needs Redis at {o['broker']} ({exc}); start it or pass --broker") from exc

        rng = random.Random(o["seed"])
        err = self.stderr
        embeddings.embed("warm up")  # load the model before anything is timed
        queue = f"bench-write-{uuid.uuid4().hex[:8]}"
        bench = wb.make_org("bench-write", o["users"])
        results = {"benchmark": "bench_write", "smoke": o["smoke"], "workers": o["workers"], "queue": queue}
        try:
            with wb.publishing_to(o["broker"], queue), wb.celery_workers(o["workers"], o["broker"], queue):
                err.write(f"{o['workers']} worker(s) up on {queue}; warming up…")
                wb.run_latency(bench, 1, rng)  # first task loads the worker's embedding model
                lat, lat_ids = wb.run_latency(
                    bench, o["latency_sessions"], rng, benchmarks.Progress("one at a time", o["latency_sessions"], err)
                )
                elapsed, burst_lat, burst_ids = wb.run_burst(
                    bench, o["sessions"], rng, benchmarks.Progress("preparing burst", o["sessions"], err)
                )
            counts = wb.outcome_counts(burst_ids)
            results["latency_one_at_a_time"] = {"n": len(lat), **benchmarks.percentiles(lat)}
            results["burst"] = {
                "sessions": o["sessions"],
                "seconds": round(elapsed, 3),
                "sessions_per_second": benchmarks.rate(o["sessions"], elapsed),
                "sessions_per_second_per_worker": benchmarks.rate(o["sessions"], elapsed * o["workers"]),
                "facts_per_second": benchmarks.rate(counts["facts_created"], elapsed),
                "facts_per_second_per_worker": benchmarks.rate(counts["facts_created"], elapsed * o["workers"]),
                "end_to_visible_including_queue": benchmarks.percentiles(burst_lat),
                **counts,
            }

            err.write("timing store_fact in this process…")
            t = time.monotonic()
            rows = wb.run_store_fact(bench, o["facts"], rng, benchmarks.Progress("store_fact", o["facts"], err))
            results["store_fact"] = wb.summarise_store_fact(rows)
            results["store_fact"]["wall_seconds"] = round(time.monotonic() - t, 2)
            results["neighbour_floor"] = embeddings.floor("neighbour")
        finally:
            bench.cleanup()
        self._print(results)
        benchmarks.write_json(o["json_path"], results)

    def _print(self, r):
        w = self.stdout.write
        b, lat = r["burst"], r["latency_one_at_a_time"]
        w(f"\nSessions through {r['workers']} real Celery worker(s) on Redis, offline model (instant)\n")
        w(
            benchmarks.table(
                ["measure", "value"],
                [
                    ["sessions ended back to back", b["sessions"]],
                    ["sessions/s per worker", b["sessions_per_second_per_worker"]],
                    ["facts/s per worker", b["facts_per_second_per_worker"]],
                    [
                        "facts created / confirmed / superseded",
                        f"{b['facts_created']} / {b['confirmed']} / {b['superseded']}",
                    ],
                    ["end -> facts visible p50 ms (one at a time)", benchmarks.ms(lat["p50"])],
                    ["end -> facts visible p95 ms (one at a time)", benchmarks.ms(lat["p95"])],
                    [
                        "end -> facts visible p95 ms (burst, incl. queue)",
                        benchmarks.ms(b["end_to_visible_including_queue"]["p95"]),
                    ],
                ],
            )
        )
        s = r["store_fact"]
        w(f"\n\nstore_fact per fact, model time excluded (n={s['facts']}, neighbour floor {r['neighbour_floor']})\n")
        rows = [
            [name, benchmarks.ms(s[key]["p50"]), benchmarks.ms(s[key]["p95"]), benchmarks.ms(s[key]["p99"])]
            for name, key in (
                ("embedding", "embed"),
                ("store_fact without model", "store_fact_without_model"),
                ("embedding + store_fact", "store_fact_plus_embed"),
            )
        ]
        w(benchmarks.table(["part", "p50 ms", "p95 ms", "p99 ms"], rows) + "\n")
        w("mean SQL ms per fact: " + ", ".join(f"{k} {v}" for k, v in s["sql_mean_ms"].items()) + "\n")
        w(
            f"outcomes {s['outcomes']}; model calls per fact {s['model_calls_per_fact']} "
            f"(max {s['max_model_calls_for_one_fact']}); facts with no neighbour over the floor: "
            f"{s['facts_without_neighbour']}, model calls for them: {s['model_calls_when_no_neighbour']}\n"
        )

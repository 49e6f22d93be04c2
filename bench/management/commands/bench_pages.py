import os

from django.core.management.base import BaseCommand

from bench import common as benchmarks
from bench import pages as pb


class Command(BaseCommand):
    help = "Pages under load: uvicorn (2 workers, as make run) on loopback, 1/10/50 clients, ratio to a trivial view."

    def add_arguments(self, parser):
        parser.add_argument("--facts", type=int, default=300, help="live facts of the benchmark user")
        parser.add_argument("--clients", default="1,10,50", help="concurrency levels, comma-separated")
        parser.add_argument("--seconds", type=float, default=10, help="duration of each run")
        parser.add_argument("--workers", type=int, default=2, help="uvicorn workers")
        parser.add_argument("--tool", choices=("auto", "wrk", "python"), default="auto")
        parser.add_argument("--json", dest="json_path", help="write the results here")
        parser.add_argument(
            "--redis",
            help="the server's cache (default: REDIS_URL, else the local Redis if up; 'off': none)",
        )
        parser.add_argument("--smoke", action="store_true", help="20 facts, 1 and 2 clients, 0.3 s each")
        parser.add_argument(
            "--cpu",
            type=int,
            default=0,
            metavar="N",
            help="also measure CPU ms per request in this process (test client, N requests per page), no server",
        )

    def handle(self, *args, **o):
        benchmarks.migrate_first(self.stderr)
        if o["smoke"]:
            # It only shows the command runs and writes its JSON (the test suite runs it): 0.3 s a run is
            # still dozens of requests a page. wrk counts whole seconds (21 s of runs here), so unless
            # asked for by name the smoke loads with the Python generator.
            o.update(facts=20, clients="1,2", seconds=0.3)
            if o["tool"] == "auto":
                o["tool"] = "python"
        load_start = os.getloadavg()
        levels = [int(c) for c in o["clients"].split(",") if c.strip()]
        tool, note = pb.pick_tool(o["tool"])
        err = self.stderr
        if note:
            err.write(note)
        seeded = pb.seed(o["facts"], benchmarks.Progress("seeding facts", o["facts"], err))
        server = None
        redis_url = None
        runs = []
        cpu = {}
        try:
            if o["cpu"]:
                with pb.collected_static():
                    for name, target in seeded.targets.items():
                        err.write(f"{name}: CPU per request in process…")
                        cpu[name] = pb.cpu_per_request(target, o["cpu"])
            redis_url = pb.redis_for_server(o["redis"])
            if redis_url is None:
                err.write("no Redis answered: the server runs on the local-memory cache")
            # As in production (scripts/run): it collects the static files into its own folder first.
            server = pb.Server(o["workers"], redis_url)
            server.wait_ready()
            for target in seeded.targets.values():
                pb.check_target(server.base, target)
                if not o["smoke"]:  # warm the workers and their connections (the smoke's numbers mean nothing)
                    pb.drain(pb.load(server.base, target, 1, min(1, o["seconds"]), tool))
            for clients in levels:
                ceiling = None
                for name, target in seeded.targets.items():
                    err.write(f"{name}: {clients} client(s) for {o['seconds']} s…")
                    result = pb.load(server.base, target, clients, o["seconds"], tool)
                    pb.drain(result)
                    if ceiling is None:
                        ceiling = result["rps"]
                    runs.append(
                        {
                            "page": name,
                            "clients": clients,
                            **result,
                            "ratio_to_ceiling": round(result["rps"] / ceiling, 3) if ceiling else None,
                        }
                    )
            given = seeded.spread_given_a_block()
        finally:
            if server is not None:
                server.stop()
            seeded.cleanup()
        results = {
            "benchmark": "bench_pages",
            "smoke": o["smoke"],
            "tool": tool,
            "server": "uvicorn",
            "uvicorn_workers": o["workers"],
            "session_engine": server.session_engine if server is not None else None,
            "redis": bool(redis_url),
            "load_average": {"start": load_start, "end": os.getloadavg()},
            "facts": o["facts"],
            "seconds_per_run": o["seconds"],
            "runs": runs,
            "recall_sessions_given_a_block": given,  # of the spread row's sessions: its requests took them in turn
            "cpu_ms_per_request": cpu,
        }
        rows = [
            [
                r["page"],
                r["clients"],
                f"{r['rps']:.1f}",
                benchmarks.ms(r["p50"]),
                benchmarks.ms(r["p95"]),
                benchmarks.ms(r["p99"]),
                r["errors"],
                benchmarks.ms(r["server_p95"]) if r["server_p95"] is not None else "-",
                r["ratio_to_ceiling"],
            ]
            for r in runs
        ]
        self.stdout.write(
            f"\nuvicorn, {o['workers']} workers, DEBUG off, loopback, {results['session_engine']} sessions; "
            f"load from {tool} in another process; load average {load_start[0]:.2f} -> {os.getloadavg()[0]:.2f}\n"
        )
        self.stdout.write(
            benchmarks.table(
                ["page", "clients", "req/s", "p50 ms", "p95 ms", "p99 ms", "errors", "server p95 ms", "x ceiling"], rows
            )
            + "\n"
        )
        if cpu:
            self.stdout.write("\nCPU ms per request in this process (Django test client, database sessions)\n")
            rows = [[name, "-" if v is None else f"{v:.2f}"] for name, v in cpu.items()]
            self.stdout.write(benchmarks.table(["page", "CPU ms"], rows) + "\n")
        benchmarks.write_json(o["json_path"], results)

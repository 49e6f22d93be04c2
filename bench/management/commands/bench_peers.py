"""memoryapp and mem0 side by side: `manage.py bench_peers --users 30 --facts 300 --queries 1000`."""

import json

from django.core.management.base import BaseCommand, CommandError

from bench import data as benchdata
from bench import peers
from bench import recall as recallbench


class Command(BaseCommand):
    help = (
        "Install mem0 into a virtualenv of its own under .data/peers/ (once), load the same users, facts and "
        "vectors into both systems on this PostgreSQL server, and time searches interleaved: whole (each system "
        "embeds the message with MiniLM int8) and with the vector given. Prints a table; --json FILE."
    )

    def add_arguments(self, parser):
        parser.add_argument("--users", type=int, default=30)
        parser.add_argument("--facts", type=int, default=300, help="facts per user")
        parser.add_argument("--queries", type=int, default=1000, help="LoCoMo messages asked of every system")
        parser.add_argument("--smoke", action="store_true", help="tiny run for CI (generated data)")
        parser.add_argument("--no-install", action="store_true", help="never pip-install mem0")
        parser.add_argument(
            "--sql-peer", action="store_true", help="use the mem0-shaped SQL peer instead of mem0 (labelled)"
        )
        parser.add_argument("--locomo", help="also: evidence recall@10 on LoCoMo's test conversations (locomo10.json)")
        parser.add_argument("--json", dest="json_path")
        parser.add_argument("--datasets", default=str(benchdata.DEFAULT_DATASETS))
        parser.add_argument("--seed", type=int, default=7)

    def handle(self, *args, **o):
        options = {**o, "recalls": 1, "vector_queries": 1, "hnsw": "off", "database": None, "keep": False}
        config = recallbench.Config.from_options(options)
        config.database = config.database.replace("memoryapp_bench", "memoryapp_peers")
        if o["smoke"]:
            config.users, config.facts, config.pool = 4, 30, 200
            queries = benchdata.generated_messages()[:12]
        else:
            config.users, config.facts = o["users"], o["facts"]
            queries = benchdata.chat_messages(config.datasets)[: o["queries"]]

        def progress(message):
            self.stderr.write(message)
            self.stderr.flush()

        try:
            result = peers.run(config, progress, queries, no_install=o["no_install"], use_sql_peer=o["sql_peer"])
        except (peers.PeerError, recallbench.BenchError) as exc:
            raise CommandError(str(exc)) from exc
        if o["locomo"]:
            result["locomo"] = peers.run_locomo(
                config, progress, o["locomo"], no_install=o["no_install"], use_sql_peer=o["sql_peer"]
            )
        self.stdout.write(peers.text_table(result))
        if o["locomo"]:
            self.stdout.write(json.dumps(result["locomo"], indent=1))
        if o["json_path"]:
            with open(o["json_path"], "w") as f:
                json.dump(result, f, indent=2)
            self.stdout.write(f"wrote {o['json_path']}")

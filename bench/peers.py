"""memoryapp side by side with mem0 on the same machine, data, vectors, PostgreSQL and queries.

Used by `manage.py bench_peers`. Our side is the bench database of `bench_recall` (same users, same
MSC persona facts, loaded by COPY); searches are `recall.select` (both tiers and the org section). mem0
runs in a virtualenv of its own under `.data/peers/` (bench/peer_mem0.py), on a database of its own on
the same server, loaded with the same live facts, ids and vectors. Each query is asked of every
system in turn, interleaved, first with the message alone (each embeds it with MiniLM int8) and then
with the vector precomputed. In --smoke mode, when mem0 is not installed, a "mem0-shaped SQL peer"
(the two statements mem0's pgvector store sends per search, run here with psycopg) stands in for it,
and the output says so.
"""

import contextlib
import gc
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import override_settings
from pgvector.psycopg import register_vector

from bench import common as benchmarks
from bench import recall as recallbench
from bench import reference
from bench.write import database_url
from evals import locomo as lb
from memoryapp import db, embeddings, recall
from memoryapp.models import MemoryFact, Organization

MEM0_PIN = "mem0ai==2.2.1"
PEER_PACKAGES = [MEM0_PIN, "psycopg[binary,pool]==3.3.9", "numpy==2.4.6"]
TOP_K = 20  # recall's cap: both systems return at most 20 facts per query
CONFIGS = {
    "mem0 default (HNSW, user filter after the scan)": {"hnsw": True, "user_index": False},
    "mem0 + exact per-user index (btree on payload user_id, no HNSW)": {"hnsw": False, "user_index": True},
}
SQL_PEER_LABEL = "mem0-shaped SQL peer (NOT mem0: its two statements, run here)"


class PeerError(Exception):
    pass


def venv_dir():
    return db.DATA_DIR / "peers" / "mem0-venv"


def ensure_mem0(progress, install=True):
    """The mem0 virtualenv's python, installing mem0 there on first use; (None, reason) when not possible."""
    python = venv_dir() / "bin" / "python"
    check = [str(python), "-c", "import mem0.vector_stores.pgvector, psycopg_pool"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python, None
    if not install:
        return None, f"mem0 is not installed in {venv_dir()} and --no-install was given"
    progress(f"installing {MEM0_PIN} into {venv_dir()} (once; a minute or two)…")
    try:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv_dir())], check=True, capture_output=True)
        pip = subprocess.Popen(
            [str(python), "-m", "pip", "install", "--progress-bar", "off", *PEER_PACKAGES],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        tail = []
        for line in pip.stdout:
            tail = (tail + [line.rstrip()])[-20:]
            if line.startswith(("Collecting", "Successfully")):
                progress("  pip: " + line.strip()[:100])
        if pip.wait() != 0:
            return None, "pip could not install mem0 into the peer virtualenv:\n" + "\n".join(tail)
    except (OSError, subprocess.CalledProcessError) as exc:
        return None, f"could not create the peer virtualenv: {exc}"
    if subprocess.run(check, capture_output=True).returncode != 0:
        return None, "mem0 installed but `import mem0.vector_stores.pgvector` fails in the peer virtualenv"
    return python, None


class Mem0Process:
    """bench/peer_mem0.py in the mem0 virtualenv, spoken to over a pipe (one JSON line each way)."""

    label_prefix = ""

    def __init__(self, python, database_url):
        env = dict(
            os.environ,
            BENCH_REPO=str(benchmarks.BASE_DIR),
            BENCH_OUR_SITE_PACKAGES=sysconfig.get_paths()["purelib"],
            DATABASE_URL=database_url,
            MEM0_TELEMETRY="False",
        )
        script = Path(__file__).with_name("peer_mem0.py")
        self.proc = subprocess.Popen(
            [str(python), str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
        )

    def call(self, op, **request):
        self.proc.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise PeerError(f"the mem0 process exited (code {self.proc.poll()}) during {op!r}")
        answer = json.loads(line)
        if not answer.pop("ok"):
            raise PeerError(f"mem0 {op}: {answer['error']}")
        return answer

    def close(self):
        with contextlib.suppress(PeerError, OSError, ValueError):
            self.call("quit")
        benchmarks.stop_processes([self.proc], timeout=10)


class SqlShapePeer:
    """Stands in for mem0 when it cannot be installed: the same table, indexes and per-search statements
    as mem0's pgvector store (a semantic query filtered on payload user_id with LIMIT max(4k, 60), then a
    keyword query with ts_rank_cd), ranked by cosine alone. It measures the query shape, not mem0."""

    def __init__(self, conninfo):
        self.conn = psycopg.connect(conninfo, autocommit=True)
        self.embed = embeddings.embed

    def call(self, op, **r):
        return getattr(self, op)(r)

    def open(self, r):

        c = r["collection"]
        self.conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(self.conn)
        self.conn.execute(f'CREATE TABLE IF NOT EXISTS "{c}" (id uuid PRIMARY KEY, vector vector(384), payload jsonb)')
        if r["hnsw"]:
            self.conn.execute(
                f'CREATE INDEX IF NOT EXISTS "{c}_hnsw_idx" ON "{c}" USING hnsw (vector vector_cosine_ops)'
            )
        self.conn.execute(
            f'CREATE INDEX IF NOT EXISTS "{c}_text_idx" ON "{c}" '
            "USING gin(to_tsvector('simple', payload->>'text_lemmatized'))"
        )
        if r.get("user_index"):
            self.conn.execute(f'CREATE INDEX IF NOT EXISTS "{c}_user_idx" ON "{c}" ((payload->>\'user_id\'))')
        return {"mem0_version": SQL_PEER_LABEL}

    def add_one(self, r):
        return {"payload_keys": []}

    def load(self, r):
        c = r["collection"]
        vectors = np.load(r["vectors"])
        rows = json.loads(Path(r["rows"]).read_text())
        with self.conn.cursor() as cur:
            cur.executemany(
                f'INSERT INTO "{c}" (id, vector, payload) VALUES (%s, %s, %s)',
                [
                    (
                        row["id"],
                        v,
                        json.dumps({"user_id": row["user"], "data": row["text"], "text_lemmatized": row["text"]}),
                    )
                    for row, v in zip(rows, vectors, strict=True)
                ],
            )
        self.conn.execute(f'ANALYZE "{c}"')
        return {"rows": len(rows)}

    def search(self, r):
        c, k = r["collection"], r["top_k"]
        t0 = time.perf_counter()
        vector = np.asarray(r["vector"] if r.get("vector") is not None else self.embed(r["query"]), dtype=np.float32)
        semantic = self.conn.execute(
            f'SELECT id, vector <=> %s AS distance, payload FROM "{c}" WHERE payload->>%s = %s '
            "ORDER BY distance LIMIT %s",
            (vector, "user_id", r["user"], max(4 * k, 60)),
        ).fetchall()
        self.conn.execute(
            "SELECT id, ts_rank_cd(to_tsvector('simple', payload->>'text_lemmatized'), plainto_tsquery('simple', %s)) "
            f"AS score, payload FROM \"{c}\" WHERE to_tsvector('simple', payload->>'text_lemmatized') @@ "
            "plainto_tsquery('simple', %s) AND payload->>%s = %s ORDER BY score DESC LIMIT %s",
            (r["query"], r["query"], "user_id", r["user"], max(4 * k, 60)),
        ).fetchall()
        ids = [str(row[0]) for row in semantic if 1 - row[1] >= 0.1][:k]
        return {"ms": (time.perf_counter() - t0) * 1000, "ids": ids}

    def explain(self, r):

        register_vector(self.conn)
        plan = self.conn.execute(
            f'EXPLAIN SELECT id, vector <=> %s AS distance, payload FROM "{r["collection"]}" '
            "WHERE payload->>%s = %s ORDER BY distance LIMIT %s",
            (np.asarray(r["vector"], dtype=np.float32), "user_id", r["user"], r["limit"]),
        ).fetchall()
        return {"plan": [row[0] for row in plan]}

    def drop(self, r):
        self.conn.execute(f'DROP TABLE IF EXISTS "{r["collection"]}"')
        return {}

    def close(self):
        self.conn.close()


# --- the run ---------------------------------------------------------------------------------


def _peer_database(config):
    name = config.database + "_mem0"
    with recallbench._connect("postgres") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    params = recallbench._server_params()
    conninfo = psycopg.conninfo.make_conninfo(dbname=name, **params)
    return name, conninfo


def _drop_database(name):
    with recallbench._connect("postgres") as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _live_rows(data, user_ids):
    """Every live fact as (id, user, text) plus its vector, in the bench database's order."""
    rows, vectors = [], []
    for u in range(data.users):
        sl = data.user_slice(u)
        for i in range(sl.start, sl.stop):
            if data.state[i] == 0:
                s = int(data.sentence[i])
                rows.append(
                    {"id": str(uuid.UUID(bytes=data.ids[i].tobytes())), "user": str(user_ids[u]), "text": data.texts[s]}
                )
                vectors.append(data.vectors[s])
    return rows, np.vstack(vectors).astype(np.float32)


def _stats(ms):
    p = np.percentile(np.asarray(ms), [50, 95, 99]) if ms else [None] * 3
    return {"p50": round(float(p[0]), 3), "p95": round(float(p[1]), 3), "p99": round(float(p[2]), 3), "n": len(ms)}


def exact_mem0_pool(data, u, vector, k):
    """The candidates mem0's semantic half must see with exact search: the user's live facts at cosine >= 0.1,
    best max(4k, 60). Its final top k is re-ranked with keyword scores but always drawn from this pool."""
    sl = data.user_slice(u)
    ids = [str(uuid.UUID(bytes=bytes(r))) for r in data.ids[sl]]
    live = [i for i in range(len(ids)) if data.state[sl][i] == 0]
    ranked, _ = reference.vector_ranking(data.vectors[data.sentence[sl]], vector, live, ids, 0.1)
    return [ids[i] for i in ranked[: max(4 * k, 60)]]


def run(config, progress, queries, no_install=False, use_sql_peer=False):
    """Both systems, one run, queries interleaved; returns a JSON-able dict."""
    started = time.perf_counter()
    load_avg_start = os.getloadavg()
    data = recallbench.make_dataset(config, progress)
    peer_note = None
    python = None
    if not use_sql_peer:
        python, peer_note = ensure_mem0(progress, install=not no_install)
        if python is None:
            if not config.smoke:
                raise PeerError(peer_note)
            progress(f"SKIPPING the real mem0: {peer_note}")
            progress(f"using the {SQL_PEER_LABEL} instead")
    bench = recallbench.BenchDatabase(config.database)
    bench.create(fresh=True)
    peer_db, conninfo = _peer_database(config)
    tmp = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    peer = None
    try:
        with bench:
            recallbench.load(config, data, progress)

            user_ids = list(
                get_user_model()
                .objects.filter(username__startswith="bench-")
                .order_by("username")
                .values_list("id", flat=True)
            )
            org_id = Organization.objects.get(slug="bench").id
            rows, vectors = _live_rows(data, user_ids)
            np.save(tmp / "vectors.npy", vectors)
            (tmp / "rows.json").write_text(json.dumps(rows))
            if python is not None:
                peer = Mem0Process(python, database_url())
                peer_kind = "mem0"
            else:
                peer = SqlShapePeer(conninfo)
                peer_kind = "sql-shape"
            collections = {}
            for n, (name, options) in enumerate(CONFIGS.items()):
                collection = f"bench_mem0_{n}"
                opened = peer.call(
                    "open", dsn=conninfo, collection=collection, history=str(tmp / f"h{n}.db"), **options
                )
                t0 = time.perf_counter()
                peer.call("load", collection=collection, vectors=str(tmp / "vectors.npy"), rows=str(tmp / "rows.json"))
                progress(f"{name}: {len(rows):,} facts loaded in {time.perf_counter() - t0:.1f}s")
                collections[name] = collection
            # One extra fact through mem0's real add(infer=False) path: our bulk rows must have its shape.
            shape = peer.call(
                "add_one",
                collection=collections[next(iter(CONFIGS))],
                user="shape-check",
                text="The user likes tea.",
                vector=[float(x) for x in vectors[0]],
            )

            rng = np.random.default_rng(config.seed + 5)
            picks = rng.integers(0, config.users, len(queries))
            qvectors = embeddings.embed_many(queries)
            ours = {"whole": [], "vector given": []}
            theirs = {
                name: {"whole": [], "vector given": [], "returned": [], "in_pool": [], "complete": []}
                for name in CONFIGS
            }
            our_returned, our_overlap, our_complete = [], [], []
            warm = min(10, len(queries))
            # mem0 runs in a process of its own; ours runs in this one, beside the benchmark's whole
            # dataset. Without this, full garbage collections over that dataset land inside our timed
            # calls (p95 5.6 vs 2.9 ms in a /tmp test, docs/benchmarks.md), a cost of the harness.
            gc.collect()
            gc.freeze()
            for q in range(-warm, len(queries)):
                i = q % len(queries)
                u = int(picks[i])
                user = user_ids[u]
                vec = qvectors[i]
                for mode in ("whole", "vector given"):
                    given = vec if mode == "vector given" else None
                    t0 = time.perf_counter()
                    chosen = recall.select(user, queries[i], org=org_id, vector=given)
                    ms = (time.perf_counter() - t0) * 1000
                    if q >= 0:
                        ours[mode].append(ms)
                    for name, collection in collections.items():
                        answer = peer.call(
                            "search",
                            collection=collection,
                            user=str(user),
                            query=queries[i],
                            top_k=TOP_K,
                            vector=None if given is None else [float(x) for x in given],
                        )
                        if q < 0:
                            continue
                        theirs[name][mode].append(answer["ms"])
                        if mode == "vector given":
                            pool = set(exact_mem0_pool(data, u, vec, TOP_K))
                            got = answer["ids"]
                            theirs[name]["returned"].append(len(got))
                            theirs[name]["in_pool"].append(len(set(got) & pool) / max(1, len(got)))
                            theirs[name]["complete"].append(len(got) == min(TOP_K, len(pool)))
                if q >= 0:
                    expected = recallbench.expected_selection(data, u, vec, queries[i])
                    want = set(expected.always) | set(expected.hybrid)
                    got = {s.fact.id for s in chosen if s.tier != "org"}
                    our_returned.append(len(chosen))
                    our_overlap.append(len(got & want) / max(1, len(got)))
                    our_complete.append(got == want)
                if q >= 0 and (q + 1) % max(1, len(queries) // 10) == 0:
                    progress(f"queries: {q + 1}/{len(queries)}")
            gc.unfreeze()
            plans = {
                name: peer.call(
                    "explain",
                    collection=c,
                    user=str(user_ids[0]),
                    vector=[float(x) for x in qvectors[0]],
                    limit=max(4 * TOP_K, 60),
                )["plan"]
                for name, c in collections.items()
            }
            for c in collections.values():
                peer.call("drop", collection=c)
    finally:
        if peer is not None:
            peer.close()
        bench.drop()
        _drop_database(peer_db)
    our = {mode: _stats(v) for mode, v in ours.items()}
    table = []
    for name in CONFIGS:
        t = theirs[name]
        row = {"system": name, "peer": peer_kind}
        for mode in ("whole", "vector given"):
            row[mode] = _stats(t[mode])
            row[f"ratio_p50_{mode}"] = round(row[mode]["p50"] / our[mode]["p50"], 2)
            row[f"ratio_p95_{mode}"] = round(row[mode]["p95"] / our[mode]["p95"], 2)
        row["returned_mean"] = round(float(np.mean(t["returned"])), 2)
        row["complete_rate"] = round(float(np.mean(t["complete"])), 4)  # as many results as exact search gives
        row["overlap_with_exact"] = round(float(np.mean(t["in_pool"])), 4)  # results drawn from the exact pool
        row["plan"] = [re.sub(r"'\[[^']*\]'::vector", "$vector", line) for line in plans[name]]
        table.append(row)
    return {
        "benchmark": "bench_peers",
        "smoke": config.smoke,
        "peer": peer_kind,
        "peer_note": peer_note,
        "mem0_version": opened.get("mem0_version"),
        "mem0_payload_keys_from_add": shape["payload_keys"],
        "size": {
            "users": config.users,
            "facts_per_user": config.facts,
            "live_facts": len(rows),
            "queries": len(queries),
        },
        "top_k": TOP_K,
        "memoryapp": {
            **our,
            "returned_mean": round(float(np.mean(our_returned)), 2),
            "complete_rate": round(float(np.mean(our_complete)), 4),
            "overlap_with_exact": round(float(np.mean(our_overlap)), 4),
        },
        "peers": table,
        "load_average": {"start": [round(x, 2) for x in load_avg_start], "end": [round(x, 2) for x in os.getloadavg()]},
        "wall_s": round(time.perf_counter() - started, 1),
    }


def text_table(result):
    """The side-by-side table as text."""
    lines = [
        f"bench_peers: {result['size']['users']} users x {result['size']['facts_per_user']} facts "
        f"({result['size']['live_facts']:,} live), {result['size']['queries']} queries, top {result['top_k']}; "
        f"peer: {result['peer']} ({result['mem0_version']}); load average {result['load_average']['start']}",
    ]
    if result["peer_note"]:
        lines.append(f"NOTE: real mem0 skipped: {result['peer_note']}")
    headers = [
        "system",
        "whole p50",
        "p95",
        "p99",
        "vector given p50",
        "p95",
        "p99",
        "x ours p50/p95 (vector given)",
        "returned",
        "overlap exact",
    ]
    rows = []
    o = result["memoryapp"]
    rows.append(
        [
            "memoryapp recall.select",
            o["whole"]["p50"],
            o["whole"]["p95"],
            o["whole"]["p99"],
            o["vector given"]["p50"],
            o["vector given"]["p95"],
            o["vector given"]["p99"],
            "1.0 / 1.0",
            o["returned_mean"],
            o["overlap_with_exact"],
        ]
    )
    for r in result["peers"]:
        rows.append(
            [
                r["system"][:48],
                r["whole"]["p50"],
                r["whole"]["p95"],
                r["whole"]["p99"],
                r["vector given"]["p50"],
                r["vector given"]["p95"],
                r["vector given"]["p99"],
                f"{r['ratio_p50_vector given']} / {r['ratio_p95_vector given']}",
                r["returned_mean"],
                r["overlap_with_exact"],
            ]
        )
    lines.append(benchmarks.table(headers, rows))
    for r in result["peers"]:
        lines.append(f"plan, {r['system']}:\n  " + "\n  ".join(r["plan"]))
    return "\n".join(lines)


# --- retrieval quality on LoCoMo, both systems --------------------------------------------------


def _hit_and_recall(fact_ids, evidence, fact_dias):
    """(any evidence turn among the facts' source turns, the share of evidence turns found)."""
    found = set().union(*(fact_dias.get(f, set()) for f in fact_ids)) & evidence
    return float(bool(found)), len(found) / len(evidence)


def _interleave(per_user, k):
    """Top k of several users' rankings taken in turn (a1, b1, a2, b2, ...), without repeats."""
    out = []
    for rank in range(k):
        for ranking in per_user:
            if rank < len(ranking) and ranking[rank] not in out:
                out.append(ranking[rank])
    return out[:k]


def run_locomo(config, progress, path, no_install=False, use_sql_peer=False, k=10):
    """Evidence recall@k of recall's tier 2 and of mem0's search on the same observation facts."""

    python = None if use_sql_peer else ensure_mem0(progress, install=not no_install)[0]
    bench = recallbench.BenchDatabase(config.database + "_locomo")
    bench.create(fresh=True)
    peer_db, conninfo = _peer_database(config)
    tmp = Path(tempfile.mkdtemp(prefix="bench-peers-locomo-"))
    peer = None
    try:
        with bench:
            call_command("migrate", verbosity=0, interactive=False)
            # The test split (conversations 6-10; 1-5 were used for tuning); a smoke run's tiny file has fewer.
            samples = lb.read(path, split="all" if config.smoke else "test")
            names = {number: lb.speakers_of(sample) for number, sample in samples}
            loaded = lb.load_observations(samples, progress_factory=lambda label, n: benchmarks.Progress(label, n))
            questions = [q for q in loaded.questions if q["evidence"]]
            facts = list(
                MemoryFact.objects.filter(id__in=list(loaded.fact_dias)).values_list(
                    "id", "user_id", "text", "embedding"
                )
            )
            rows = [{"id": str(f[0]), "user": str(f[1]), "text": f[2]} for f in facts]
            np.save(tmp / "vectors.npy", np.vstack([np.asarray(f[3], dtype=np.float32) for f in facts]))
            (tmp / "rows.json").write_text(json.dumps(rows))
            peer = Mem0Process(python, database_url()) if python else SqlShapePeer(conninfo)
            peer.call(
                "open", dsn=conninfo, collection="bench_locomo", history=str(tmp / "h.db"), hnsw=False, user_index=True
            )
            peer.call("load", collection="bench_locomo", vectors=str(tmp / "vectors.npy"), rows=str(tmp / "rows.json"))
            vectors = embeddings.embed_many([q["question"] for q in questions])
            memory = {"TIER1_LIMIT": 0, "TIER2_LIMIT": k, "RECALL_CAP": k, "ORG_LIMIT": 0}
            scores = {"memoryapp": [], "mem0": []}
            with override_settings(MEMORY={**settings.MEMORY, **memory}):
                for n, (q, vec) in enumerate(zip(questions, vectors, strict=True)):
                    speakers = names[q["conversation"]]
                    lexical = re.sub("|".join(rf"\b{re.escape(x)}('s)?\b" for x in speakers), " ", q["question"])
                    ours = [[s.fact.id for s in recall.select(u, lexical, vector=vec)] for u in q["user_ids"]]
                    theirs = [
                        [
                            uuid.UUID(i)
                            for i in peer.call(
                                "search",
                                collection="bench_locomo",
                                user=str(u),
                                query=lexical,
                                top_k=k,
                                vector=[float(x) for x in vec],
                            )["ids"]
                        ]
                        for u in q["user_ids"]
                    ]
                    for name, per_user in (("memoryapp", ours), ("mem0", theirs)):
                        scores[name].append(_hit_and_recall(_interleave(per_user, k), q["evidence"], loaded.fact_dias))
                    if (n + 1) % 100 == 0:
                        progress(f"LoCoMo questions: {n + 1}/{len(questions)}")
            peer.call("drop", collection="bench_locomo")
            loaded.cleanup()
    finally:
        if peer is not None:
            peer.close()
        bench.drop()
        _drop_database(peer_db)
    return {
        "split": "all conversations of the file (smoke)" if config.smoke else "conversations 6-10 (test)",
        "questions": len(questions),
        "facts": len(rows),
        "k": k,
        "peer": "mem0" if python else "sql-shape",
        **{
            f"{name}_{metric}@{k}": round(float(np.mean([s[i] for s in v])), 4)
            for name, v in scores.items()
            for i, metric in enumerate(("hit", "recall"))
        },
    }

"""The recall benchmark: synthetic users in a database of their own, timed recalls, exact checks, HNSW vs exact.

Used by `manage.py bench_recall`. The app's own data is never touched: everything happens in a separate
database on the same server (created, migrated, loaded with COPY, and dropped unless --keep).
"""

import hashlib
import os
import platform
import re
import struct
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, connections
from pgvector.psycopg import register_vector

from bench import common, reference
from bench import data as benchdata
from memoryapp import clock, db, embeddings, recall
from memoryapp.models import AgentSession, Membership, MemoryFact, MemorySettings, Organization

WARMUP = 30
SUPERSEDED_SHARE = 0.05  # of generated facts, superseded (must never be recalled)
EXPIRED_SHARE = 0.03  # of generated facts, expired by forgetting (must never be recalled)
HNSW_AUTO_MAX = 500_000
HNSW_EF_SEARCH = (40, 200)
TIE = 1e-5  # similarities closer than this are a float tie, not a disagreement
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FACT_COLUMNS = [
    ("id", "uuid"),
    ("user_id", "int4"),
    ("scope", "varchar"),
    ("text", "text"),
    ("kind", "varchar"),
    ("embedding", "vector"),
    ("embedding_model", "varchar"),
    ("origin", "varchar"),
    ("source_turns", "int4[]"),
    ("created_at", "timestamptz"),
    ("last_confirmed_at", "timestamptz"),
    ("confirmation_count", "int4"),
    ("superseded_at", "timestamptz"),
    ("expired_at", "timestamptz"),
    ("supersede_reason", "varchar"),
    ("expired_rule", "varchar"),
]
ORG_FACTS = [
    ("The organisation deploys to production on Fridays.", "profile"),
    ("The organisation's main backend language is Go.", "profile"),
    ("The organisation hosts everything on its own servers.", "constraint"),
    ("The organisation's code must pass review by two engineers.", "constraint"),
    ("The organisation uses PostgreSQL for every service.", "profile"),
    ("The organisation wants to open an office in Lisbon next year.", "goal"),
    ("The organisation prefers plain SQL over ORMs for reporting.", "preference"),
    ("The organisation's support hours are 8:00 to 18:00 CET.", "profile"),
]


class BenchError(Exception):
    pass


@dataclass
class Config:
    users: int
    facts: int
    recalls: int
    smoke: bool
    datasets: Path
    database: str
    keep: bool
    hnsw: bool
    vector_queries: int
    seed: int
    pool: int | None = None
    cold: bool = False

    @classmethod
    def from_options(cls, o):
        smoke = bool(o.get("smoke"))
        suffix = re.sub(r"[^a-z0-9_]", "", os.environ.get("TEST_DB_SUFFIX", "").lower())
        database = o.get("database") or ("memoryapp_bench_smoke" + suffix if smoke else "memoryapp_bench")
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", database):
            raise BenchError("--database: use lower-case letters, digits and underscores")
        if database == connections["default"].settings_dict["NAME"]:
            raise BenchError("--database must not be the app's own database")
        users, facts, recalls = o["users"], o["facts"], o["recalls"]
        queries, pool = o["vector_queries"], None
        if smoke:
            users, facts, recalls, queries, pool = 12, 40, 40, 40, 400
        hnsw = {"on": True, "off": False}.get(o.get("hnsw", "auto"), users * facts <= HNSW_AUTO_MAX)
        return cls(
            users=users,
            facts=facts,
            recalls=recalls,
            smoke=smoke,
            datasets=Path(o["datasets"]),
            database=database,
            keep=bool(o.get("keep")),
            hnsw=hnsw,
            vector_queries=queries,
            seed=o["seed"],
            pool=pool,
            cold=bool(o.get("cold")),
        )


# --- synthetic data ------------------------------------------------------------------


@dataclass
class Dataset:
    texts: list  # unique fact sentences
    kinds: np.ndarray  # per sentence, index into KIND_CODES
    vectors: np.ndarray  # per sentence, unit float32
    sentence: np.ndarray  # per fact: index into texts
    ids: np.ndarray  # per fact: 16 uuid bytes (uint8 rows)
    created: np.ndarray  # per fact: microseconds since the epoch
    confirmed: np.ndarray
    state: np.ndarray  # 0 live, 1 superseded, 2 expired
    users: int
    per_user: int

    def user_slice(self, u):
        return slice(u * self.per_user, (u + 1) * self.per_user)


KIND_CODES = ("constraint", "profile", "preference", "goal")


def _pool_vectors(texts, progress, batch=256):
    """Embed each unique sentence once, in batches; cached under .data/bench/ by model and text."""
    digest = hashlib.sha256(("\n".join(texts) + embeddings.model_name()).encode()).hexdigest()[:16]
    cache = db.DATA_DIR / "bench" / f"vectors-{digest}.npy"
    if cache.exists():
        progress(f"embeddings: {len(texts):,} unique sentences from cache {cache.name}")
        return np.load(cache)
    started = time.perf_counter()
    parts = []
    for start in range(0, len(texts), batch):
        parts.append(embeddings.embed_many(texts[start : start + batch], batch_size=batch))
        done = min(start + batch, len(texts))
        if done == len(texts) or (start // batch) % 20 == 0:
            rate = done / max(time.perf_counter() - started, 1e-9)
            progress(f"embedding unique sentences: {done:,}/{len(texts):,} ({rate:,.0f}/s)")
    vectors = np.vstack(parts).astype(np.float32)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return vectors


def make_dataset(config, progress):
    """Deterministic users: `facts` distinct persona sentences each, some superseded or expired."""
    if config.smoke:
        pool = benchdata.generated_facts(config.pool)
    else:
        pool = benchdata.persona_facts(config.datasets, progress=common.Progress)
    if config.facts > len(pool):
        raise BenchError(f"--facts {config.facts} is more than the {len(pool)} unique persona sentences")
    texts = [t for t, _ in pool]
    kinds = np.array([KIND_CODES.index(k) for _, k in pool], dtype=np.int8)
    vectors = _pool_vectors(texts, progress)
    rng = np.random.default_rng(config.seed)
    n = config.users * config.facts
    sentence = np.empty(n, dtype=np.int32)
    for u in range(config.users):
        sentence[u * config.facts : (u + 1) * config.facts] = rng.choice(len(texts), config.facts, replace=False)
    ids = np.frombuffer(rng.bytes(16 * n), dtype=np.uint8).reshape(n, 16)
    year = 365 * 86400 * 1_000_000
    start = int((clock.now() - timedelta(days=400) - EPOCH).total_seconds() * 1_000_000)
    created = start + rng.integers(0, year, n)
    confirmed = created + (rng.random(n) * (start + year + 30 * 86400 * 1_000_000 - created)).astype(np.int64)
    r = rng.random(n)
    state = np.where(r < SUPERSEDED_SHARE, 1, np.where(r < SUPERSEDED_SHARE + EXPIRED_SHARE, 2, 0)).astype(np.int8)
    return Dataset(texts, kinds, vectors, sentence, ids, created, confirmed, state, config.users, config.facts)


def chat_messages(config):
    """The messages recalls are made with: LoCoMo turns, or generated ones for --smoke."""
    return benchdata.generated_messages() if config.smoke else benchdata.chat_messages(config.datasets)


def signature(config, data):
    """What a kept bench database holds, so a later run with the same inputs can reuse it."""
    h = hashlib.sha256()
    parts = (config.users, config.facts, config.seed, config.pool, embeddings.model_name(), len(data.texts), "arrival")
    for part in parts:
        h.update(str(part).encode())
    h.update(data.ids[:1000].tobytes())
    return h.hexdigest()[:24]


# --- the bench database ----------------------------------------------------------------


def _server_params():
    params = connections["default"].get_connection_params()
    return {k: params[k] for k in ("user", "password", "host", "port") if params.get(k)}


def _connect(dbname, **kw):
    return psycopg.connect(dbname=dbname, autocommit=True, **_server_params(), **kw)


class BenchDatabase:
    """Points Django's default connection at the bench database for the duration of the run."""

    def __init__(self, name):
        self.name = name
        self.saved = None

    def create(self, fresh):
        with _connect("postgres") as admin:
            exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [self.name]).fetchone()
            if exists and fresh:
                admin.execute(f'DROP DATABASE "{self.name}" WITH (FORCE)')
                exists = None
            if not exists:
                admin.execute(f'CREATE DATABASE "{self.name}"')
        with _connect(self.name) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute("CREATE TABLE IF NOT EXISTS bench_meta (signature text NOT NULL)")

    def stored_signature(self):
        with _connect("postgres") as admin:
            if not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [self.name]).fetchone():
                return None
        with _connect(self.name) as conn:
            if not conn.execute("SELECT to_regclass('bench_meta')").fetchone()[0]:
                return None
            row = conn.execute("SELECT signature FROM bench_meta").fetchone()
            return row[0] if row else None

    def __enter__(self):
        conn = connections["default"]
        conn.close()
        conn.close_pool()  # the pool's connections are to the old database
        self.saved = conn.settings_dict["NAME"]
        conn.settings_dict["NAME"] = self.name
        return self

    def __exit__(self, *exc):
        conn = connections["default"]
        conn.close()
        conn.close_pool()
        conn.settings_dict["NAME"] = self.saved

    def drop(self):
        with _connect("postgres") as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def _fact_table_extras(conn):
    """Secondary indexes and foreign keys of the fact table, to drop before COPY and rebuild after."""
    indexes = conn.execute(
        "SELECT c.relname, pg_get_indexdef(c.oid) FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid "
        "WHERE x.indrelid = 'memoryapp_memoryfact'::regclass AND NOT x.indisprimary ORDER BY c.relname"
    ).fetchall()
    fkeys = conn.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = 'memoryapp_memoryfact'::regclass AND contype = 'f' ORDER BY conname"
    ).fetchall()
    return indexes, fkeys


def _vector_bytes(vectors):
    """pgvector's binary wire format per row: dimensions, unused, big-endian float32s."""
    header = struct.pack(">HH", vectors.shape[1], 0)
    big = vectors.astype(">f4")
    return [header + row.tobytes() for row in big]


def _micros(us):
    return EPOCH + timedelta(microseconds=int(us))


def load(config, data, progress):
    """Users, their memberships and settings (batched inserts), facts (binary COPY), then indexes."""
    timings = {}
    t0 = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    timings["migrate_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    now = clock.now()
    org = Organization.objects.create(slug="bench", name="Bench Co")
    User = get_user_model()
    users = User.objects.bulk_create(
        [User(username=f"bench-{u:06d}", password="!", date_joined=now) for u in range(config.users)],
        batch_size=5000,
    )
    user_ids = np.array([u.id for u in users], dtype=np.int64)
    Membership.objects.bulk_create([Membership(user_id=int(i), org=org) for i in user_ids], batch_size=5000)
    MemorySettings.objects.bulk_create([MemorySettings(user_id=int(i)) for i in user_ids], batch_size=5000)
    org_vectors = embeddings.embed_many([t for t, _ in ORG_FACTS])
    MemoryFact.objects.bulk_create(
        MemoryFact(
            org=org,
            scope=MemoryFact.Scope.ORG,
            text=text,
            kind=kind,
            embedding=org_vectors[i],
            embedding_model=embeddings.model_name(),
            origin=MemoryFact.Origin.ORG_ADMIN,
        )
        for i, (text, kind) in enumerate(ORG_FACTS)
    )
    timings["users_s"] = time.perf_counter() - t0
    progress(f"users: {config.users:,} with memberships and settings ({timings['users_s']:.1f}s)")

    packed = _vector_bytes(data.vectors)
    model = embeddings.model_name()
    kinds = [KIND_CODES[k] for k in data.kinds]
    n = len(data.sentence)
    with _connect(config.database) as conn:
        indexes, fkeys = _fact_table_extras(conn)
        for name, _ in fkeys:
            conn.execute(f'ALTER TABLE memoryapp_memoryfact DROP CONSTRAINT "{name}"')
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')

        info = psycopg.types.TypeInfo.fetch(conn, "vector")
        info.register(conn)

        class PackedVector(psycopg.adapt.Dumper):
            format = psycopg.pq.Format.BINARY
            oid = info.oid

            def dump(self, obj):
                return obj

        conn.adapters.register_dumper(bytes, PackedVector)
        t0 = time.perf_counter()
        step = max(1, n // 20)
        columns = ", ".join(c for c, _ in FACT_COLUMNS)
        with conn.cursor() as cur, cur.copy(f"COPY memoryapp_memoryfact ({columns}) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types([t for _, t in FACT_COLUMNS])
            # In the order facts arrive (by creation time, across users), as a live server writes them:
            # one user's facts end up on as many heap pages as they have facts, among everyone else's.
            for done, i in enumerate(np.argsort(data.created, kind="stable").tolist(), start=1):
                s = int(data.sentence[i])
                state = data.state[i]
                confirmed = _micros(data.confirmed[i])
                cp.write_row(
                    (
                        uuid.UUID(bytes=data.ids[i].tobytes()),
                        int(user_ids[i // config.facts]),
                        "personal",
                        data.texts[s],
                        kinds[s],
                        packed[s],
                        model,
                        "extracted",
                        [],
                        _micros(data.created[i]),
                        confirmed,
                        1,
                        confirmed if state == 1 else None,
                        confirmed if state == 2 else None,
                        "contradicts" if state == 1 else "",
                        "never_recalled" if state == 2 else "",
                    )
                )
                if done % step == 0 or done == n:
                    elapsed = time.perf_counter() - t0
                    progress(f"COPY facts: {done:,}/{n:,} ({done / max(elapsed, 1e-9):,.0f} rows/s)")
        timings["copy_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '1GB'")
        for name, definition in indexes:
            conn.execute(definition)
            progress(f"index built: {name} ({time.perf_counter() - t0:.1f}s)")
        for name, definition in fkeys:
            conn.execute(f'ALTER TABLE memoryapp_memoryfact ADD CONSTRAINT "{name}" {definition}')
        conn.execute("VACUUM (ANALYZE) memoryapp_memoryfact")
        timings["index_s"] = time.perf_counter() - t0
        progress(f"indexes and foreign keys rebuilt, table analysed ({timings['index_s']:.1f}s)")
        conn.execute("DELETE FROM bench_meta")
        conn.execute("INSERT INTO bench_meta (signature) VALUES (%s)", [signature(config, data)])
    return {k: round(v, 2) for k, v in timings.items()}


# --- exact reference ---------------------------------------------------------------------


@dataclass
class Expected:
    always: list  # uuid, tier 1 in recall's order (most recently confirmed first)
    vector_only: list  # uuid, tier 2 when the message has no searchable words: cosine order
    hybrid: list  # uuid, tier 2 of the hybrid: cosine and full-text fused by reciprocal rank
    near_tie: bool  # a similarity at the cut or at the floor is within float noise


def expected_selection(data, user_index, vector, message):
    """What recall must pick for one user, by brute force in bench.reference (no code shared with recall)."""
    memory = settings.MEMORY
    cap = memory["RECALL_CAP"]
    sl = data.user_slice(user_index)
    live = data.state[sl] == 0
    sentences = data.sentence[sl]
    kinds = data.kinds[sentences]
    ids = [bytes(row) for row in data.ids[sl]]
    confirmed = data.confirmed[sl]
    # Tier 1: a quota per kind, in the settings' order. Every benchmark fact has one confirmation,
    # so "most confirmed first" and "most recent first" both rank by last_confirmed_at here.
    always = []
    for kind, quota in memory["TIER1_KINDS"].items():
        members = [i for i in range(len(ids)) if live[i] and kinds[i] == KIND_CODES.index(kind)]
        always.extend(sorted(members, key=lambda i: (-confirmed[i], ids[i]))[: max(0, quota)])
    always = always[: min(cap, memory["TIER1_LIMIT"])]
    taken = set(always)
    candidates = [i for i in range(len(ids)) if live[i] and i not in taken]
    floor = embeddings.floor("recall")
    # Recall ranks the half-precision copy PostgreSQL keeps of each vector (MemoryFact.embedding_half).
    by_vector, sims = reference.vector_ranking(
        data.vectors[sentences], vector, candidates, ids, floor, precision=np.float16
    )
    texts = {i: data.texts[sentences[i]] for i in candidates}
    by_words = reference.text_ranking(texts, message, candidates, ids)
    limit = max(0, min(cap, memory["TIER2_LIMIT"], cap - len(always)))
    boundary = [sims[i] for i in by_vector[limit - 1 : limit + 1]] if limit > 0 else []
    near_tie = len(boundary) == 2 and abs(boundary[0] - boundary[1]) < TIE
    near_floor = any(abs(sims[i] - floor) < TIE for i in candidates)

    def as_uuid(order):
        return [uuid.UUID(bytes=ids[i]) for i in order]

    return Expected(
        always=as_uuid(always),
        vector_only=as_uuid(by_vector[:limit]),
        hybrid=as_uuid(reference.fuse([by_vector, by_words], ids)[:limit]),
        near_tie=near_tie or near_floor,
    )


def tiers_in_rank_order(chosen):
    """(tier-1 ids, tier-2 ids) in the order `recall.select` ranked them."""
    return [s.fact.id for s in chosen if s.tier == "always"], [s.fact.id for s in chosen if s.tier == "relevant"]


def agrees(chosen, always, relevant):
    """(same sets, same order) of `recall.select` output against the reference's tier 1 and tier 2."""
    got_always, got_relevant = tiers_in_rank_order(chosen)
    same_set = set(got_always) == set(always) and set(got_relevant) == set(relevant)
    return same_set, same_set and got_always == list(always) and got_relevant == list(relevant)


# --- measurement ---------------------------------------------------------------------------


def _percentiles(ms):
    arr = np.array(ms)
    p50, p95, p99 = np.percentile(arr, [50, 95, 99])
    return {k: round(float(v), 3) for k, v in (("p50", p50), ("p95", p95), ("p99", p99), ("mean", arr.mean()))}


BLOCK_SAMPLE = 200  # untimed selects whose buffer reads are counted


def _drop_os_cache():
    """Write back and drop the kernel's page cache, so the bench tables are next read from disk."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError as exc:
        raise BenchError(f"--cold drops the OS page cache, which needs root: {exc}") from exc


def _pick_users(config, rng, total):
    """(users of the whole recalls, users of the database-part recalls, users of the block count).

    Cold: every recall is the first for its user (all distinct). Otherwise the database part runs for
    the user the whole recall has just read, as an agent's next turn would.
    """
    if not config.cold:
        whole = rng.integers(0, config.users, total)
        return whole, whole, rng.integers(0, config.users, BLOCK_SAMPLE)
    wanted = 2 * total + BLOCK_SAMPLE
    if wanted > config.users:
        raise BenchError(f"--cold needs at least {wanted:,} users (two a recall, plus {BLOCK_SAMPLE} to count blocks)")
    picks = rng.choice(config.users, wanted, replace=False)
    return picks[:total], picks[total : 2 * total], picks[2 * total :]


_FACT_BLOCKS = """
    SELECT t.heap_blks_read, t.heap_blks_hit, t.idx_blks_read, t.idx_blks_hit
    FROM pg_statio_user_tables t WHERE t.relname = 'memoryapp_memoryfact'
"""


def _fact_blocks():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # this backend's counts, flushed when it idles
        cursor.execute(_FACT_BLOCKS)  # autocommit: a new transaction, so a fresh snapshot of the counts
        return np.array(cursor.fetchone(), dtype=np.int64)


def blocks_per_select(users, vectors, org):
    """Fact-table blocks one select reads, on average over `users`: heap and index, from disk or shared buffers."""
    before = _fact_blocks()
    for user, vector in zip(users, vectors, strict=True):
        recall.select(user, "", org=org.id, vector=vector)
    heap_read, heap_hit, idx_read, idx_hit = (_fact_blocks() - before) / len(users)
    return {
        "selects": len(users),
        "heap_read": round(heap_read, 1),
        "heap_hit": round(heap_hit, 1),
        "index_read": round(idx_read, 1),
        "index_hit": round(idx_hit, 1),
    }


def measure_recall(config, data, progress):
    """Whole recall (embedding included) and the database part (vector given), on fresh sessions."""
    rng = np.random.default_rng(config.seed + 1)
    messages = chat_messages(config)
    total = WARMUP + config.recalls
    picks = rng.choice(len(messages), total)
    whole_users, db_users, block_users = _pick_users(config, rng, total)
    texts = [messages[i] for i in picks]
    progress(f"embedding {total:,} messages one by one for the database-only runs")
    vectors = [embeddings.embed(t) for t in texts]

    org = Organization.objects.get(slug="bench")
    user_ids = list(
        get_user_model().objects.filter(username__startswith="bench-").order_by("username").values_list("id", flat=True)
    )
    AgentSession.objects.all().delete()
    created = AgentSession.objects.bulk_create(
        [
            AgentSession(user_id=user_ids[int(u)], org=org)
            for pair in zip(whole_users, db_users, strict=True)
            for u in pair
        ],
        batch_size=5000,
    )
    by_id = AgentSession.objects.select_related("user__memory_settings", "org").in_bulk([s.id for s in created])
    sessions = [by_id[s.id] for s in created]
    if config.cold:
        _drop_os_cache()
    blocks = blocks_per_select(
        [user_ids[int(u)] for u in block_users], [vectors[i % total] for i in range(len(block_users))], org
    )
    if config.cold:
        _drop_os_cache()

    full_ms, db_ms, sizes, chars, org_shown = [], [], [], [], 0
    vector_tier = {"checked": 0, "set": 0, "order": 0, "float_ties": 0, "examples": []}
    hybrid = {"checked": 0, "set": 0, "order": 0, "float_ties": 0, "recall_matches_select": 0}
    step = max(1, total // 10)
    for i in range(total):
        whole, dbonly = sessions[2 * i], sessions[2 * i + 1]
        t0 = time.perf_counter()
        r_full = recall.recall(whole, texts[i])
        t1 = time.perf_counter()
        r_db = recall.recall(dbonly, texts[i], vector=vectors[i])
        t2 = time.perf_counter()
        if i < WARMUP:
            continue
        full_ms.append((t1 - t0) * 1000)
        db_ms.append((t2 - t1) * 1000)
        sizes.append(len(r_db.facts))
        chars.append(len(r_db.block))
        org_shown += sum(1 for s in r_db.facts if s.tier == "org")
        expected = expected_selection(data, int(whole_users[i]), vectors[i], texts[i])
        # Exact check (untimed): with no searchable words tier 2 is cosine alone, which the reference
        # reproduces exactly, so sets and order must agree.
        user_id, org_id = whole.user_id, whole.org_id
        same_set, same_order = agrees(
            recall.select(user_id, "", org=org_id, vector=vectors[i]), expected.always, expected.vector_only
        )
        vector_tier["checked"] += 1
        vector_tier["set"] += same_set
        vector_tier["order"] += same_order
        if not same_order:
            if expected.near_tie:
                vector_tier["float_ties"] += 1
            elif len(vector_tier["examples"]) < 5:
                vector_tier["examples"].append({"user": int(whole_users[i]), "message": texts[i][:80]})
        # The hybrid (what agents get) against the reference's own full-text scorer: a measured rate.
        chosen = recall.select(user_id, texts[i], org=org_id, vector=vectors[i])
        same_set, same_order = agrees(chosen, expected.always, expected.hybrid)
        hybrid["checked"] += 1
        hybrid["set"] += same_set
        hybrid["order"] += same_order
        hybrid["float_ties"] += (not same_order) and expected.near_tie
        selected = {s.fact.id for s in chosen}
        hybrid["recall_matches_select"] += sum({s.fact.id for s in r.facts} == selected for r in (r_full, r_db))
        if (i + 1) % step == 0:
            progress(f"recalls: {i + 1 - WARMUP:,}/{config.recalls:,}")

    def rates(counts):
        n = counts["checked"]
        return {
            **counts,
            "set_rate": round(counts["set"] / n, 6) if n else None,
            "order_rate": round(counts["order"] / n, 6) if n else None,
        }

    return {
        "n": config.recalls,
        "warmup": WARMUP,
        "cold": config.cold,
        "blocks_per_select": blocks,
        "full_ms": _percentiles(full_ms),
        "db_ms": _percentiles(db_ms),
        "block": {
            "facts_mean": round(float(np.mean(sizes)), 2),
            "facts_max": int(max(sizes)),
            "chars_mean": round(float(np.mean(chars)), 1),
            "tokens_mean": round(float(np.mean(chars)) / 4, 1),
            "org_facts_shown": org_shown,
        },
        "agreement": {"vector_tier": rates(vector_tier), "hybrid": rates(hybrid)},
    }


def compare_vector_search(config, data, progress, k=8):
    """Per-user exact search (btree on user, exact cosine) vs HNSW with iterative scan: latency, agreement."""

    rng = np.random.default_rng(config.seed + 2)
    messages = chat_messages(config)
    n = config.vector_queries
    texts = [messages[i] for i in rng.choice(len(messages), n)]
    user_picks = rng.integers(0, config.users, n)
    vectors = embeddings.embed_many(texts)
    model = embeddings.model_name()
    dims = data.vectors.shape[1]
    live = "scope = 'personal' AND superseded_at IS NULL AND expired_at IS NULL AND embedding_model = %s"
    exact_sql = (
        f"SELECT id FROM memoryapp_memoryfact WHERE user_id = %s AND {live} ORDER BY embedding <=> %s, id LIMIT {k}"
    )
    # user_id + 0 keeps the planner off the btree, so the HNSW index has to do the work.
    hnsw_sql = (
        f"SELECT id FROM memoryapp_memoryfact WHERE user_id + 0 = %s AND {live} "
        f"ORDER BY (embedding::vector({dims})) <=> %s::vector({dims}) LIMIT {k}"
    )
    out = {"k": k, "queries": n, "facts": int(len(data.sentence))}
    with _connect(config.database) as conn:
        register_vector(conn)
        user_ids = [
            r[0] for r in conn.execute("SELECT id FROM auth_user WHERE username LIKE 'bench-%%' ORDER BY username")
        ]
        params = [(user_ids[int(u)], model, vectors[i]) for i, u in enumerate(user_picks)]

        def run(sql):
            times, rows = [], []
            for p in params[:20]:
                conn.execute(sql, p).fetchall()  # warm-up
            for p in params:
                t0 = time.perf_counter()
                got = [r[0] for r in conn.execute(sql, p).fetchall()]
                times.append((time.perf_counter() - t0) * 1000)
                rows.append(got)
            return times, rows

        exact_times, exact_rows = run(exact_sql)
        # The SQL "exact" search is itself checked against numpy (sets and order), not assumed right.
        same_set = same_order = ties = 0
        for i, u in enumerate(user_picks):
            sl = data.user_slice(int(u))
            ids = [bytes(row) for row in data.ids[sl]]
            live = [j for j in range(len(ids)) if data.state[sl][j] == 0]
            ranked, sims = reference.vector_ranking(data.vectors[data.sentence[sl]], vectors[i], live, ids, -2.0)
            want = [uuid.UUID(bytes=ids[j]) for j in ranked[:k]]
            got = exact_rows[i]
            same_set += set(got) == set(want)
            same_order += got == want
            cut = [sims[j] for j in ranked[k - 1 : k + 1]]
            ties += got != want and len(cut) == 2 and abs(cut[0] - cut[1]) < TIE
        out["exact"] = {
            "method": "btree on user + exact cosine",
            **_percentiles(exact_times),
            "agreement": round(same_set / n, 4),
            "order_agreement": round(same_order / n, 4),
            "float_ties": int(ties),
        }

        progress(f"building HNSW index over {len(data.sentence):,} facts (this takes a while)")
        t0 = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '2GB'")
        conn.execute(
            "CREATE INDEX bench_fact_hnsw ON memoryapp_memoryfact USING hnsw "
            f"((embedding::vector({dims})) vector_cosine_ops) WHERE superseded_at IS NULL AND expired_at IS NULL"
        )
        out["hnsw_build_s"] = round(time.perf_counter() - t0, 1)
        progress(f"HNSW index built in {out['hnsw_build_s']}s")
        conn.execute("ANALYZE memoryapp_memoryfact")
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        conn.execute("SET enable_sort = off")  # with the two below: only the HNSW index gives the order
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_bitmapscan = off")
        out["hnsw"] = []
        for ef in HNSW_EF_SEARCH:
            conn.execute(f"SET hnsw.ef_search = {ef}")
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + hnsw_sql, params[0]).fetchall())
            times, rows = run(hnsw_sql)
            overlap = [len(set(a) & set(b)) / max(len(a), 1) for a, b in zip(exact_rows, rows, strict=True)]
            out["hnsw"].append(
                {
                    "method": f"HNSW, iterative_scan=relaxed_order, ef_search={ef}",
                    "uses_index": bool("bench_fact_hnsw" in plan),
                    **_percentiles(times),
                    "agreement": round(float(np.mean(overlap)), 4),
                    "full_agreement_rate": round(float(np.mean([o == 1.0 for o in overlap])), 4),
                    "short_results": int(sum(len(r) < len(e) for r, e in zip(rows, exact_rows, strict=True))),
                    "max_scan_tuples": conn.execute("SHOW hnsw.max_scan_tuples").fetchone()[0],
                }
            )
            progress(f"HNSW ef_search={ef}: done")
        conn.execute("DROP INDEX bench_fact_hnsw")
    return out


def machine(config):
    info = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "note": "shared machine: other processes (tests, other helpers) were running",
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        info["cpu"] = next(
            line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")
        )
        meminfo = Path("/proc/meminfo").read_text().split()
        info["ram_gb"] = round(int(meminfo[meminfo.index("MemTotal:") + 1]) / 1024 / 1024, 1)
    except (OSError, StopIteration, ValueError):
        pass
    with _connect(config.database) as conn:
        info["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
        info["pgvector"] = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
        info["shared_buffers"] = conn.execute("SHOW shared_buffers").fetchone()[0]
    return info


def run(config, progress):
    """The whole benchmark; returns the results as a JSON-able dict."""
    started = time.perf_counter()
    data = make_dataset(config, progress)
    bench = BenchDatabase(config.database)
    wanted = signature(config, data)
    reused = config.keep and bench.stored_signature() == wanted
    bench.create(fresh=not reused)
    try:
        with bench:
            if reused:
                progress(f"reusing kept database {config.database}")
                call_command("migrate", verbosity=0, interactive=False)
                load_timings = {"reused": True}
            else:
                load_timings = load(config, data, progress)
            results = measure_recall(config, data, progress)
            vector_search = compare_vector_search(config, data, progress) if config.hnsw else None
            machine_info = machine(config)
    finally:
        if not config.keep:
            bench.drop()
    live = int((data.state == 0).sum())
    return {
        "benchmark": "bench_recall",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "smoke": config.smoke,
        "size": {
            "users": config.users,
            "facts_per_user": config.facts,
            "facts": int(len(data.sentence)),
            "live_facts": live,
            "unique_sentences": len(data.texts),
        },
        "limits": {
            "cap": settings.MEMORY["RECALL_CAP"],
            "tier1": settings.MEMORY["TIER1_LIMIT"],
            "tier2": settings.MEMORY["TIER2_LIMIT"],
            "recall_floor": embeddings.floor("recall"),
            "embedding_model": embeddings.model_name(),
        },
        "load": load_timings,
        "recall": results,
        "vector_search": vector_search,
        "goals": {
            "full_p95_le_20ms": bool(results["full_ms"]["p95"] <= 20),
            "db_p95_le_5ms": bool(results["db_ms"]["p95"] <= 5),
            "topk_agreement_100pct": bool(
                results["agreement"]["vector_tier"]["order"] + results["agreement"]["vector_tier"]["float_ties"]
                == results["agreement"]["vector_tier"]["checked"]
            ),
        },
        "machine": machine_info,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def table(result):
    """The results as a plain-text table."""
    size, rec = result["size"], result["recall"]
    lines = [
        f"bench_recall  {size['users']:,} users x {size['facts_per_user']} facts = {size['facts']:,} facts "
        f"({size['live_facts']:,} live), {rec['n']:,} recalls",
        "",
        f"{'measure':<44}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'mean ms':>9}",
    ]
    rows = [
        ("whole recall (embed + tiers + mark + log)", rec["full_ms"]),
        ("database part (vector given)", rec["db_ms"]),
    ]
    vs = result.get("vector_search")
    if vs:
        rows.append((f"top-{vs['k']} exact per user (btree + cosine)", vs["exact"]))
        for h in vs["hnsw"]:
            rows.append((f"top-{vs['k']} HNSW relaxed, ef_search={h['method'].rsplit('=', 1)[1]}", h))
    for name, p in rows:
        lines.append(f"{name:<44}{p['p50']:>9.2f}{p['p95']:>9.2f}{p['p99']:>9.2f}{p['mean']:>9.2f}")
    vt, hy, bp = rec["agreement"]["vector_tier"], rec["agreement"]["hybrid"], rec["blocks_per_select"]
    lines += [
        "",
        f"vector tier vs numpy reference: set {vt['set']}/{vt['checked']}, order {vt['order']}/{vt['checked']} "
        f"(float ties: {vt['float_ties']})",
        f"hybrid vs Python full-text + RRF reference (measured): set {hy['set']}/{hy['checked']}, "
        f"order {hy['order']}/{hy['checked']}",
        f"block: {rec['block']['facts_mean']} facts, ~{rec['block']['tokens_mean']} tokens on average",
        "fact-table blocks a select reads (of shared buffers / from outside): "
        f"heap {bp['heap_hit']} / {bp['heap_read']}, index {bp['index_hit']} / {bp['index_read']}"
        + (" (every recall the first for its user, OS page cache dropped)" if rec["cold"] else ""),
    ]
    if vs:
        for h in vs["hnsw"]:
            lines.append(
                f"{h['method']}: agreement with exact top-{vs['k']} {h['agreement']:.1%}, "
                f"all {vs['k']} right in {h['full_agreement_rate']:.1%}, short results {h['short_results']}"
            )
        lines.append(f"HNSW build: {vs['hnsw_build_s']}s")
    lines.append("goals: " + ", ".join(f"{k}={'met' if v else 'NOT met'}" for k, v in result["goals"].items()))
    return "\n".join(lines)

"""The mem0 side of `manage.py bench_peers`, run by the virtualenv that has mem0 installed (not ours).

It speaks JSON lines on stdin/stdout: one request per line, one answer per line. It builds a real
`mem0.Memory` with mem0's own pgvector store pointed at our PostgreSQL server, and an embedder that
calls our production `memoryapp.embeddings.embed` (the repository and our virtualenv's packages are
appended to sys.path, after mem0's own), or returns a vector we computed when the request carries one.
No LLM is ever called: facts are written as `Memory.add(infer=False)` writes them.
"""

import hashlib
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path


def _setup_paths():
    repo, ours = os.environ["BENCH_REPO"], os.environ["BENCH_OUR_SITE_PACKAGES"]
    sys.path.insert(0, repo)
    sys.path.append(ours)  # after mem0's packages: mem0 keeps its own versions of what both have
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryapp.settings")
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("OPENAI_API_KEY", "unused-no-llm-is-called")


class OurEmbedder:
    """mem0's embedder interface; the vector is ours: given with the request, or computed by memoryapp."""

    def __init__(self):
        self.given = None
        self.embed_fn = None

    def embed(self, text, memory_action=None):
        if self.given is not None:
            return self.given
        if self.embed_fn is None:
            # Imported on first use: this script runs in mem0's virtualenv, and Django is set up
            # only once mem0 asks for a vector we did not hand it.
            import django

            django.setup()
            from memoryapp import embeddings  # needs django.setup() first

            self.embed_fn = embeddings.embed
        return [float(x) for x in self.embed_fn(text)]


class Peer:
    def __init__(self):
        self.memories = {}
        self.embedder = OurEmbedder()

    def open(self, r):
        from mem0 import Memory  # mem0 exists only in the peer virtualenv that runs this script

        config = {
            "vector_store": {
                "provider": "pgvector",
                "config": {
                    "connection_string": r["dsn"],
                    "collection_name": r["collection"],
                    "embedding_model_dims": 384,
                    "hnsw": r["hnsw"],
                },
            },
            "llm": {"provider": "openai", "config": {"api_key": "unused-no-llm-is-called"}},
            "embedder": {"provider": "openai", "config": {"api_key": "unused", "embedding_dims": 384}},
            "history_db_path": r["history"],
        }
        memory = Memory.from_config(config)
        memory.embedding_model = self.embedder
        memory.vector_store._ensure_collection()
        if r.get("user_index"):
            with memory.vector_store._get_cursor(commit=True) as cur:
                cur.execute(
                    f'CREATE INDEX IF NOT EXISTS "{r["collection"]}_user_idx" ON "{r["collection"]}" '
                    "((payload->>'user_id'))"
                )
        self.memories[r["collection"]] = memory
        import mem0  # the peer virtualenv's package, as in open()

        return {"mem0_version": getattr(mem0, "__version__", "?")}

    def add_one(self, r):
        """One fact through the real `Memory.add(messages, infer=False)` path (checks our bulk rows' shape)."""
        memory = self.memories[r["collection"]]
        self.embedder.given = r["vector"]
        try:
            out = memory.add([{"role": "user", "content": r["text"]}], user_id=r["user"], infer=False)
        finally:
            self.embedder.given = None
        with memory.vector_store._get_cursor() as cur:
            cur.execute(f'SELECT payload FROM "{r["collection"]}" WHERE id = %s', (out["results"][0]["id"],))
            payload = cur.fetchone()[0]
        return {"payload_keys": sorted(payload)}

    def load(self, r):
        """Rows as `Memory.add(infer=False)` writes them (mem0's `_create_memory`: the same payload keys),
        written with COPY into mem0's own table: mem0's per-row INSERTs took ~9 ms a row on this machine."""
        # mem0's own helpers, from the peer virtualenv (numpy comes with mem0 there).
        import numpy as np
        from mem0.utils.lemmatization import lemmatize_for_bm25

        memory = self.memories[r["collection"]]
        vectors = np.load(r["vectors"])
        rows = json.loads(Path(r["rows"]).read_text())
        now = datetime.now(UTC).isoformat()
        with memory.vector_store._get_cursor(commit=True) as cur:
            with cur.copy(f'COPY "{r["collection"]}" (id, vector, payload) FROM STDIN') as copy:
                for row, vector in zip(rows, vectors, strict=True):
                    payload = {
                        "user_id": row["user"],
                        "role": "user",
                        "data": row["text"],
                        "hash": hashlib.md5(row["text"].encode()).hexdigest(),
                        "created_at": now,
                        "updated_at": now,
                        "text_lemmatized": lemmatize_for_bm25(row["text"]),
                    }
                    literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
                    copy.write_row((row["id"], literal, json.dumps(payload)))
            cur.execute(f'ANALYZE "{r["collection"]}"')
        return {"rows": len(rows)}

    def search(self, r):
        memory = self.memories[r["collection"]]
        self.embedder.given = r.get("vector")
        try:
            t0 = time.perf_counter()
            found = memory.search(r["query"], top_k=r["top_k"], filters={"user_id": r["user"]})
            ms = (time.perf_counter() - t0) * 1000
        finally:
            self.embedder.given = None
        return {"ms": ms, "ids": [m["id"] for m in found["results"]]}

    def explain(self, r):
        """The plan of the statement mem0's pgvector store runs for the semantic half of a search."""
        memory = self.memories[r["collection"]]
        with memory.vector_store._get_cursor() as cur:
            cur.execute(
                "EXPLAIN (ANALYZE, BUFFERS OFF, TIMING OFF, SUMMARY OFF) "
                f"SELECT id, vector <=> %s::vector AS distance, "
                f'payload FROM "{r["collection"]}" WHERE payload->>%s = %s ORDER BY distance LIMIT %s',
                (str(r["vector"]), "user_id", r["user"], r["limit"]),
            )
            return {"plan": [row[0] for row in cur.fetchall()]}

    def quit(self, r):
        return {}

    def drop(self, r):
        memory = self.memories.pop(r["collection"])
        with memory.vector_store._get_cursor(commit=True) as cur:
            cur.execute(f'DROP TABLE IF EXISTS "{r["collection"]}"')
        return {}


def main():
    _setup_paths()
    peer = Peer()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"ok": True, **getattr(peer, request["op"])(request)}
        except Exception as exc:  # reported to the parent, which stops the run with this message
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
        if request["op"] == "quit":
            break


if __name__ == "__main__":
    main()

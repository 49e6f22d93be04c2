"""bench_peers at smoke size: both systems answer the same queries, and the comparison is computed
from what each returned, not declared. Uses the real mem0 when its virtualenv can be made here; the
mem0-shaped SQL peer otherwise, and then the output says so."""

import json
import re
from io import StringIO

import psycopg
import pytest
from django.core.management import call_command

from bench import peers
from bench import recall as recallbench

pytestmark = pytest.mark.django_db(transaction=True)


def _run(tmp_path, *extra):
    path = tmp_path / "peers.json"
    out, err = StringIO(), StringIO()
    call_command("bench_peers", "--smoke", "--json", str(path), *extra, stdout=out, stderr=err)
    return json.loads(path.read_text()), out.getvalue(), err.getvalue()


def _check(result, out):
    queries = result["size"]["queries"]
    ours = result["memoryapp"]
    for mode in ("whole", "vector given"):
        assert ours[mode]["n"] == queries and 0 < ours[mode]["p50"] <= ours[mode]["p95"] <= ours[mode]["p99"]
    # Our recall agrees with the independent reference (bench.reference) on the personal tiers.
    assert ours["overlap_with_exact"] == 1.0 and ours["complete_rate"] == 1.0
    assert [r["system"] for r in result["peers"]] == list(peers.CONFIGS)
    for row in result["peers"]:
        for mode in ("whole", "vector given"):
            assert row[mode]["n"] == queries
            ratio = row[mode]["p50"] / ours[mode]["p50"]
            assert row[f"ratio_p50_{mode}"] == pytest.approx(ratio, abs=0.01)
        assert 0 < row["returned_mean"] <= result["top_k"] and 0 <= row["overlap_with_exact"] <= 1
        assert any("bench_mem0" in line for line in row["plan"])
    # The exact per-user configuration reads the user's rows through its btree, as EXPLAIN shows.
    exact = result["peers"][1]
    assert any("_user_idx" in line for line in exact["plan"])
    # Nothing lost to an approximate index: every result from the exact candidate pool, never short.
    assert exact["overlap_with_exact"] == 1.0 and exact["complete_rate"] == 1.0
    assert "memoryapp recall.select" in out and result["load_average"]["start"]
    # Both bench databases are gone.
    with psycopg.connect(dbname="postgres", autocommit=True, **recallbench._server_params()) as admin:
        left = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE 'memoryapp_peers%%'").fetchall()
    assert not [d for (d,) in left if d.endswith(("_smoke_perf", "_smoke_perf_mem0")) or "smoke" in d]


def test_smoke_with_the_sql_shape_peer_is_labelled_as_not_mem0(tmp_path):
    result, out, _ = _run(tmp_path, "--sql-peer")
    assert result["peer"] == "sql-shape"
    assert "NOT mem0" in result["mem0_version"] and "NOT mem0" in out
    _check(result, out)


def test_smoke_against_real_mem0_or_a_printed_reason(tmp_path):
    result, out, err = _run(
        tmp_path, *([] if peers.ensure_mem0(lambda m: None, install=False)[0] else ["--no-install"])
    )
    if result["peer"] == "mem0":
        assert re.fullmatch(r"\d+\.\d+\.\d+", result["mem0_version"])
        # Our bulk rows carry the payload mem0's own add(infer=False) writes.
        assert {"data", "hash", "user_id", "text_lemmatized", "created_at"} <= set(result["mem0_payload_keys_from_add"])
    else:
        assert "SKIPPING the real mem0" in err and result["peer_note"] in out
    _check(result, out)


def test_locomo_evidence_recall_for_both_systems_on_a_tiny_generated_conversation(tmp_path):
    """--locomo ranks the same observation facts through recall.select and the peer's search, and scores
    both from where each fact came from: the tiny conversation's questions are easy, so both find them."""
    from tests.bench.test_bench_commands import tiny_locomo

    result, out, _ = _run(tmp_path, "--sql-peer", "--locomo", str(tiny_locomo(tmp_path)))
    locomo = result["locomo"]
    assert locomo["questions"] == 5 and locomo["facts"] == 4 and locomo["peer"] == "sql-shape"
    # Four facts, k = 10: each asked user's few facts all come back, so every question whose evidence is
    # that user's turn is found; the adversarial one asks Ben about Ana's turn, and neither finds it.
    assert locomo["memoryapp_hit@10"] == locomo["mem0_hit@10"] == 0.8
    assert locomo["memoryapp_recall@10"] == locomo["mem0_recall@10"] == 0.8
    assert '"memoryapp_hit@10"' in out

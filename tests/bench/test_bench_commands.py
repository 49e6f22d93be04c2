"""Smoke-size runs of bench_locomo, bench_write and bench_pages: tables printed, JSON written,
nothing left behind in the database."""

import io
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from bench import loadgen
from evals import locomo as lb
from memoryapp import models, recall
from memoryapp.models import AgentSession, MemoryFact, Organization


def run(command, *args):
    out, err = io.StringIO(), io.StringIO()
    call_command(command, *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def nothing_left(prefix):
    assert not Organization.objects.filter(slug__startswith=prefix).exists()
    assert MemoryFact.objects.count() == 0
    assert AgentSession.objects.count() == 0


@pytest.mark.django_db
def test_bench_locomo_smoke(tmp_path):
    path = tmp_path / "locomo.json"
    out, err = run("bench_locomo", "--smoke", "--json", str(path))
    assert "embedding facts" in err  # progress while loading
    assert "recall@k of the evidence dia_ids" in out and "hit@k" in out
    # The printed block size is the measured one, within what ten rendered facts can weigh: each line is
    # "- [kind] text" with text of 1..200 characters, plus the header and the tags (4 characters a token).
    printed_top10 = float(re.search(r"top-10 (\d+)", out).group(1))
    frame = len(recall.PERSONAL_HEADER) + len("<user_memory>\n\n\n</user_memory>")
    shortest, longest = len("- [goal] x\n"), len("- [preference] \n") + models.FACT_MAX_CHARS
    assert (frame + 10 * shortest) / 4 <= printed_top10 <= (frame + 10 * longest) / 4
    data = json.loads(path.read_text())
    overall = data["summary"]["overall"]
    assert data["questions"] == overall["n"] == 30
    for method in ("vector", "bm25", "hybrid"):
        for k in lb.KS:
            assert 0 <= overall[f"{method}_recall@{k}"] <= overall[f"{method}_hit@{k}"] <= 1
        assert overall[f"{method}_hit@5"] <= overall[f"{method}_hit@20"]
    assert overall["vector_hit@20"] > 0.3  # the evidence is findable: a broken ranking scores ~0
    assert 0 < data["block_tokens"]["vector_top10_mean"] < data["block_tokens"]["vector_top20_mean"]
    nothing_left("bench-locomo")


def test_dia_ids_are_read_from_every_shape():
    assert lb.dia_ids("D1:3") == ["D1:3"]
    assert lb.dia_ids(["D15:3", "D15:5"]) == ["D15:3", "D15:5"]
    assert lb.dia_ids("D26:14, D26:34") == ["D26:14", "D26:34"]
    assert lb.dia_ids("D:11:26") == ["D11:26"]
    assert lb.hit_and_recall(["a", "b"], {"D1:1", "D1:2"}, {"a": {"D1:2"}}, 1) == (1.0, 0.5)
    assert lb.hit_and_recall(["b", "a"], {"D1:1", "D1:2"}, {"a": {"D1:2"}}, 1) == (0.0, 0.0)


@pytest.mark.queue
@pytest.mark.django_db(transaction=True)
def test_bench_write_smoke_through_a_real_worker(tmp_path):
    path = tmp_path / "write.json"
    out, _ = run("bench_write", "--smoke", "--json", str(path))
    assert "sessions/s per worker" in out and "store_fact without model" in out
    data = json.loads(path.read_text())
    burst = data["burst"]
    assert burst["sessions_done"] == burst["sessions"] == 6  # every session went through the worker
    assert burst["facts_created"] > 0 and burst["sessions_per_second_per_worker"] > 0
    assert data["latency_one_at_a_time"]["n"] == 3 and data["latency_one_at_a_time"]["p95"] > 0
    s = data["store_fact"]
    assert s["facts"] == 20
    assert s["max_model_calls_for_one_fact"] <= 1
    assert s["model_calls_when_no_neighbour"] == 0
    assert s["model_calls_when_neighbour"] == s["facts_with_neighbour"]
    assert {"lock", "neighbours", "events"} <= set(s["sql_mean_ms"])
    nothing_left("bench-write")
    assert not get_user_model().objects.exists()


@pytest.mark.django_db(transaction=True)
def test_bench_pages_smoke_under_gunicorn(tmp_path):
    path = tmp_path / "pages.json"
    out, _ = run("bench_pages", "--smoke", "--json", str(path))
    assert "x ceiling" in out
    data = json.loads(path.read_text())
    pages = {r["page"] for r in data["runs"]}
    assert pages == {
        "ceiling (healthz)",
        "My memory (20 facts)",
        "fact provenance (console)",
        "org memory (50 org facts)",
        "conversation (40 turns)",
        "recall API (refresh)",
    }
    assert len(data["runs"]) == len(pages) * 2
    for r in data["runs"]:
        assert r["errors"] == 0 and r["requests"] > 0 and r["p50"] <= r["p99"]
    # Each page's ratio is its own throughput over the trivial view's at the same concurrency, and the
    # trivial view really is the ceiling: the recall API (an embedding and two statements) is slower.
    ceiling = {r["clients"]: r["rps"] for r in data["runs"] if r["page"] == "ceiling (healthz)"}
    for r in data["runs"]:
        assert r["ratio_to_ceiling"] == pytest.approx(r["rps"] / ceiling[r["clients"]], abs=1e-3)
    recall_api = {r["clients"]: r["rps"] for r in data["runs"] if r["page"] == "recall API (refresh)"}
    assert all(recall_api[c] < ceiling[c] for c in ceiling)
    nothing_left("bench-pages")


def test_python_load_generator_counts_requests_and_errors(live_server):
    ok = loadgen.run(live_server.url + "/healthz", clients=2, seconds=0.5)
    assert ok["requests"] > 0 and ok["errors"] == 0 and ok["p50"] <= ok["p99"]
    missing = loadgen.run(live_server.url + "/no-such-page", clients=1, seconds=0.3)
    assert missing["requests"] == 0 and missing["errors"] > 0

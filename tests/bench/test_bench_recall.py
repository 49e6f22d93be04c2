"""bench_recall at smoke size: it runs, checks itself against numpy, and leaves the app's data alone."""

import json
from io import StringIO

import numpy as np
import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection

from bench import common as benchcommon
from bench import data as benchdata
from bench import recall as recallbench
from memoryapp.models import AgentSession, MemoryFact

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.slow
def test_smoke_run_writes_the_numbers_and_touches_nothing_of_the_app(tmp_path, make_user):
    bystander = make_user("bystander")
    app_db = connection.settings_dict["NAME"]
    out, err, path = StringIO(), StringIO(), tmp_path / "recall.json"

    call_command("bench_recall", "--smoke", "--json", str(path), stdout=out, stderr=err)

    result = json.loads(path.read_text())
    for part in ("full_ms", "db_ms"):
        assert set(result["recall"][part]) == {"p50", "p95", "p99", "mean"}
        assert 0 < result["recall"][part]["p50"] <= result["recall"][part]["p95"] <= result["recall"][part]["p99"]
    # Agreement is counted by the benchmark against bench.reference (numpy cosine, its own full-text
    # scorer), not declared: every check ran, and the vector tier agreed exactly (sets and order).
    vector_tier = result["recall"]["agreement"]["vector_tier"]
    assert vector_tier["checked"] == result["recall"]["n"]
    assert vector_tier["order"] + vector_tier["float_ties"] == vector_tier["checked"]
    assert vector_tier["set"] >= vector_tier["order"]
    hybrid = result["recall"]["agreement"]["hybrid"]
    assert hybrid["checked"] == result["recall"]["n"] and 0 <= hybrid["order"] <= hybrid["set"] <= hybrid["checked"]
    # recall() and select() pick the same facts, for the whole recall and the database part alike.
    assert hybrid["recall_matches_select"] == 2 * result["recall"]["n"]
    assert result["recall"]["block"]["facts_max"] <= result["limits"]["cap"]
    blocks = result["recall"]["blocks_per_select"]
    assert blocks["selects"] == recallbench.BLOCK_SAMPLE and blocks["index_read"] + blocks["index_hit"] > 0
    assert "fact-table blocks a select reads" in out.getvalue()
    search = result["vector_search"]
    assert search["exact"]["order_agreement"] * search["queries"] + search["exact"]["float_ties"] == search["queries"]
    assert search["exact"]["p95"] > 0
    assert [h["uses_index"] for h in search["hnsw"]] == [True, True]
    assert all(0 <= h["agreement"] <= 1 for h in search["hnsw"])
    assert set(result["goals"]) == {"full_p95_le_20ms", "db_p95_le_5ms", "topk_agreement_100pct"}
    assert result["size"]["facts"] == result["size"]["users"] * result["size"]["facts_per_user"]
    assert result["machine"]["postgres"] and result["machine"]["pgvector"]
    assert "whole recall" in out.getvalue() and "COPY facts" in err.getvalue()

    # The app's own database is untouched, and the bench database is gone.
    assert connection.settings_dict["NAME"] == app_db
    assert list(get_user_model().objects.all()) == [bystander]
    assert not MemoryFact.objects.exists() and not AgentSession.objects.exists()
    params = recallbench._server_params()
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        bench_db = recallbench.Config.from_options(
            {"smoke": True, "users": 1, "facts": 1, "recalls": 1, "vector_queries": 1, "seed": 1, "datasets": "."}
        ).database
        assert not admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [bench_db]).fetchone()


def test_persona_sentences_are_told_in_the_third_person_with_kinds_by_rule():
    assert benchdata.third_person("I have two dogs.") == "The user has two dogs."
    assert benchdata.third_person("I'm a vegan and I love hummus.") == "The user is a vegan and they love hummus."
    assert benchdata.third_person("My favorite color is yellow.") == "The user's favorite color is yellow."
    assert benchdata.third_person("I don't like cats.") == "The user does not like cats."
    assert benchdata.third_person("The sky is blue.") is None  # not about the user
    assert benchdata.kind_of("The user is allergic to peanuts.") == "constraint"
    assert benchdata.kind_of("The user wants to climb Everest.") == "goal"
    assert benchdata.kind_of("The user loves jazz.") == "preference"
    assert benchdata.kind_of("The user works as a nurse.") == "profile"


def test_reading_the_personas_reports_progress_over_every_sentence(tmp_path):
    # A personas file shaped like MSC's (written here: tests never read ../shared), with a repeat
    # and a sentence that is not about the speaker.
    folder = tmp_path / "locomo"
    folder.mkdir()
    personas = {
        "train": [{"Speaker 1": ["I have two dogs.", "The sky is blue."], "Speaker 2": ["I love jazz."]}],
        "valid": [{"Speaker 1": ["i have two dogs."], "Speaker 2": []}],
        "test": [{"Speaker 1": ["I work as a nurse."]}],
    }
    (folder / "msc_personas_all.json").write_text(json.dumps(personas))
    lines = StringIO()

    facts = benchdata.persona_facts(tmp_path, progress=lambda label, n: benchcommon.Progress(label, n, lines, every=0))

    texts = [text for text, _ in facts]
    assert texts == ["The user has two dogs.", "The user loves jazz.", "The user works as a nurse."]
    shown = lines.getvalue().splitlines()
    assert shown and shown[-1].startswith("persona sentences rewritten and validated: 5/5")


def test_the_exact_reference_is_the_documented_selection():
    """The reference picks tier 1 by recency and tier 2 by similarity above the floor, or fused with words."""
    import numpy as np

    vectors = np.eye(4, dtype=np.float32)
    data = recallbench.Dataset(
        texts=["a", "b", "The user grows tomatoes.", "d"],
        kinds=np.array([1, 1, 2, 2], dtype=np.int8),  # profile, profile, preference, preference
        vectors=vectors,
        sentence=np.array([0, 1, 2, 3], dtype=np.int32),
        ids=np.arange(64, dtype=np.uint8).reshape(4, 16),
        created=np.array([1, 2, 3, 4]),
        confirmed=np.array([10, 20, 30, 40]),
        state=np.array([0, 0, 0, 1], dtype=np.int8),  # the last one is superseded
        users=1,
        per_user=4,
    )
    message = np.array([0, 0, 1, 1], dtype=np.float32) / 2**0.5
    expected = recallbench.expected_selection(data, 0, message, "")
    assert [a.bytes for a in expected.always] == [bytes(data.ids[1]), bytes(data.ids[0])]
    assert [r.bytes for r in expected.vector_only] == [bytes(data.ids[2])] and not expected.near_tie
    assert expected.hybrid == expected.vector_only  # no words: the hybrid is the vector ranking


def test_reference_full_text_rank_matches_postgres_on_stemmed_words(db):
    """The Python scorer gives ts_rank's value for an OR query, on sentences with plurals, stop words
    and a lexeme met more than once (where ts_rank and a plain count of matches part)."""
    from bench import reference

    sentences = [
        "The user loves hiking in the mountains and hikes every weekend.",
        "The user's favourite cities are Lisbon and Porto.",
        "The user has two dogs and a cat.",
        "The user hikes with dogs, walks dogs daily and trains dogs for hiking trips in cities.",
        "The user plays chess.",
    ]
    message = "Do you like hiking with your dogs in big cities?"
    query = " | ".join(reference.query_lexemes(message))
    got, expected = [], []
    with connection.cursor() as cur:
        for text in sentences:
            cur.execute("SELECT ts_rank(to_tsvector('english', %s), to_tsquery('english', %s))", [text, query])
            expected.append(cur.fetchone()[0])
            got.append(reference.text_rank(text, reference.query_lexemes(message)))
    assert got == pytest.approx(expected, rel=1e-5)
    assert got[-1] == 0 and got[3] > got[0] > got[2] > 0  # three dogs, two hikes, one city: each counts less


def test_reference_fusion_is_reciprocal_rank_with_the_papers_constant():
    from bench import reference

    ids = ["a", "b", "c"]
    # "b" is second in both rankings: 2/62 beats the 1/61 that "a" and "c" each get once.
    fused = reference.fuse([[0, 1], [2, 1]], ids)
    assert fused[0] == 1 and set(fused[1:]) == {0, 2}
    assert fused[1:] == [0, 2]  # equal scores: ties by id
    assert reference.agreement(["x", "y"], ["y", "x"]) == (True, False)


def test_cold_recalls_are_each_the_first_for_their_user_and_need_enough_users():
    config = recallbench.Config(
        users=1000,
        facts=1,
        recalls=1,
        smoke=False,
        datasets=".",
        database="x",
        keep=False,
        hnsw=False,
        vector_queries=1,
        seed=1,
        cold=True,
    )
    whole, db_part, counted = recallbench._pick_users(config, np.random.default_rng(0), 300)
    picked = [*whole, *db_part, *counted]
    assert len(picked) == len(set(picked)) == 2 * 300 + recallbench.BLOCK_SAMPLE

    with pytest.raises(recallbench.BenchError, match="--cold needs at least 1,002 users"):
        recallbench._pick_users(config, np.random.default_rng(0), 401)

"""Issue 2: the database, the schema's own guarantees, the embedder and the configuration."""

import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import psutil
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, connection, transaction

from memoryapp import db, embeddings
from memoryapp.models import MemoryFact
from memoryapp.pinned import sha256_of

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def run_manage(*args, env=None, timeout=120):
    full_env = {**os.environ, **(env or {})}
    full_env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # set by the browser fixture for its own thread
    return subprocess.run(
        [PY, "manage.py", *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.django_db
def test_database_has_pgvector_0_8_or_newer():
    with connection.cursor() as cur:
        cur.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        (version,) = cur.fetchone()
    assert tuple(int(p) for p in version.split(".")[:2]) >= (0, 8)


def _fact(owner, **overrides):
    fields = {"user": owner, "text": "The user's editor is Neovim.", "kind": "profile", "embedding_model": "m"}
    fields.update(overrides)
    return MemoryFact(**fields)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "overrides",
    [
        {"text": "x" * 201},
        {"text": ""},
        {"kind": "admin"},
        {"scope": "org", "user": None},  # an org fact with no organisation
    ],
    ids=["201-characters", "empty", "kind-admin", "org-without-org"],
)
def test_database_itself_rejects_malformed_facts(make_user, overrides):
    user = make_user("ann")
    with pytest.raises(IntegrityError), transaction.atomic():
        # save() skips model validation: only the database's constraints stand in the way.
        _fact(user, **overrides).save()
    assert MemoryFact.objects.count() == 0


@pytest.mark.django_db
def test_database_accepts_a_200_character_fact(make_user):
    _fact(make_user("ann"), text="y" * 200).save()
    assert MemoryFact.objects.count() == 1


@pytest.mark.django_db
def test_vectors_of_another_model_are_never_compared(make_user):
    user = make_user("ann")
    vector = embeddings.embed("The user's editor is Neovim.")
    _fact(user, embedding=vector, embedding_model=embeddings.model_name()).save()
    _fact(user, text="The user's editor is Emacs.", embedding=vector, embedding_model="another-model").save()
    found = list(MemoryFact.objects.for_user(user).nearest(vector, 0.0).values_list("text", flat=True))
    assert found == ["The user's editor is Neovim."]


def test_embedder_gives_the_same_vector_in_another_process():
    text = "The user's company must stay on-prem by contract."
    here = embeddings.embed(text)
    code = (
        "import json, django; django.setup(); from memoryapp import embeddings; "
        f"print(json.dumps(embeddings.embed({text!r}).tolist()))"
    )
    out = subprocess.run(
        [PY, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "memoryapp.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    there = np.array(json.loads(out.stdout.strip().splitlines()[-1]), dtype=np.float32)
    assert np.allclose(here, there, atol=1e-6)


def test_rewordings_of_one_fact_are_close_and_unrelated_facts_are_not():
    a, b, c = embeddings.embed_many(
        [
            "The user's code editor is Neovim.",
            "The user uses Neovim as their text editor.",
            "The user has two dogs.",
        ]
    )
    assert float(a @ b) > 0.8
    assert float(a @ c) < 0.5
    assert abs(float(np.linalg.norm(a)) - 1) < 1e-5


def _reference():
    """Vectors computed once with sentence-transformers' all-MiniLM-L6-v2 (fp32)."""
    reference = json.loads((Path(__file__).parent / "data" / "minilm_reference.json").read_text())
    texts = [r["text"] for r in reference["sentences"]]
    vectors = np.array([r["vector"] for r in reference["sentences"]], dtype=np.float32)
    return texts, vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_unquantized_embedder_matches_sentence_transformers_reference():
    texts, expected = _reference()
    ours = embeddings.embed_many(texts, model=embeddings.minilm())
    for text, vector, reference in zip(texts, ours, expected, strict=True):
        assert float(vector @ reference) >= 0.999, text


def test_quantized_embedder_stays_close_to_the_reference_and_ranks_as_it_does():
    texts, expected = _reference()
    ours = embeddings.QuantizedMiniLM().embed(texts)
    for text, vector, reference in zip(texts, ours, expected, strict=True):
        assert float(vector @ reference) >= 0.985, text  # 0.9936 at the lowest of these five
    # What recall needs: a question finds the fact it is about first.
    model = embeddings.QuantizedMiniLM()
    facts = model.embed(texts[:2] + texts[3:])  # every reference sentence but the question
    questions = ["Can we put the uploads in S3?", "Which editor should I set up?", "Is it fine to ship this on Friday?"]
    assert list(np.argmax(model.embed(questions) @ facts.T, axis=1)) == [0, 1, 2]


def test_the_quantized_model_is_built_once_and_a_corrupt_copy_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setattr(db, "DATA_DIR", tmp_path)
    path = embeddings.quantized_model_file()
    assert path.parent == tmp_path / "models"
    assert sha256_of(path) == embeddings.QINT8_MODEL_SHA256
    built = path.stat().st_mtime_ns
    assert embeddings.quantized_model_file().stat().st_mtime_ns == built  # found, not rebuilt
    path.write_bytes(b"not a model")
    assert sha256_of(embeddings.quantized_model_file()) == embeddings.QINT8_MODEL_SHA256
    assert [p.name for p in (tmp_path / "models").iterdir() if p.suffix == ".onnx"] == [path.name]


def test_a_quantized_build_that_differs_from_its_pin_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(db, "DATA_DIR", tmp_path)
    monkeypatch.setattr(embeddings, "QINT8_MODEL_SHA256", "0" * 64)
    with pytest.raises(embeddings.EmbeddingError, match="EMBEDDING_BACKEND=minilm"):
        embeddings.quantized_model_file()
    assert not [p for p in (tmp_path / "models").iterdir() if p.suffix != ".lock"]  # nothing half-built left


def test_pinned_model_files_are_verified(monkeypatch):
    monkeypatch.setattr(embeddings, "MINILM_MODEL_SHA256", "0" * 64)
    with pytest.raises(embeddings.EmbeddingError, match="sha256"):
        embeddings.MiniLM()


class _Server:
    """A psycopg connection whose pg_available_extensions answers `row` for pgvector."""

    def __init__(self, row):
        self.row = row

    def __call__(self, **kwargs):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql):
        assert "pg_available_extensions" in sql and "'vector'" in sql
        return self

    def fetchone(self):
        return self.row


@pytest.mark.parametrize(
    ("row", "says"),
    [(None, "does not have the pgvector extension installed"), (("0.7.4",), "has pgvector 0.7.4")],
)
def test_database_url_without_pgvector_0_8_stops_with_a_clear_message(monkeypatch, row, says):
    monkeypatch.setattr(db.psycopg, "connect", _Server(row))
    with pytest.raises(ImproperlyConfigured) as stopped:
        db.check_pgvector("postgresql://postgres@db.example:5432/app")
    message = str(stopped.value)
    assert says in message and "pgvector >= 0.8" in message and "DATABASE_URL" in message


def test_database_url_with_pgvector_0_8_passes_the_check(monkeypatch):
    monkeypatch.setattr(db.psycopg, "connect", _Server(("0.8.0",)))
    db.check_pgvector("postgresql://postgres@db.example:5432/app")  # no exception


def test_an_unreachable_database_url_stops_with_a_clear_message():
    # Nothing listens on port 9 (discard) here: the connection is refused, and the message says which setting.
    with pytest.raises(ImproperlyConfigured, match="Cannot connect to the database at DATABASE_URL"):
        db.check_pgvector("postgresql://postgres@127.0.0.1:9/postgres")


def test_production_settings_pass_check_deploy():
    env = {
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "HTTPS": "1",
        "ALLOWED_HOSTS": "memory.example.com",
    }
    result = run_manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_a_production_install_serves_without_the_lab_and_a_developer_has_its_commands():
    """LAB_APPS=0 (scripts/run; the default where the dev requirements are not installed): the
    benchmarks and evaluations are not loaded, so their commands do not exist; with them, they do."""
    production = run_manage("help", "--commands", env={"LAB_APPS": "0"})
    assert production.returncode == 0, production.stderr
    commands = production.stdout.split()
    assert "seed_demo" in commands and "load_test" not in commands and "eval_scenarios" not in commands
    lab = run_manage("help", "--commands", env={"LAB_APPS": "1"})
    assert {"load_test", "bench_pages", "drill", "eval_scenarios"} <= set(lab.stdout.split())


@pytest.mark.slow
def test_two_commands_starting_at_once_share_one_embedded_server():
    data_dir = tempfile.mkdtemp(prefix="memoryapp-db-")
    os.chmod(data_dir, 0o755)
    code = "from memoryapp import db; print(db.embedded_database_url())"
    env = {**os.environ, "MEMORYAPP_DATA_DIR": data_dir}
    procs = [
        subprocess.Popen([PY, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        outputs = [p.communicate(timeout=180) for p in procs]
        assert all(p.returncode == 0 for p in procs), outputs
        urls = {out.strip().splitlines()[-1] for out, _ in outputs}
        assert len(urls) == 1
        postmasters = [
            p
            for p in psutil.process_iter(["name", "cmdline"])
            if p.info["name"] == "postgres"
            and p.info["cmdline"]
            and "-D" in p.info["cmdline"]
            and str(Path(data_dir) / "pg") in " ".join(p.info["cmdline"])
        ]
        assert len(postmasters) == 1
    finally:
        for p in psutil.process_iter(["name", "cmdline"]):
            if p.info["name"] == "postgres" and p.info["cmdline"] and data_dir in " ".join(p.info["cmdline"]):
                p.terminate()


@pytest.mark.django_db
def test_admin_never_offers_to_edit_an_embedding_or_a_superseded_fact(client, make_user):
    staff = make_user("root", is_staff=True, is_superuser=True)
    owner = make_user("ann")
    live = _fact(owner, embedding=embeddings.embed("a"), embedding_model=embeddings.model_name())
    live.save()
    old = _fact(owner, text="The user's editor is Vim.", superseded_by=live)
    old.superseded_at = live.created_at
    old.save()
    client.force_login(staff)
    live_page = client.get(f"/admin/memoryapp/memoryfact/{live.id}/change/").content.decode()
    old_page = client.get(f"/admin/memoryapp/memoryfact/{old.id}/change/").content.decode()
    # Memory is read-only in the admin: corrections go through the domain (validation, history, re-embedding).
    assert "editor is Neovim" in live_page and 'name="text"' not in live_page and 'name="embedding"' not in live_page
    assert 'name="text"' not in old_page and 'name="kind"' not in old_page
    assert client.get("/admin/memoryapp/memoryfact/add/").status_code == 403

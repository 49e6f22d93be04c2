"""/api/docs introduces the API (what it is, the bearer key, scopes, the error shape) and shows a real,
valid example for every request body instead of strings Swagger UI makes up from a pattern."""

import re

import jsonschema
import pytest

pytestmark = pytest.mark.django_db

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _spec(client):
    response = client.get("/api/openapi.json")
    assert response.status_code == 200
    return response.json()


def _resolve(spec, schema):
    """The schema with every $ref replaced by what it points to (the spec's schemas are not recursive)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return _resolve(spec, spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
        return {k: _resolve(spec, v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_resolve(spec, v) for v in schema]
    return schema


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_the_docs_introduce_the_api_its_key_scopes_and_errors(client):
    info = _spec(client)["info"]
    text = info["description"]
    assert "Authorization: Bearer mem_" in text
    assert all(f"`{scope}`" in text for scope in ("read", "write", "erase", "portal"))
    assert '{"error": {"code"' in text and '"message"' in text and '"field"' in text


def test_every_operation_declares_the_bearer_key(client):
    spec = _spec(client)
    schemes = spec["components"]["securitySchemes"]
    bearer = [name for name, s in schemes.items() if s["type"] == "http" and s["scheme"] == "bearer"]
    assert bearer
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            assert any(set(r) <= set(bearer) and r for r in operation.get("security", [])), (method, path)


def test_every_request_body_has_a_realistic_example_that_the_schema_accepts(client):
    spec = _spec(client)
    bodies = [
        (method, path, _resolve(spec, op["requestBody"]["content"]["application/json"]["schema"]))
        for path, item in spec["paths"].items()
        for method, op in item.items()
        if "requestBody" in op
    ]
    assert len(bodies) >= 6
    for method, path, schema in bodies:
        examples = schema.get("examples")
        assert examples, f"{method} {path} has no example"
        for example in examples:
            jsonschema.validate(example, schema)
            for text in _strings(example):
                assert not CONTROL.search(text), (method, path, text)
                # Words or an id, not Swagger UI's made-up "{z{{~|}y|": letters and spaces dominate.
                assert sum(c.isalnum() or c in " -.,;'?" for c in text) >= 0.9 * len(text), (method, path, text)


def test_the_schema_is_built_once_and_served_the_same_every_time(client, monkeypatch):
    """Building it costs 0.12 s of CPU: a flood of /api/openapi.json must not rebuild it per request."""
    from ninja import main

    built = []
    real = main.get_schema
    monkeypatch.setattr(main, "get_schema", lambda **kw: built.append(kw) or real(**kw))
    first = _spec(client)
    assert _spec(client) == first and _spec(client) == first
    assert len(built) <= 1  # none if an earlier test in this process built it
    assert "/api/v1/recall" in first["paths"]

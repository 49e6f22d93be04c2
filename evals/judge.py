"""QA accuracy on LoCoMo with an LLM judge: a model answers from the memory block, another call grades it.

Only runs when a model is configured (an Anthropic key, or an OpenAI-compatible endpoint); the
benchmark says so and leaves the column out otherwise. Both calls go through the production
provider modules (`backends.anthropic.complete`, `backends.openai.complete`).
"""

import contextlib
import json

from memoryapp import backends
from memoryapp.backends import ModelUnavailable, Usage
from memoryapp.backends import anthropic as anthropic_backend
from memoryapp.backends import openai as openai_backend
from memoryapp.backends.openai import unfence

ANSWER_SYSTEM = """You answer a question about a person using only the memory notes given with it. \
Answer in a short phrase. If the notes do not contain the answer, answer exactly: unknown."""

JUDGE_SYSTEM = """You grade an answer to a question against the gold answer. The answer is correct \
when it states the same thing as the gold answer, even in other words or with more detail; dates \
are correct when they name the same day, month or year the gold answer names. Answer with JSON \
only: {"correct": true} or {"correct": false}."""

JUDGE_SCHEMA = {
    "type": "object",
    "properties": {"correct": {"type": "boolean"}},
    "required": ["correct"],
    "additionalProperties": False,
}
ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def available():
    """The provider a judge can use ('anthropic' or 'openai'), or None when no model is configured."""
    return next((name for name in ("anthropic", "openai") if backends.configured(name)), None)


def _ask(provider, system, content, name, schema):
    if provider == "anthropic":
        return anthropic_backend.complete(system, content, max_tokens=200)
    return openai_backend.complete(system, content, name, schema, max_tokens=200)


def grade(provider, question, gold, block, usage):
    """(answer, correct) for one question; the memory block is all the answering model sees."""
    notes = block or "(no notes)"
    answered = _ask(provider, ANSWER_SYSTEM, f"Memory notes:\n{notes}\n\nQuestion: {question}", "answer", ANSWER_SCHEMA)
    usage.add(answered.usage)
    answer = answered.text.strip()
    if provider == "openai" and answer.startswith("{"):
        with contextlib.suppress(ValueError):
            answer = str(json.loads(answer).get("answer", answer))
    judged = _ask(
        provider,
        JUDGE_SYSTEM,
        f"Question: {question}\nGold answer: {gold}\nAnswer: {answer}",
        "grade",
        JUDGE_SCHEMA,
    )
    usage.add(judged.usage)
    try:
        correct = bool(json.loads(unfence(judged.text)).get("correct"))
    except (ValueError, AttributeError):
        correct = False  # an unreadable grade counts against us, never for us
    return answer, correct


def accuracy(provider, items, progress=None):
    """Share of (question, gold, block) items judged correct, and the tokens and cost spent."""
    usage = Usage()
    correct, failed = 0, 0
    for question, gold, block in items:
        try:
            _, ok = grade(provider, question, gold, block, usage)
        except ModelUnavailable:
            failed += 1
            ok = False
        correct += ok
        if progress:
            progress.advance()
    n = len(items)
    return {
        "provider": provider,
        "n": n,
        "accuracy": round(correct / n, 4) if n else None,
        "model_failures": failed,
        "input_tokens": usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": float(usage.cost_usd),
    }

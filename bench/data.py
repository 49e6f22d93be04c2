"""Realistic synthetic memory for benchmarks: persona sentences from MSC, told in the third person."""

import json
import re
from pathlib import Path

from bench.common import DEFAULT_DATASETS
from memoryapp.backends.phrasing import third_person  # the one rewriter

PERSONAS = "locomo/msc_personas_all.json"
CONVERSATIONS = "locomo/locomo10.json"

_CONSTRAINT = re.compile(
    r"\b(allerg\w*|vegan|vegetarian|gluten|lactose|kosher|halal|diabetic|sober|wheelchair|blind|deaf|"
    r"(do|does|can) ?n[o']t (eat|drink|drive|walk|fly|swim|stand|use)|never (eat|drink)|"
    r"cannot|can't|afraid of|phobia|disab\w+|not allowed|avoid\w*)\b",
    re.IGNORECASE,
)
_GOAL = re.compile(
    r"\b(wants?|wish(es)?|hopes? to|plans? to|planning|dreams?|going to|would like to|trying to|saving (up )?for|goal|"
    r"aspires?|someday|some day|one day|intends? to|aims? to)\b",
    re.IGNORECASE,
)
_PREFERENCE = re.compile(
    r"\b(likes?|loves?|enjoys?|prefers?|favou?rite|hates?|dislikes?|fan of|into|adores?|can't stand|passionate)\b",
    re.IGNORECASE,
)


def kind_of(sentence):
    """A kind by rule: constraint (must be respected), goal, preference, else profile."""
    if _CONSTRAINT.search(sentence):
        return "constraint"
    if _GOAL.search(sentence):
        return "goal"
    if _PREFERENCE.search(sentence):
        return "preference"
    return "profile"


def persona_facts(datasets=DEFAULT_DATASETS, limit=None, progress=None):
    """Unique third-person facts [(text, kind)] from every MSC persona, in a stable order.

    `progress` is a factory `(label, total)` like `bench.common.Progress`: rewriting runs the write
    path's validator (a MiniLM pass) on each of ~65,000 sentences, minutes on a small machine."""
    path = Path(datasets) / PERSONAS
    data = json.loads(path.read_text())
    sentences = [
        sentence
        for split in ("train", "valid", "test")
        for persona in data.get(split, [])
        for speaker in ("Speaker 1", "Speaker 2")
        for sentence in persona.get(speaker, [])
    ]
    shown = progress("persona sentences rewritten and validated", len(sentences)) if progress else None
    seen, facts = set(), []
    for sentence in sentences:
        if shown:
            shown.advance()
        text = third_person(sentence)
        if text is None or text.casefold() in seen:
            continue
        seen.add(text.casefold())
        facts.append((text, kind_of(text)))
        if limit and len(facts) >= limit:
            return facts
    return facts


def chat_messages(datasets=DEFAULT_DATASETS):
    """Real chat messages (LoCoMo dialogue turns) to recall against, in a stable order."""
    data = json.loads((Path(datasets) / CONVERSATIONS).read_text())
    messages = []
    for sample in data:
        conversation = sample["conversation"]
        for key in sorted(k for k in conversation if re.fullmatch(r"session_\d+", k)):
            for turn in conversation[key]:
                text = turn.get("text", "").strip()
                if len(text) >= 20:
                    messages.append(text)
    return messages


# --- generated data for --smoke runs (tests never read the datasets folder) ----------------

_SUBJECTS = (
    "Lisbon Porto Berlin Madrid Oslo Dublin Toronto Austin Denver Kyoto Nairobi Lyon jazz chess tennis sushi "
    "gardening climbing cycling baking painting poetry astronomy sailing pottery photography knitting surfing "
    "Python Rust Go Kotlin Elixir Neovim Emacs podcasts opera tomatoes beekeeping birdwatching skiing yoga"
).split()
_GENERATED = (
    ("The user loves {} and talks about it often.", "preference"),
    ("The user has a strong dislike of {}.", "preference"),
    ("The user wants to get much better at {} next year.", "goal"),
    ("The user once lived near a club devoted to {}.", "profile"),
    ("The user cannot stand long discussions about {}.", "constraint"),
    ("The user's sister teaches {} on weekends.", "profile"),
    ("The user is saving money for a trip involving {}.", "goal"),
    ("The user is allergic to anything near {}.", "constraint"),
    ("The user reads a blog about {} every morning.", "profile"),
    ("The user's favourite hobby this month is {}.", "preference"),
)
_QUESTIONS = (
    "Have you ever tried {} before?",
    "I was thinking about {} and my sister yesterday.",
    "What do you remember about my plans for {}?",
    "Could you suggest a weekend around {}?",
    "My friend keeps talking about {}, any thoughts?",
)


def generated_facts(limit):
    """`limit` distinct generated facts [(text, kind)] (templates x subjects), in a stable order."""
    out = [(t.format(s), k) for s in _SUBJECTS for t, k in _GENERATED]
    if limit > len(out):
        raise ValueError(f"only {len(out)} generated facts")
    return out[:limit]


def generated_messages():
    """Chat messages built from the same subjects, for --smoke runs."""
    return [q.format(s) for s in _SUBJECTS for q in _QUESTIONS]

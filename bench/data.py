"""Realistic synthetic memory for benchmarks: persona sentences from MSC, told in the third person."""

import json
import re
from pathlib import Path

from django.conf import settings

from memoryapp.backends.phrasing import third_person  # the one rewriter

DEFAULT_DATASETS = Path(settings.BASE_DIR).parent / "shared" / "datasets"
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


def persona_facts(datasets=DEFAULT_DATASETS, limit=None):
    """Unique third-person facts [(text, kind)] from every MSC persona, in a stable order."""
    path = Path(datasets) / PERSONAS
    data = json.loads(path.read_text())
    seen, facts = set(), []
    for split in ("train", "valid", "test"):
        for persona in data.get(split, []):
            for speaker in ("Speaker 1", "Speaker 2"):
                for sentence in persona.get(speaker, []):
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

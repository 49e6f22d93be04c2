"""Realistic synthetic memory for benchmarks: persona sentences from MSC, told in the third person."""

import json
import re
from pathlib import Path

from django.conf import settings

from memoryapp import validation

DEFAULT_DATASETS = Path(settings.BASE_DIR).parent / "shared" / "datasets"
PERSONAS = "locomo/msc_personas_all.json"
CONVERSATIONS = "locomo/locomo10.json"

# Verbs after "I" that stay as they are in the third person (past tense, modals).
_UNCHANGED = set(
    """was had did could would should might must will can may shall used got went grew met made became took saw won
    lost left ran bought began came drove ate fell felt found gave knew spent taught told thought wrote sold broke
    built caught chose drank flew forgot held kept led paid put quit rode said sang sat slept spoke stood swam threw
    understood wore read hurt let set cut cannot can't won't wouldn't couldn't didn't wasn't shouldn't""".split()
)
_IRREGULAR = {
    "am": "is",
    "have": "has",
    "do": "does",
    "go": "goes",
    "don't": "doesn't",
    "haven't": "hasn't",
    "'m": "is",
    "'ve": "has",
    "'d": "would",
    "'ll": "will",
}
_ADVERBS = set(
    "also really just never always often usually still recently currently actually even only sometimes mostly "
    "truly definitely absolutely rarely seldom finally already kind sort totally".split()
)
_THEY = {"am": "are", "was": "was", "'m": "are", "'ve": "have", "'d": "would", "'ll": "will"}
_OPENERS = re.compile(r"^(hello|hi|hey|well|yes|yeah|no|oh|so|ok|okay|lol|haha|wow|sure)\b[,!.]?\s+", re.IGNORECASE)
_TOKEN = re.compile(r"\b(I|my|My|me|Me|mine|myself|Myself)\b('m|'ve|'d|'ll)?|\w+(?:'\w+)?|[^\w\s]+|\s+")

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


def _third_person_verb(word):
    low = word.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if low in _UNCHANGED or low.endswith("ed") or low.endswith("n't"):
        return word
    if re.search(r"(s|sh|ch|x|z|o)$", low):
        return word + "es"
    if re.search(r"[^aeiou]y$", low):
        return word[:-1] + "ies"
    return word + "s"


def third_person(sentence):
    """'I have two dogs.' -> 'The user has two dogs.'; None when it does not read as one fact."""
    text = validation.normalise(sentence)
    text = _OPENERS.sub("", text)
    if not text:
        return None
    tokens = [m.group(0) for m in _TOKEN.finditer(text)]
    out = []
    named = False  # "the user" once, then "they"
    conjugate = None  # how to inflect the next verb: "user" or "they"
    for tok in tokens:
        pronoun = re.fullmatch(r"(I|my|My|me|Me|mine|myself|Myself)('m|'ve|'d|'ll)?", tok)
        if pronoun:
            word, clitic = pronoun.group(1).lower(), pronoun.group(2)
            if word == "i":
                out.append("they" if named else "the user")
                conjugate = "they" if named else "user"
                named = True
                if clitic:
                    out.append(" " + (_THEY if conjugate == "they" else _IRREGULAR)[clitic])
                    conjugate = None
            elif word == "my":
                out.append("their" if named else "the user's")
                named = True
            elif word in ("me", "myself"):
                out.append("them" if word == "me" else "themselves")
            else:
                out.append("theirs")
            continue
        if conjugate and re.fullmatch(r"[A-Za-z']+", tok):
            low = tok.lower()
            if low in _ADVERBS or low in ("not", "n't"):
                out.append(tok)
                continue
            if conjugate == "user":
                out.append(_third_person_verb(tok))
            else:
                out.append(_THEY.get(low, tok))
            conjugate = None
            continue
        if conjugate and not tok.isspace():
            conjugate = None
        out.append(tok)
    result = "".join(out).strip()
    if not named:
        return None  # not about the user
    result = result[0].upper() + result[1:]
    if result[-1] not in ".!?":
        result += "."
    if result[-1] in "!?":
        result = result[:-1] + "."
    if validation.fact_problem(result, "profile"):
        return None
    return result


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

"""The offline backend: a rule-based extractor and verdict classifier that need no model or key.

Deterministic by design, and labelled `offline` in provenance so nobody mistakes it for the model.
"""

import re

from memoryapp import validation

# (pattern over one sentence, kind, scope). Patterns see first-person statements only.
RULES = [
    (r"\b(never|don't ever|do not ever) (suggest|propose|recommend|use)\b", "constraint", "personal"),
    (
        r"\b(we|i) (can't|cannot|can not|must not|mustn't|are not allowed to|aren't allowed to) \w+",
        "constraint",
        "personal",
    ),
    (r"\b(we're|we are|i'm|i am) (on-prem|on prem|on-premises)\b", "constraint", "personal"),
    (r"\b(contractually|by contract|for compliance|legally)\b", "constraint", "personal"),
    (
        r"\bi (prefer|like|love|hate|dislike|'d rather|would rather|always want|want answers)\b",
        "preference",
        "personal",
    ),
    (r"\bplease (always|never) \w+", "preference", "personal"),
    (r"\bmy (favou?rite|preferred)\b", "preference", "personal"),
    (r"\b(i'm|i am) (a|an) [a-z]", "profile", "personal"),
    (r"\bi work (as|at|for|on|in)\b", "profile", "personal"),
    (r"\bmy (name|job|role|title|team|company|stack|editor|language|os) (is|are)\b", "profile", "personal"),
    (r"\bi live in\b", "profile", "personal"),
    (r"\b(we|i) (use|run|deploy (to|on)|host on|write|code in)\b", "profile", "personal"),
    (r"\b(we're|we are|i'm|i am) (on|using|running)\b", "profile", "personal"),
    (r"\b(we|i) (migrated|switched|moved|changed) (to|from|over)\b", "profile", "personal"),
    (r"\bour (stack|database|db|backend|frontend|cloud) (is|are|runs)\b", "profile", "personal"),
    (
        r"\b(i want to|i'd like to|i would like to|i'm trying to|i am trying to|my goal is|i plan to|i'm learning|i am learning)\b",
        "goal",
        "personal",
    ),
    (
        r"^(our|the) (team|company|org|organisation|organization) (always |usually )?(deploys?|ships?|releases?|uses?|runs?|works?|has|is)\b",
        "profile",
        "org",
    ),
]
_RULES = [(re.compile(p, re.IGNORECASE), kind, scope) for p, kind, scope in RULES]
_QUESTION = re.compile(r"\?\s*$")
_QUOTED_INSTRUCTION = re.compile(
    r"\b(said|says|wrote|read|reads|page|email|document|quote)\b.*\b(ignore|instruction|authori[sz]ed|remember this)\b",
    re.I,
)

_PRONOUNS = [
    (r"\bI'm\b", "the user is"),
    (r"\bI am\b", "the user is"),
    (r"\bI've\b", "the user has"),
    (r"\bI'd\b", "the user would"),
    (r"\bI\b", "the user"),
    (r"\bmy\b", "the user's"),
    (r"\bme\b", "the user"),
    (r"\bmine\b", "the user's"),
    (r"\bwe're\b", "the user's team is"),
    (r"\bwe are\b", "the user's team is"),
    (r"\bwe've\b", "the user's team has"),
    (r"\bwe\b", "the user's team"),
    (r"\bour\b", "the user's team's"),
    (r"\bus\b", "the user's team"),
]
_PRONOUN_RES = [(re.compile(p, re.IGNORECASE), r) for p, r in _PRONOUNS]
_VERB_FIXES = [
    (
        r"\bthe user (prefer|like|love|hate|dislike|use|run|want|work|live|write|code|plan|need|deploy|host|switch|migrate|move)\b",
        r"the user \1s",
    ),
    (r"\bthe user's team (is|has) ", r"the user's team \1 "),
    (r"\bthe user (don't|do not)\b", "the user does not"),
    (r"\bthe user can't\b", "the user cannot"),
]
_VERB_RES = [(re.compile(p, re.IGNORECASE), r) for p, r in _VERB_FIXES]


def _sentences(text):
    for line in text.splitlines():
        if line.startswith("[user turn "):
            continue
        for s in re.split(r"(?<=[.!?])\s+", line):
            s = s.strip()
            if s:
                yield s


def third_person(sentence):
    """'I prefer tabs.' -> 'The user prefers tabs.'"""
    out = sentence.strip().rstrip(".!")
    for rx, repl in _PRONOUN_RES:
        out = rx.sub(repl, out)
    for rx, repl in _VERB_RES:
        out = rx.sub(repl, out)
    out = re.sub(r"\bmigrates\b", "migrated", out)
    out = re.sub(r"\bswitchs\b", "switches", out)
    out = out[0].upper() + out[1:] if out else out
    if not out.lower().startswith(("the user", "the team", "the company")):
        out = "The user said that " + out[0].lower() + out[1:]
    return out + "."


def extract_facts(text):
    """Facts from user turns: first-person durable statements, rewritten in the third person."""
    facts, seen = [], set()
    for sentence in _sentences(text):
        if _QUESTION.search(sentence) or _QUOTED_INSTRUCTION.search(sentence):
            continue
        if validation.looks_like_instruction(sentence) and not re.match(r"^(never|please|always)\b", sentence, re.I):
            continue
        for rx, kind, scope in _RULES:
            if rx.search(sentence):
                if scope == "org":
                    fact = re.sub(r"^our\b", "The", sentence.strip().rstrip(".!"), flags=re.I) + "."
                    fact = fact[0].upper() + fact[1:]
                else:
                    fact = third_person(sentence)
                    if re.match(r"^(never|don't|do not|please)\b", sentence, re.I):
                        fact = "The user asked: " + sentence.strip().rstrip(".!").lower() + "."
                fact = validation.normalise(fact)
                if validation.fact_problem(fact, kind) is None and fact.casefold() not in seen:
                    seen.add(fact.casefold())
                    facts.append({"text": fact, "kind": kind, "scope": scope})
                break
    return facts


# --- verdicts ---------------------------------------------------------------------

_STOP = set(
    "the a an of to in on at for and or is are was were be been user user's users their they it its "
    "that this with by as from has have had does do now".split()
)
_CHANGE = re.compile(r"\b(migrated|switched|moved|changed|no longer|now|instead|replaced|stopped|quit|left)\b", re.I)
_NEGATION = re.compile(r"\b(not|no|never|doesn't|does not|isn't|is not|don't|cannot|can't)\b", re.I)
# "<subject> <relation> <value>": the relation words that make an attribute single-valued.
_SINGLE = re.compile(
    r"^(?P<head>.*?)\b(?P<rel>is|are|lives in|lives|works as|works at|works for|is from|is named|is called|"
    r"prefers|uses|has|was born in|is married to|is aged|age is|name is|job is|drives|owns)\b(?P<value>.*)$",
    re.I,
)


def _words(text):
    return [w for w in re.findall(r"[a-z0-9']+", text.casefold()) if w not in _STOP]


def classify(old, new):
    """CONTRADICTS, DUPLICATE or INDEPENDENT for a stored fact `old` and a new fact `new`."""
    a, b = _words(old), _words(new)
    sa, sb = set(a), set(b)
    if not sa or not sb:
        return "INDEPENDENT"
    jaccard = len(sa & sb) / len(sa | sb)
    neg_a, neg_b = bool(_NEGATION.search(old)), bool(_NEGATION.search(new))
    if jaccard >= 0.75 and neg_a == neg_b:
        return "DUPLICATE"
    if jaccard >= 0.6 and neg_a != neg_b:
        return "CONTRADICTS"
    ma, mb = _SINGLE.match(old.strip().rstrip(".")), _SINGLE.match(new.strip().rstrip("."))
    if ma and mb:
        head_a, head_b = set(_words(ma["head"])), set(_words(mb["head"]))
        rel_a, rel_b = ma["rel"].lower(), mb["rel"].lower()
        val_a, val_b = set(_words(ma["value"])), set(_words(mb["value"]))
        if head_a == head_b and head_a and rel_a == rel_b and rel_a not in ("uses", "has", "owns", "prefers"):
            if val_a == val_b:
                return "DUPLICATE"
            if not (val_a & val_b):
                return "CONTRADICTS"
    if _CHANGE.search(new) and jaccard >= 0.2:
        return "CONTRADICTS"
    return "INDEPENDENT"

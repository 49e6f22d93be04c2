"""The offline backend: a rule-based extractor and verdict classifier that need no model or key.

Deterministic by design, and labelled `offline` in provenance so nobody mistakes it for the model.
"""

import re

from memoryapp import validation

# (pattern over one clause, kind, scope). Patterns see first-person statements only.
RULES = [
    (
        r"^(please )?(never|don't ever|do not ever|don't|do not) (suggest|propose|recommend|use|mention|give|add|show)\b",
        "constraint",
        "personal",
    ),
    (
        r"\b(we|i) (can't|cannot|can not|must not|mustn't|are not allowed to|aren't allowed to|am not allowed to) \w+",
        "constraint",
        "personal",
    ),
    (r"\b(we're|we are|i'm|i am) (on-prem|on prem|on-premises|air-gapped)\b", "constraint", "personal"),
    (r"\b(contractually|by contract|for compliance|legally)\b", "constraint", "personal"),
    (r"\bi (prefer|like|love|hate|dislike|always want|want answers|want replies)\b", "preference", "personal"),
    (r"\bi('d| would) rather\b", "preference", "personal"),
    (r"\bi (don't|do not) (like|want|enjoy|care for)\b", "preference", "personal"),
    (
        r"^(please )?(always|never) (answer|reply|respond|write|use|give|keep|explain|show|include|format|talk|speak)\b",
        "preference",
        "personal",
    ),
    (r"\bmy (favou?rite|preferred)\b", "preference", "personal"),
    (r"\b(i'm|i am) (a|an) [a-z]", "profile", "personal"),
    (r"\bi work (as|at|for|on|in|with)\b", "profile", "personal"),
    (
        r"\bmy (name|job|role|title|team|company|stack|editor|language|os|laptop|shell|database|db|timezone|time zone) (is|are)\b",
        "profile",
        "personal",
    ),
    (r"\bi (live|am based|'m based) in\b", "profile", "personal"),
    (
        r"\b(we|i) (mostly |usually |only |mainly |also |always )?(use|run|deploy (to|on)|host on|write|code in|build with|work with)\b",
        "profile",
        "personal",
    ),
    (r"\b(we're|we are|i'm|i am) (on|using|running|based in)\b", "profile", "personal"),
    (
        r"\b(we|i) (have |'ve |just |recently )?(migrated|switched|moved|changed) (to|from|over)\b",
        "profile",
        "personal",
    ),
    (r"\bour (stack|database|db|backend|frontend|cloud|infra|infrastructure) (is|are|runs)\b", "profile", "personal"),
    (
        r"\b(i want to|i'd like to|i would like to|i'm trying to|i am trying to|my goal is|i plan to|i'm planning to|i'm learning|i am learning)\b",
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

_QUESTION = re.compile(
    r"\?\s*$|^(how|what|why|when|where|which|who|whom|whose|can you|could you|would you|will you|do you|does|did|"
    r"is there|are there|should i|shall i|may i)\b",
    re.IGNORECASE,
)
# Someone else's words the user is quoting or pasting: never a fact about the user.
_REPORTED = re.compile(
    r"\b(said|says|wrote|writes|reads|read|states|stated|replied|told me|tells me)\b\s*[:,]?\s*[\"“'‘]"
    r"|\b(said|says|wrote|writes|reads|states|stated|replied)\s*:|\b(pasted|copied|quoting|forwarded)\b"
    r"|\b(the|this|that|a) (page|email|e-mail|document|doc|ticket|message|website|site|article|pdf|file) (said|says|reads|stated|states)\b",
    re.IGNORECASE,
)
# Moods and the moment: true today, not worth remembering.
_TRANSIENT = re.compile(
    r"\b(today|tonight|right now|at the moment|this morning|this afternoon|tired|sleepy|hungry|frustrated|"
    r"annoyed|angry|upset|confused|stuck|bored|sorry|excited|busy|in a hurry)\b",
    re.IGNORECASE,
)
_FILLER = re.compile(
    r"^(also|and|but|so|oh|ok|okay|well|btw|by the way|fyi|just so you know|for context|for the record|"
    r"personally|honestly|actually|basically|note that|heads up|anyway|ah|hi|hello|hey|thanks)\b[,:!]?\s*",
    re.IGNORECASE,
)
# Where one sentence holds two statements: "never suggest AWS — we're on-prem by contract".
_CLAUSE_BREAK = re.compile(
    r"\s+[—–]\s+|\s+-{1,2}\s+|;\s*|:\s+|,\s*(?:so|but|because|since|as)\s+|\s+(?:because|since)\s+"
    r"|,\s*and\s+(?=(?:i|we|my|our|i'm|we're)\b)",
    re.IGNORECASE,
)
_SUBJECT = re.compile(r"\b(i|we|my|our|i'm|we're|i've|we've|i'd)\b", re.IGNORECASE)
_TRAILING_TIME = re.compile(
    r"\s+(last|this|a few|two|three) (week|month|year|weeks|months|years|days)( ago)?$|\s+(recently|yesterday|lately|a while ago)$",
    re.IGNORECASE,
)

_CONTRACTIONS = [
    (r"\bI'm\b|\bI am\b", "the user is"),
    (r"\bI've\b", "the user has"),
    (r"\bI'd\b", "the user would"),
    (r"\bI was\b", "the user was"),
    (r"\bI (don't|do not)\b", "the user does not"),
    (r"\bI (didn't|did not)\b", "the user did not"),
    (r"\bI (can't|cannot|can not)\b", "the user cannot"),
    (r"\bI (won't|will not)\b", "the user will not"),
    (r"\bwe're\b|\bwe are\b", "the user's team is"),
    (r"\bwe've\b", "the user's team has"),
    (r"\bwe'd\b", "the user's team would"),
    (r"\bwe were\b", "the user's team was"),
    (r"\bwe (don't|do not)\b", "the user's team does not"),
    (r"\bwe (didn't|did not)\b", "the user's team did not"),
    (r"\bwe (can't|cannot|can not)\b", "the user's team cannot"),
    (r"\bwe (won't|will not)\b", "the user's team will not"),
    (r"\bwe aren't\b", "the user's team is not"),
    (r"\bI'm not\b", "the user is not"),
]
_CONTRACTION_RES = [(re.compile(p, re.IGNORECASE), r) for p, r in _CONTRACTIONS]
_VERBS = (
    "use|run|deploy|host|write|code|work|live|prefer|like|love|hate|dislike|want|need|plan|build|ship|release|"
    "develop|maintain|manage|teach|study|speak|own|lead|sell|store|keep|test|rely|avoid|follow|favour|favor|enjoy|"
    "do|have|go|read|care|try|mean|target|support|serve|migrate|switch|move"
)
_ADVERBS = "also|mostly|usually|only|mainly|always|often|still|just|really|generally|never|now|typically"
_PRESENT = re.compile(rf"\b(the user|the user's team) (?:({_ADVERBS}) )?({_VERBS})\b", re.IGNORECASE)
_PRONOUNS = [
    (r"\bI\b", "the user"),
    (r"\bmy\b", "the user's"),
    (r"\bme\b", "the user"),
    (r"\bmine\b", "the user's"),
    (r"\bmyself\b", "themselves"),
    (r"\bwe\b", "the user's team"),
    (r"\bour\b", "the user's team's"),
    (r"\bours\b", "the user's team's"),
    (r"\bus\b", "the user's team"),
]
_PRONOUN_RES = [(re.compile(p, re.IGNORECASE), r) for p, r in _PRONOUNS]


def _third_person_verb(verb):
    verb = verb.lower()
    irregular = {"have": "has", "do": "does", "go": "goes"}
    if verb in irregular:
        return irregular[verb]
    if re.search(r"[^aeiou]y$", verb):
        return verb[:-1] + "ies"
    if re.search(r"(s|sh|ch|x|z|o)$", verb):
        return verb + "es"
    return verb + "s"


def _conjugate(match):
    subject, adverb, verb = match.group(1), match.group(2), match.group(3)
    adverb = f"{adverb} " if adverb else ""
    return f"{subject} {adverb}{_third_person_verb(verb)}"


def _sentences(text):
    in_fence = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            in_fence = not in_fence
            continue
        # Headers we add, pasted code or logs (fenced or indented) and quoted text are not the user's words.
        if in_fence or line.startswith(("[user turn ", "    ", "\t", ">")):
            continue
        for s in re.split(r"(?<=[.!?])\s+", line):
            s = s.strip()
            if s:
                yield s


def _clauses(sentence):
    for part in _CLAUSE_BREAK.split(sentence):
        part = part.strip().rstrip(".!,")
        while True:
            stripped = _FILLER.sub("", part).strip()
            if stripped == part:
                break
            part = stripped
        if part:
            yield part


def _finish(text):
    text = re.sub(r"\s+", " ", text).strip().rstrip(".!,")
    return text[0].upper() + text[1:] + "." if text else ""


def _subject(clause):
    return "The user's team" if re.match(r"^(we|we're|we've|our)\b", clause, re.I) else "The user"


def third_person(clause):
    """'I prefer tabs' -> 'The user prefers tabs.'; 'we use Django' -> 'The user's team uses Django.'"""
    out = clause.strip().rstrip(".!")
    for rx, repl in _CONTRACTION_RES:
        out = rx.sub(repl, out)
    for rx, repl in _PRONOUN_RES:
        out = rx.sub(repl, out)
    out = _PRESENT.sub(_conjugate, out)
    return _finish(out)


def _rewrite(clause, kind, scope):
    """One clause that matched a rule, as a self-contained third-person sentence (or None)."""
    if scope == "org":
        return _finish(re.sub(r"^our\b", "The", clause, flags=re.I))
    never = re.match(
        r"^(?:please )?(?:never|don't ever|do not ever|don't|do not) (suggest|propose|recommend|use|mention|give|add|show)\b(.*)$",
        clause,
        re.I,
    )
    if never:
        return _finish(f"The user does not want the assistant to {never[1].lower()}{never[2]}")
    always = re.match(r"^(?:please )?(always|never) (.+)$", clause, re.I)
    if always:
        return _finish(f"The user wants the assistant to {always[1].lower()} {always[2]}")
    # "I'd rather X" reads better as a plain preference.
    clause = re.sub(r"^i('d| would) rather\b", "I prefer to", clause, flags=re.I)
    switched = re.search(
        r"^(i|we) (?:have |'ve |just |recently )?(?:migrated|switched|changed) (?:over )?(?:from (?P<old>.+?) )?to (?P<new>.+)$",
        clause,
        re.I,
    )
    if switched:
        new = _TRAILING_TIME.sub("", switched["new"]).strip()
        old = f" instead of {switched['old']}" if switched["old"] else ""
        return _finish(f"{_subject(clause)} now uses {new}{old}")
    # Cut a short lead-in before the first-person subject: "At work we use X" -> "we use X".
    lead = _SUBJECT.search(clause)
    if lead and lead.start() and len(clause[: lead.start()].split()) <= 4:
        clause = clause[lead.start() :]
    if not _SUBJECT.match(clause):
        return None  # the rule matched, but the clause is not about the user in the first person
    return third_person(_TRAILING_TIME.sub("", clause) if kind != "goal" else clause)


def extract_facts(text):
    """Facts from user turns: first-person durable statements, rewritten in the third person."""
    facts, seen = [], set()
    for sentence in _sentences(text):
        if _QUESTION.search(sentence) or _REPORTED.search(sentence):
            continue
        for clause in _clauses(sentence):
            if _QUESTION.search(clause) or _TRANSIENT.search(clause) or clause[0] in "\"“'‘":
                continue
            for rx, kind, scope in _RULES:
                if not rx.search(clause):
                    continue
                fact = _rewrite(clause, kind, scope)
                if fact is None:
                    break
                fact = validation.normalise(fact)
                # The same squeeze as the model's answers: too long, two sentences or instruction-shaped -> dropped.
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


_NEGATION_WORDS = {"not", "no", "never", "doesn't", "isn't", "don't", "cannot", "can't", "won't"}
# Relations that hold one value at a time even with a bare subject ("the user lives in Lisbon").
_SINGLE_VERBS = {"lives in", "lives", "works as", "works at", "works for", "is from", "is named", "is called"}
_SINGLE_VERBS |= {"was born in", "is married to", "is aged", "age is", "name is", "job is"}


def _stem(word):
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _words(text):
    """Content words, crudely stemmed, without negations (those are compared separately)."""
    words = re.findall(r"[a-z0-9']+", text.casefold())
    return [_stem(w) for w in words if w not in _STOP and w not in _NEGATION_WORDS]


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
        head_a, head_b = " ".join(ma["head"].casefold().split()), " ".join(mb["head"].casefold().split())
        rel_a, rel_b = ma["rel"].lower(), mb["rel"].lower()
        val_a, val_b = set(_words(ma["value"])), set(_words(mb["value"]))
        # "The user is a parent" and "the user is an engineer" are both true: a bare subject with
        # "is" says nothing single-valued, unlike "the user's database is ..." or "lives in".
        named_attribute = bool(_words(ma["head"])) or rel_a in _SINGLE_VERBS
        if head_a == head_b and rel_a == rel_b and rel_a not in ("uses", "has", "owns", "prefers") and named_attribute:
            if val_a == val_b:
                return "DUPLICATE"
            if not (val_a & val_b):
                return "CONTRADICTS"
    if _CHANGE.search(new) and jaccard >= 0.2:
        return "CONTRADICTS"
    return "INDEPENDENT"

"""The offline backend: a rule-based extractor and verdict classifier that need no model or key.

Deterministic by design, and labelled `offline` in provenance so nobody mistakes it for the model.
"""

import functools
import json
import re

from memoryapp import validation
from memoryapp.backends.base import Answer, Usage

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
    "that this with by as from has have had does do now very really just so too also am i my me".split()
)
_CHANGE = re.compile(
    r"\b(migrated|switched|moved|changed|no longer|now|instead|replaced|stopped|quit|left|gave up|sold)\b", re.I
)
_NEGATION = re.compile(r"\b(not|no|never|doesn't|does not|isn't|is not|don't|cannot|can't|without)\b", re.I)
_NEGATORS = {"not", "no", "never", "doesn't", "isn't", "don't", "cannot", "can't", "without"}
# Words that make a second value additive or hypothetical rather than a replacement.
_HEDGE = re.compile(
    r"\b(also|too|as well|another|second|part[- ]time|side|used to|formerly|former|wants? to|would like|"
    r"hopes?|dreams?|plans? to|someday|one day|thinking about|thought about|wish|might)\b",
    re.I,
)
# Spelling and near-synonyms folded together before words are compared.
_FOLD = {
    "love": "like",
    "loves": "like",
    "enjoy": "like",
    "enjoys": "like",
    "likes": "like",
    "adore": "like",
    "adores": "like",
    "fond": "like",
    "prefer": "like",
    "prefers": "like",
    "favourite": "favorite",
    "fave": "favorite",
    "fav": "favorite",
    "colour": "color",
    "kids": "child",
    "kid": "child",
    "children": "child",
    "mom": "mother",
    "mum": "mother",
    "dad": "father",
    "job": "work",
    "works": "work",
    "working": "work",
    "employed": "work",
    "lives": "live",
    "living": "live",
    "based": "live",
    "resides": "live",
    "band": "artist",
    "singer": "artist",
    "group": "artist",
    "musician": "artist",
    "called": "named",
}
PROFESSIONS = set(
    """accountant actor actress architect artist astronaut athlete attorney baker banker barber barista
    bartender biologist bookkeeper builder butcher carpenter cashier chef chemist cleaner clerk coach cook
    counselor counsellor custodian dancer dentist designer detective developer dietitian doctor driver
    economist editor electrician engineer farmer firefighter fisherman florist gardener hairdresser
    historian housekeeper janitor journalist judge landscaper lawyer librarian lifeguard linguist
    mechanic manager model musician nanny nurse officer painter paramedic pharmacist photographer physician
    physicist pilot plumber poet policeman politician professor programmer psychologist realtor receptionist
    reporter researcher salesman salesperson scientist secretary singer soldier surgeon tailor teacher
    technician therapist trainer translator truck trucker tutor veterinarian vet waiter waitress welder
    writer zookeeper""".split()
)
_MARITAL = {
    "married": "married",
    "single": "single",
    "divorced": "divorced",
    "engaged": "engaged",
    "widowed": "widowed",
    "widow": "widowed",
    "widower": "widowed",
}
_GENDER = {
    "woman": "female",
    "female": "female",
    "girl": "female",
    "lady": "female",
    "man": "male",
    "male": "male",
    "boy": "male",
    "guy": "male",
}
_ATTRIBUTE_PATTERNS = [
    # (attribute, pattern with a 'v' group); patterns run on the lower-cased fact after "the user".
    (
        "home",
        r"^(?:now |currently |just |recently )?(?:lives?|is based|resides?|moved) (?:in|to) (?P<v>(?!a |an |the )[^,;]+)",
    ),
    ("origin", r"^(?:is|comes?|was) (?:originally )?from (?P<v>(?!a |an |the )[^,;]+)"),
    ("origin", r"^(?:grew up|was born|was raised) in (?P<v>(?!a |an |the )[^,;]+)"),
    ("age", r"^is (?P<v>\d{1,3})(?: years? old| yrs?(?: old)?)?\b"),
    ("age", r"\b(?P<v>\d{1,3}) ?(?:years?|yrs?) old\b"),
    ("employer", r"^(?:works?|is employed) (?:at|for) (?P<v>[^,;]+)"),
    ("profession", r"^(?:works? as|is employed as|is) (?:a|an) (?P<v>[a-z -]+)"),
    ("named", r"^(?:name is|is named|is called) (?P<v>[a-z]+)"),
]
_ATTRIBUTE_RES = [(name, re.compile(p)) for name, p in _ATTRIBUTE_PATTERNS]
_FAVOURITE = re.compile(r"\bfavou?rite (?P<cat>[a-z]+(?: [a-z]+)?) (?:is|are) (?P<v>[^,;]+)")
_FAVOURITE_AFTER = re.compile(r"^(?P<v>[^,;]+?) (?:is|are) (?:the user's|user's|my) favou?rite (?P<cat>[a-z]+)")
# "The user's code editor is Neovim." — a named attribute with one value at a time.
_POSSESSIVE = re.compile(r"^the user's (?P<attr>[a-z][a-z ]{1,40}?) (?:is|are) (?P<v>(?!a |an |not )[^,;]+)")


def _fold(word):
    word = _FOLD.get(word, word)
    if len(word) > 4 and word.endswith("s") and not word.endswith("ss"):
        word = _FOLD.get(word[:-1], word[:-1])
    return word


def _words(text):
    return [_fold(w) for w in re.findall(r"[a-z0-9']+", text.casefold()) if w not in _STOP]


def _body(text):
    """The fact after its subject: 'The user lives in Lisbon.' -> 'lives in lisbon'."""
    t = text.casefold().strip().rstrip(".!")
    t = re.sub(r"^(the user|user)\s+", "", t)
    return t


def _attributes(text):
    """Single-valued attributes stated by a fact: {attribute: set of value words}."""
    found = {}
    full = text.casefold().strip().rstrip(".!")
    body = _body(text)
    m = _POSSESSIVE.match(full)
    if m:
        attr = " ".join(_fold(w) for w in m["attr"].split() if w not in ("main", "current", "preferred"))
        found["own:" + attr] = m["v"]
    for m in (_FAVOURITE.search(full), _FAVOURITE_AFTER.match(body)):
        if m:
            found["favorite:" + _fold(m["cat"].split()[0])] = m["v"]
    for name, rx in _ATTRIBUTE_RES:
        m = rx.search(body)
        if m and name not in found:
            value = m["v"]
            if name == "profession":
                job = [w for w in re.findall(r"[a-z]+", value) if w in PROFESSIONS]
                gender = [w for w in re.findall(r"[a-z]+", value) if w in _GENDER]
                if gender and len(value.split()) <= 2:
                    found["gender"] = _GENDER[gender[0]]
                if not job:
                    continue
                value = job[-1]
            found[name] = value
    for word, status in _MARITAL.items():
        if re.search(rf"^(?:is|got|is getting|recently got) {word}\b", body):
            found["marital"] = "single" if re.search(r"\bnot married\b", body) else status
    if re.search(r"^is not married\b", body):
        found["marital"] = "single"
    return {k: set(_words(v)) - {"now", "currently"} for k, v in found.items() if set(_words(v))}


# Cosine similarity at or above which two facts that clash on nothing are the same fact reworded
# (MiniLM; from bench_verdicts on the ConvAI2 valid split and the calibration set).
DUPLICATE_SIMILARITY = 0.8


@functools.lru_cache(maxsize=4096)
def _vector(text, model_name):
    from memoryapp import embeddings

    return embeddings.embed(text)


def _similarity(a, b):
    # Cached per text: one verdict call compares the same new fact with up to five stored ones,
    # and a worker sees the same stored facts again and again.
    from memoryapp import embeddings

    name = embeddings.model_name()
    return float(_vector(a, name) @ _vector(b, name))


def _different_details(only_a, only_b):
    """Both sides add a word or two of their own that is not a form of the other's ('light' / 'dark')."""
    only_a = {w for w in only_a if not any(w[:4] == v[:4] for v in only_b)}
    only_b = {w for w in only_b if not any(w[:4] == v[:4] for v in only_a)}
    return 1 <= len(only_a) <= 2 and 1 <= len(only_b) <= 2


def _same_value(a, b):
    return len(a & b) / len(a | b) >= 0.5


def classify(old, new, similarity=None):
    """CONTRADICTS, DUPLICATE or INDEPENDENT for a stored fact `old` and a new fact `new`.

    Conservative by design: calling a changed fact a DUPLICATE would lose the new value, so a pair
    that shares a frame but differs in its details stays INDEPENDENT unless a rule recognises the
    attribute. `similarity` (cosine) saves an embedding when the caller already knows it.
    """
    sa, sb = set(_words(old)) - _NEGATORS, set(_words(new)) - _NEGATORS
    if not sa or not sb:
        return "INDEPENDENT"
    shared = sa & sb
    jaccard = len(shared) / len(sa | sb)
    overlap = len(shared) / min(len(sa), len(sb))
    negated = bool(_NEGATION.search(old)) != bool(_NEGATION.search(new))
    hedged = bool(_HEDGE.search(old) or _HEDGE.search(new))
    if negated and (jaccard >= 0.5 or overlap == 1.0):
        return "CONTRADICTS"  # the same statement, negated
    attrs_a, attrs_b = _attributes(old), _attributes(new)
    common = attrs_a.keys() & attrs_b.keys()
    if common:
        if all(_same_value(attrs_a[k], attrs_b[k]) for k in common):
            return "CONTRADICTS" if negated else "DUPLICATE"
        return "INDEPENDENT" if hedged else "CONTRADICTS"  # one attribute, two values
    if _CHANGE.search(new) and jaccard >= 0.2 and not hedged:
        return "CONTRADICTS"
    if negated:
        return "INDEPENDENT"
    if len(shared) >= 2 and jaccard < 0.75 and _different_details(sa - sb, sb - sa):
        return "INDEPENDENT"  # same frame, different details: maybe a change, maybe not; keep both
    if jaccard >= 0.75 or (overlap == 1.0 and len(shared) >= 2):
        return "DUPLICATE"
    if similarity is None:
        similarity = _similarity(old, new)
    return "DUPLICATE" if similarity >= DUPLICATE_SIMILARITY else "INDEPENDENT"


class OfflineBackend:
    """Deterministic local extractor and verdict classifier, used when no API key is set."""

    name = "offline"
    model = "offline-rules-1"

    def extract(self, text):
        facts = extract_facts(text)
        return Answer(text=json.dumps({"facts": facts}), model=self.model)

    def verdicts(self, new_text, old_texts):
        return [classify(old, new_text) for old in old_texts], Usage()

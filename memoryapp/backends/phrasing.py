"""Turning what a user said into candidate statements and facts about "the user".

The one first-person -> third-person rewriter in the codebase (`third_person`), and the clause
splitter the offline backend and its training share, so the model learns on the same candidates
it later judges.
"""

import re

from memoryapp import validation
from memoryapp.backends.rules import R


def announces_change(fact):
    """True when the fact's wording says something changed (it then replaces a value worded far from it)."""
    return bool(R.announces_change.search(fact))


def home_of(fact):
    """The place of "The user lives in <a named place>." (casefolded, without the full stop), else None: one
    home at a time, so a new one replaces the old."""
    found = R.one_home.match(fact.strip())
    return found[1].rstrip(".").casefold() if found else None  # "Berlin." is "Berlin" ("St. Louis" keeps its dot)


def reported(sentence):
    """True when the sentence quotes or pastes someone else's words: never a fact about the user."""
    return any(rule.search(sentence) for rule in (R.reported_quote, R.reported_colon, R.pasted, R.document_says))


def transient(clause):
    """True for a mood or the moment ("I'm tired today"): true today, not worth remembering."""
    return bool(R.transient.search(clause))


def sentences(text):
    """The user's own sentences: no fenced or indented code, no quoted lines, no headers we add."""
    in_fence = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence or line.startswith(("[user turn ", "    ", "\t", ">")):
            continue
        pieces = []
        for piece in re.split(r"(?<=[.!?])\s+", line):
            if pieces and R.abbreviation_stop.search(pieces[-1]):
                pieces[-1] += " " + piece
            else:
                pieces.append(piece)
        yield from (piece.strip() for piece in pieces if piece.strip())


def clauses(sentence):
    """A sentence cut where it holds two statements, with leading and trailing filler removed."""
    speaker = None  # "I was born in Lagos but grew up in London": the second clause is the speaker's too
    parts = R.clause_break.split(R.since_last.sub("", sentence))
    if not re.search('["“”]', sentence):
        parts = [p for part in parts for p in R.comma_then_i.split(part)]
    for part in parts:
        part = part.strip().rstrip(".!,")
        first = part.split(" ", 1)[0].lower()
        if R.speaker_carries.applies(speaker and _past_tense(first)):
            part = f"{speaker} {part}"
        speaker = "I" if re.match(r"i\b", part, re.IGNORECASE) else None
        while True:  # until nothing more comes off: "oh, I'm good, thanks, btw" takes three rounds
            stripped = R.how_i_am.sub("", R.filler.sub("", part)).strip()
            stripped = R.trailing_filler.sub("", stripped).strip().rstrip(".!,")
            if stripped == part:
                break
            part = stripped
        if part:
            yield part


def from_subject(clause):
    """The clause from its first-person subject on ('At work we use X' -> 'we use X'), or None.

    A clause with no subject that reads as the speaker's ("Still training for it", "Love hiking")
    gets "I" back.
    """
    here = R.here.match(clause)
    if here:
        who = "We're" if here["who"].lower() in ("shop", "team", "house", "company", "startup") else "I'm"
        article = "an" if here["what"][:1].lower() in "aeiou" else "a"
        return f"{who} {article} {here['what']} {here['who']}"
    if R.someone_we.match(clause):
        return None  # "Everyone we love was there": about other people
    if R.relative.match(clause):
        return clause  # "The project I'm on uses Kafka" -> "The project the user is on uses Kafka"
    named = R.named_as_mine.match(R.hedges.sub("", clause))
    if named and not re.search(r"\b(i|we|i'm|we're)\b", f"{named['what']} {named['mine']}", re.I):
        return f"{named['mine']} {named['be']} {named['what']}"
    lead = R.subject.search(clause)
    if lead is not None and lead[0].lower() in ("my", "our") and R.before_object.search(clause[: lead.start()]):
        # "In my free time I paint", "Here are our rules": that "my" is in an object, not the subject.
        # With no subject after it, the clause may still be the speaker's ("Still training for my marathon").
        lead = R.subject.search(clause, lead.end())
    if lead is None or len(clause[: lead.start()].split()) > 4:
        implicit = "I'm" if R.implicit_be.match(clause) else "I" if R.implicit_verb.match(clause) else None
        if implicit is None or lead is not None:
            return None
        return R.hedges.sub("", f"{implicit} {clause[:1].lower()}{clause[1:]}").strip()
    stated = R.hedges.sub("", clause[lead.start() :]).strip()
    if R.bare_possessive.applies(lead[0].lower() in ("my", "our") and len(stated.split()) <= 2):
        return None  # a bare "my wife" (from "My wife and I live in Berlin") states nothing
    return stated


def candidates(text):
    """First-person statements in a user's text that might be durable facts (the learned model decides)."""
    out = []
    for sentence in sentences(text):
        if R.question.search(sentence) or reported(sentence):
            continue
        for clause in clauses(sentence):
            if R.question.search(clause) or clause[0] in "\"“'‘":
                continue
            stated = from_subject(clause)
            if stated and len(stated.split()) >= 2:
                out.append(stated)
    return out


# --- first person -> third person ---------------------------------------------------

# Verbs after the subject that stay as they are (past tense, modals).
_UNCHANGED = set(
    """was were had did could would should might must will can may shall used got went grew met made became took saw
    won lost left ran bought began came drove ate fell felt found gave knew spent taught told thought wrote sold broke
    built caught chose drank flew forgot held kept led paid put quit rode said sang sat slept spoke stood swam threw
    understood wore read hurt let set cut cannot heard brought fought sought sent meant lent bent dealt dreamt learnt
    burnt hid shot struck hung rang shook woke fled forgave froze rose sank stole stuck swore swept tore wept drew
    blew bit crept spun stung""".split()
)
# Present-tense verbs that end in -ed like a past tense.
_PRESENT_ED = {"need", "feed", "bleed", "breed", "speed", "proceed", "succeed", "exceed", "heed", "seed", "shed", "wed"}
_ADVERBS = set(
    "also really just never always often usually still recently currently actually even only sometimes mostly "
    "truly definitely absolutely rarely seldom finally already totally mainly generally typically now both".split()
)
# Contracted and irregular forms: (form after "the user" / "the user's team", form after "they").
_FORMS = {
    "am": ("is", "are"),
    "'m": ("is", "are"),
    "are": ("is", "are"),
    "'re": ("is", "are"),
    "have": ("has", "have"),
    "'ve": ("has", "have"),
    "do": ("does", "do"),
    "go": ("goes", "go"),
    "'d": ("would", "would"),
    "'ll": ("will", "will"),
    "don't": ("does not", "do not"),
    "dont": ("does not", "do not"),
    "haven't": ("has not", "have not"),
    "can't": ("cannot", "cannot"),
    "cant": ("cannot", "cannot"),
    "won't": ("will not", "will not"),
    "didn't": ("did not", "did not"),
    "was": ("was", "were"),
    "wasn't": ("was not", "were not"),
    "weren't": ("was not", "were not"),
    "aren't": ("is not", "are not"),
    "couldn't": ("could not", "could not"),
    "wouldn't": ("would not", "would not"),
    "shouldn't": ("should not", "should not"),
    "were": ("was", "were"),
}
_PRONOUN = re.compile(
    r"(?<![\w'])(I|i|my|My|me|Me|mine|Mine|myself|Myself|we|We|our|Our|us|Us|ours|Ours|ourselves|Ourselves)"
    r"(['’](?:m|ve|d|ll|re))?(?![\w'])"
)
# "no longer" is one token, an adverb like "never": "we no longer deploy" -> "the user's team no longer deploys".
# A word is any letters, not only A-Z: "crème" and "Zürich" are one word each, never split into pieces ("me")
# or dropped. The last alternative keeps any other character as it is, so a rewrite never loses one.
_WORD = r"[^\W\d_]+"
_TOKEN = re.compile(_PRONOUN.pattern + rf"|[Nn]o longer\b|{_WORD}(?:['’]{_WORD})?|[^\w\s]+|\d+|\s+|.")


def _past_tense(low):
    """A verb that keeps its form after "the user": a past tense or a modal ("grew", "worked", "could")."""
    return low in _UNCHANGED or (low.endswith("ed") and low not in _PRESENT_ED)


def _third_person_verb(word):
    low = word.lower()
    if _past_tense(low) or not low.isalpha():
        return word
    if re.search(r"(s|sh|ch|x|z|o)$", low):
        return word + "es"
    if re.search(r"[^aeiou]y$", low):
        return word[:-1] + "ies"
    return word + "s"


def third_person(sentence):
    """'I have two dogs.' -> 'The user has two dogs.'; 'we use Django' -> "The user's team uses Django.".

    None when the sentence does not speak about the user in the first person, or the result is
    not a storable fact.
    """
    result = rewrite(sentence)
    if result is None or validation.refusal(result, "profile"):  # what could be pending is the write path's
        return None
    return result


def rewrite(sentence):
    """`third_person` without its validation, for a caller that validates the fact once itself (the offline backend)."""
    text = validation.normalise(sentence).replace("’", "'")
    text = R.filler.sub("", text)
    if not text:
        return None
    writer = _Rewriter(text)
    for m in _TOKEN.finditer(text):
        writer.token(m)
    result = re.sub(r"\s+", " ", "".join(writer.out)).strip().rstrip(".!?,;: ")
    if "the user" not in result:
        return None  # not about the user
    return result[0].upper() + result[1:] + "."


def _we_reading(text):
    """(who "we" is, whose "our" is, whether "we" takes a plural verb) in this sentence."""
    # "We" is the user's family where people live and the family they have, the user's team at work
    # ("we use Django"), and elsewhere the user, with others where the sentence says so ("we went
    # camping" is no team outing: the user went camping; "we back each other up").
    # "Our kids love Lego." -> "The user's kids love Lego."; "our cat" -> "the user's cat".
    household = R.household.match(text)
    if household:
        return (
            "the user's family",
            "the user's" if household[0].lower().startswith("our") else "the user's family's",
            False,
        )
    if R.at_work.search(text):
        return "the user's team", "the user's team's", False
    if R.together.search(text):
        return "the user and others", "the user's", True
    return "the user", "the user's", False


class _Rewriter:
    """Rewrites one sentence token by token: first-person words, and the verb that follows them."""

    def __init__(self, text):
        self.text = text
        self.we, self.ours, self.plural = _we_reading(text)
        self.out = []
        self.user_named = False  # "the user" once, then "they"
        self.we_named = False  # the same for "we"
        self.conjugate = None  # how to inflect the next verb: "user" (singular) or "they"

    def token(self, m):
        tok = m.group(0)
        pronoun = _PRONOUN.fullmatch(tok)
        if pronoun:
            self._pronoun(pronoun.group(1).lower(), (pronoun.group(2) or "").lower() or None, m.end())
        elif self.conjugate and not tok.isspace():
            self._verb(tok)
        else:
            self.out.append(tok)

    def _pronoun(self, word, clitic, end):
        if word == "i":
            self.out.append("they" if self.user_named else "the user")
            self.conjugate = "they" if self.user_named else "user"
            self.user_named = True
        elif word == "we":
            self.out.append("they" if self.we_named else self.we)
            self.conjugate = "they" if self.we_named or self.plural else "user"
            self.we_named = True
        elif word == "our" and not self.we_named and re.match(r"\s+team\b", self.text[end:], re.I):
            self.out.append("the user's")  # "our team" is the user's team, not "the user's team's team"
        else:
            self.out.append(self._possessive_or_object(word))
            return
        if clitic:
            self.out.append(" " + _FORMS[clitic][0 if self.conjugate == "user" else 1])
            self.conjugate = None

    def _possessive_or_object(self, word):
        if word == "my":
            said, self.user_named = ("their" if self.user_named else "the user's"), True
        elif word == "our":
            said, self.we_named = ("their" if self.we_named else self.ours), True
        elif word in ("me", "myself"):
            said = ("them" if word == "me" else "themselves") if self.user_named else "the user"
            self.user_named = True
        elif word in ("us", "ourselves"):
            said = self.we
        else:  # mine, ours
            said = "theirs" if word == "mine" else self.ours
        return said

    def _verb(self, tok):
        low = tok.lower()
        if low in _ADVERBS or low in ("not", "no longer"):
            self.out.append(tok)
            return  # the verb is still to come
        if low in ("and", "or"):  # "I and my wife like hiking": a subject of two, whose verb stays as it is
            self.out.append(tok)
            self.conjugate = None
            return
        if low in _FORMS:
            self.out.append(_FORMS[low][0 if self.conjugate == "user" else 1])
        elif self.conjugate == "user" and re.fullmatch(_WORD, tok):
            self.out.append(_third_person_verb(tok))
        else:
            self.out.append(tok)
        self.conjugate = None


# The person's own page speaks to them ("You prefer tea."); a correction typed in that voice is
# turned into the first person, then stored in the third like every fact.
_SECOND_PERSON = (
    (re.compile(r"\byou(?:'re| are)\b", re.IGNORECASE), "I am"),
    (re.compile(r"\byou were\b", re.IGNORECASE), "I was"),
    (re.compile(r"\byou(?:'ve| have)\b", re.IGNORECASE), "I have"),
    (re.compile(r"\byourself\b", re.IGNORECASE), "myself"),
    (re.compile(r"\byours\b", re.IGNORECASE), "mine"),
    (re.compile(r"\byour\b", re.IGNORECASE), "my"),
    (re.compile(r"^you\b", re.IGNORECASE), "I"),
    (re.compile(r"\byou\b", re.IGNORECASE), "me"),
)


def stored_voice(text):
    """A fact as it is stored, whatever voice the person typed it in: 'You prefer tea.', 'I prefer tea.'
    and 'The user prefers tea.' are all 'The user prefers tea.'. Text that names no person is kept."""
    text = validation.normalise(text)
    if re.match(r"the user\b", text, re.IGNORECASE) or validation.shape_problem(text, "profile"):
        return text  # as typed: two sentences are refused as such, not run together by the rewrite
    first = substitute(text, _SECOND_PERSON) if re.search(r"\byou", text, re.IGNORECASE) else text
    return third_person(first) or text


def from_the_first_person(text):
    """An agent's fact in the first person ("I like tea.") in the block's voice; any other text as sent.

    Unlike `stored_voice` (a person's own correction), "you" is left alone: from an agent it is most
    likely the assistant ("I hate it when you use emojis."). A non-string is left for the write path to refuse."""
    if not isinstance(text, str):
        return text
    text = validation.normalise(text)
    if validation.shape_problem(text, "profile") or not re.match(r"(?:i|my|we|our)\b", text, re.IGNORECASE):
        return text
    return rewrite(text) or text


def substitute(text, table):
    """`text` with each (pattern, replacement) of `table` applied in order."""
    for pattern, replacement in table:
        text = pattern.sub(replacement, text)
    return text

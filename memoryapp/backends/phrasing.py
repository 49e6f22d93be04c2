"""Turning what a user said into candidate statements and facts about "the user".

The one first-person -> third-person rewriter in the codebase (`third_person`), and the clause
splitter the offline backend and its training share, so the model learns on the same candidates
it later judges.
"""

import re

from memoryapp import validation

QUESTION = re.compile(
    r"\?\s*$|^(how|what|why|when|where|which|who|whom|whose|can you|could you|would you|will you|do you|does|did|"
    r"is there|are there|should i|shall i|may i)\b",
    re.IGNORECASE,
)
# Someone else's words the user is quoting or pasting: never a fact about the user.
REPORTED = re.compile(
    r"\b(said|says|wrote|writes|reads|read|states|stated|replied|told me|tells me|showed|shows|sent|posted)\b"
    r"(\s+(me|us|this|that))?\s*[:,]?\s*[\"“'‘]"
    r"|\b(said|says|wrote|writes|reads|states|stated|replied|showed|shows|sent|posted)(\s+(me|us|this|that))?\s*:|\b(pasted|copied|quoting|forwarded)\b"
    r"|\b(the|this|that|a) (page|email|e-mail|document|doc|ticket|message|website|site|article|pdf|file) "
    r"(said|says|reads|stated|states)\b",
    re.IGNORECASE,
)
# A fact that says something changed ("The user's team now uses PlanetScale.", "... no longer eats
# meat."). "Right now" is what someone is doing at the moment, not a change.
_ANNOUNCES_CHANGE = re.compile(
    r"\b(?:(?<!right )now|no longer|any ?more|switched|migrated|moved|changed|instead of|has become|these days)\b",
    re.IGNORECASE,
)


def announces_change(fact):
    """True when the fact's wording says something changed (it then replaces a value worded far from it)."""
    return bool(_ANNOUNCES_CHANGE.search(fact))


# Moods and the moment: true today, not worth remembering.
TRANSIENT = re.compile(
    r"\b(today|tonight|right now|at the moment|this morning|this afternoon|tired|sleepy|hungry|frustrated|"
    r"annoyed|angry|upset|confused|stuck|bored|sorry|excited|busy|in a hurry|not sure|no idea|unsure)\b",
    re.IGNORECASE,
)
# The answer to "how are you?" ("I'm good, thanks", "doing well"), filler before what follows
# ("I am good, sometimes I sew my own clothes"); not "I'm good at chess" or "I'm fine with tabs".
_HOW_I_AM = re.compile(
    r"^(?:i am|i'm|doing|am) (?:very |pretty |really |quite |so )?(?:good|fine|well|great|ok|okay|alright|not bad)"
    r"(?=$|[,.!]|\s+(?:thanks|thank you|and you|how)\b)[,.!]?\s*",
    re.IGNORECASE,
)
_FILLER = re.compile(
    r"^(also|and|but|so|oh|ok|okay|well|btw|by the way|fyi|just so you know|for context|for the record|"
    r"personally|honestly|actually|basically|note that|heads up|anyway|ah|hi|hello|hey|thanks|yes|yeah|no|lol|"
    r"haha|wow|sure|as i (?:said|mentioned)|like i (?:said|mentioned)|as mentioned|again)\b[,:!.]?\s*",
    re.IGNORECASE,
)
_TRAILING_FILLER = re.compile(
    r"[,]?\s+(by the way|btw|fyi|though|lol|haha|too|as well|actually|honestly|anyway|please)$", re.IGNORECASE
)
# "Since 2019", "since college", "since I was 5": when, not a reason, so not a second statement.
_A_TIME = (
    r"(?:\d+|last|early|late|childhood|birth|then|college|high school|(?:i|we) (?:was|were)|"
    r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*)\b"
)
# Where one sentence holds two statements: "never suggest AWS — we're on-prem by contract".
_CLAUSE_BREAK = re.compile(
    r"\s+[—–]\s+|\s+-{1,2}\s+|;\s*|:\s+|,\s*(?:so|but|because|since|as)\s+|\s+(?:because|since(?!\s+"
    + _A_TIME
    + r")|but)\s+"
    r"|,?\s*and\s+(?=(?:i|we|my|our|i'm|we're)\b)",
    re.IGNORECASE,
)
# Hedging adverbs that change nothing about the fact: "I personally prefer tabs" -> "I prefer tabs".
_HEDGES = re.compile(r"\b(personally|honestly|actually|basically|definitely|genuinely|frankly)\b,?\s*", re.IGNORECASE)
_SUBJECT = re.compile(r"\b(i|we|my|our|i'm|we're|i've|we've|i'd|we'd)\b", re.IGNORECASE)


def sentences(text):
    """The user's own sentences: no fenced or indented code, no quoted lines, no headers we add."""
    in_fence = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence or line.startswith(("[user turn ", "    ", "\t", ">")):
            continue
        for s in re.split(r"(?<=[.!?])\s+", line):
            s = s.strip()
            if s:
                yield s


# "Since we last chatted", "since our last chat": when, in chat, not a statement about anyone.
_SINCE_LAST = re.compile(
    r",?\s*\bsince (?:we|i) (?:last )?(?:chatted|chat|spoke|talked|met|caught up|saw each other)(?: last)?\b"
    r"|,?\s*\bsince our last (?:chat|talk|conversation|catch-up|call)\b",
    re.IGNORECASE,
)


# "Don't explain the basics, I'm a senior developer": a comma, then the speaker says what they are.
# Not inside a quotation ('"I'm sorry, Dave, I'm afraid I can't do that."').
_COMMA_THEN_I = re.compile(r",\s*(?=(?:i'm|i am|we're|we are|i've|we've)\s)", re.IGNORECASE)


def clauses(sentence):
    """A sentence cut where it holds two statements, with leading and trailing filler removed."""
    speaker = None  # "I was born in Lagos but grew up in London": the second clause is the speaker's too
    parts = _CLAUSE_BREAK.split(_SINCE_LAST.sub("", sentence))
    if not re.search('["“”]', sentence):
        parts = [p for part in parts for p in _COMMA_THEN_I.split(part)]
    for part in parts:
        part = part.strip().rstrip(".!,")
        first = part.split(" ", 1)[0].lower()
        if speaker and _past_tense(first):
            part = f"{speaker} {part}"
        speaker = "I" if re.match(r"i\b", part, re.IGNORECASE) else None
        while True:  # until nothing more comes off: "oh, I'm good, thanks, btw" takes three rounds
            stripped = _HOW_I_AM.sub("", _FILLER.sub("", part)).strip()
            stripped = _TRAILING_FILLER.sub("", stripped).strip().rstrip(".!,")
            if stripped == part:
                break
            part = stripped
        if part:
            yield part


# A word in -ing that can be a gerund: not "something", "morning" or "king".
_GERUND = (
    r"(?!(?:some|no|any|every)?thing|morning|evening|during|spring|string|bring|sing|king|ring|ceiling)[a-z]{2,}ing\b"
)
# Chat drops the subject: "Still training for the marathon.", "Love hiking." The subject is the speaker.
_IMPLICIT_BE = re.compile(
    r"^((?:still|currently|now|also|always|mostly|just) )?"
    + _GERUND
    # A gerund that is itself the subject ("Blogging can make a difference", "Seeing it fills me…")
    + r"(?!.*\b(?:is|was|are|were|isn't|wasn't|aren't|weren't|has|had|sounds?|seems?|looks?|can|could|will|"
    r"would|should|might|must|makes?|made|gives?|gave|helps?|helped|brings?|brought|fills?|means?|meant|keeps?|"
    r"kept)\b)"
    r"(?=.*\s)",  # and not a lone word ("Uplifting!")
    re.I,
)
_IMPLICIT_VERB = re.compile(r"^((?:still|also|really|totally|absolutely) )?(love|like|hate|enjoy|prefer)\b", re.I)
# "Django/Postgres shop here.", "Rust developer here.": who the speaker (or their team) is.
_HERE = re.compile(
    r"^(?:(?:a|an|just a|just an) )?(?P<what>[\w/+#.-]+(?: [\w/+#.-]+){0,2}) "
    r"(?P<who>shop|team|house|company|startup|user|developer|dev|engineer|programmer|person|fan) here$",
    re.I,
)


# The word before a "my" or "our" that makes it part of an object ("for my birthday", "here are our rules").
_BEFORE_OBJECT = re.compile(
    r"\b(in|on|at|for|with|to|from|about|by|after|before|during|into|like|is|are|was|were|here's|there's|"
    r"that's|thanks|thank you)\s*,?\s*$"
    # "Losing my job gave me the push…": the possessive is the gerund's object (not "Morning, my…")
    r"|^" + _GERUND,
    re.IGNORECASE,
)
# "Summer is my favorite season." -> "my favorite season is summer": what is named comes first.
_NAMED_AS_MINE = re.compile(
    r"^(?P<what>(?!(?:it|its|it's|that|this|these|those|they|he|she|which|there|here|what|because|so|and|but|or|"
    r"if)\b)[\w'-]+(?: [\w'-]+){0,3}) "
    r"(?P<be>is|are|was|were) (?P<mine>(?:my|our) [\w'-]+(?: [\w'-]+){0,6})$",
    re.IGNORECASE,
)


# A first person inside a relative clause of the subject: "The project I'm on uses Kafka heavily."
_RELATIVE = re.compile(
    r"^(?:the|this|that) [\w-]+(?: [\w-]+)? (?:i|we)(?:'m| am|'re| are)?(?: [\w-]+){0,2} "
    r"(?:is|are|was|were|has|have|uses|runs|needs|takes|makes|lets|gets)\b",
    re.IGNORECASE,
)


_SOMEONE_WE = re.compile(
    r"^(?:everyone|everybody|someone|somebody|anyone|anybody|nobody|people|all|those) (?:i|we)\b", re.IGNORECASE
)


def from_subject(clause):
    """The clause from its first-person subject on ('At work we use X' -> 'we use X'), or None.

    A clause with no subject that reads as the speaker's ("Still training for it", "Love hiking")
    gets "I" back.
    """
    here = _HERE.match(clause)
    if here:
        who = "We're" if here["who"].lower() in ("shop", "team", "house", "company", "startup") else "I'm"
        article = "an" if here["what"][:1].lower() in "aeiou" else "a"
        return f"{who} {article} {here['what']} {here['who']}"
    if _SOMEONE_WE.match(clause):
        return None  # "Everyone we love was there": about other people
    if _RELATIVE.match(clause):
        return clause  # "The project I'm on uses Kafka" -> "The project the user is on uses Kafka"
    named = _NAMED_AS_MINE.match(_HEDGES.sub("", clause))
    if named and not re.search(r"\b(i|we|i'm|we're)\b", f"{named['what']} {named['mine']}", re.I):
        return f"{named['mine']} {named['be']} {named['what']}"
    lead = _SUBJECT.search(clause)
    if lead is not None and lead[0].lower() in ("my", "our") and _BEFORE_OBJECT.search(clause[: lead.start()]):
        # "In my free time I paint", "Here are our rules": that "my" is in an object, not the subject.
        # With no subject after it, the clause may still be the speaker's ("Still training for my marathon").
        lead = _SUBJECT.search(clause, lead.end())
    if lead is None or len(clause[: lead.start()].split()) > 4:
        implicit = "I'm" if _IMPLICIT_BE.match(clause) else "I" if _IMPLICIT_VERB.match(clause) else None
        if implicit is None or lead is not None:
            return None
        return _HEDGES.sub("", f"{implicit} {clause[:1].lower()}{clause[1:]}").strip()
    stated = _HEDGES.sub("", clause[lead.start() :]).strip()
    if lead[0].lower() in ("my", "our") and len(stated.split()) <= 2:
        return None  # a bare "my wife" (from "My wife and I live in Berlin") states nothing
    return stated


def candidates(text):
    """First-person statements in a user's text that might be durable facts (the learned model decides)."""
    out = []
    for sentence in sentences(text):
        if QUESTION.search(sentence) or REPORTED.search(sentence):
            continue
        for clause in clauses(sentence):
            if QUESTION.search(clause) or clause[0] in "\"“'‘":
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
_TOKEN = re.compile(_PRONOUN.pattern + r"|[Nn]o longer\b|[A-Za-z]+(?:['’][A-Za-z]+)?|[^\w\s]+|\d+|\s+")


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


_HOUSEHOLD = re.compile(
    r"^we(?:'re| are)? (?:(?:still|just|recently|now|also|both|all) )*(?:live|lived|got married|are married|"
    r"'re married|are expecting|'re expecting|have (?:a|one|two|three|four|five|\d+) (?:kids?|children|sons?|"
    r"daughters?|bab(?:y|ies)|grandchildren))\b"
    r"|^our (?:kids?|children|sons?|daughters?|bab(?:y|ies)|family|home|house|flat|apartment|neighbou?rs?)\b",
    re.IGNORECASE,
)


# What makes "we" a team: work, tools and the things teams run.
AT_WORK = re.compile(
    r"\b(?:use|uses|using|deploy\w*|ship|ships|shipping|release\w*|stack|code|coding|codebase|repos?|repository|"
    r"sprints?|standups?|on-prem|cloud|servers?|databases?|api|apis|production|staging|customers?|clients?|"
    r"products?|offices?|company|startup|team|colleagues?|co-?workers?|projects?|deadlines?|migrat\w*|switched|"
    r"software|framework|libraries|library|hiring|roadmap|shop|job|business|store|firm|at work|services?|builds?|"
    r"containers?|pull requests?|branch(?:es)?|incidents?|rollouts?|pipelines?|"
    r"work(?:s|ed|ing)? (?:at|for) \w+"  # "we work at Acme", not "we've been working on our confidence"
    r")\b",
    re.IGNORECASE,
)
_TOGETHER = re.compile(r"\b(?:together|each other|one another|both|all of us|we all|us all)\b", re.IGNORECASE)


def third_person(sentence):
    """'I have two dogs.' -> 'The user has two dogs.'; 'we use Django' -> "The user's team uses Django.".

    None when the sentence does not speak about the user in the first person, or the result is
    not a storable fact.
    """
    text = validation.normalise(sentence).replace("’", "'")
    text = _FILLER.sub("", text)
    if not text:
        return None
    writer = _Rewriter(text)
    for m in _TOKEN.finditer(text):
        writer.token(m)
    result = re.sub(r"\s+", " ", "".join(writer.out)).strip().rstrip(".!?,;: ")
    if "the user" not in result:
        return None  # not about the user
    result = result[0].upper() + result[1:] + "."
    if validation.refusal(result, "profile"):  # what could be pending is the write path's to judge
        return None
    return result


def _we_reading(text):
    """(who "we" is, whose "our" is, whether "we" takes a plural verb) in this sentence."""
    # "We" is the user's family where people live and the family they have, the user's team at work
    # ("we use Django"), and elsewhere the user, with others where the sentence says so ("we went
    # camping" is no team outing: the user went camping; "we back each other up").
    # "Our kids love Lego." -> "The user's kids love Lego."; "our cat" -> "the user's cat".
    household = _HOUSEHOLD.match(text)
    if household:
        return (
            "the user's family",
            "the user's" if household[0].lower().startswith("our") else "the user's family's",
            False,
        )
    if AT_WORK.search(text):
        return "the user's team", "the user's team's", False
    if _TOGETHER.search(text):
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
        if low in _FORMS:
            self.out.append(_FORMS[low][0 if self.conjugate == "user" else 1])
        elif self.conjugate == "user" and re.fullmatch(r"[A-Za-z]+", tok):
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
    if re.match(r"the user\b", text, re.IGNORECASE):
        return text
    first = substitute(text, _SECOND_PERSON) if re.search(r"\byou", text, re.IGNORECASE) else text
    return third_person(first) or text


def substitute(text, table):
    """`text` with each (pattern, replacement) of `table` applied in order."""
    for pattern, replacement in table:
        text = pattern.sub(replacement, text)
    return text

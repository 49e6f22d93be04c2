"""The hand rules of the keyless extractor and verdicts, in one table.

`memoryapp/backends/phrasing.py` and `memoryapp/backends/offline.py` look each rule up by its id
(`R.question.search(sentence)`). A rule is a pattern, or a named condition (`R.bare_possessive.applies(...)`)
for a rule that is code, not a pattern. Every rule earned its place by a measured effect on the dev
split (`manage.py eval_extraction --ablate`, docs/benchmarks.md); `without(ids)` switches rules off
for that measurement, and `watch()` records which rules fired. Neither is used in production.
"""

import contextlib
import re
from types import SimpleNamespace

from memoryapp.vocabulary import TITLES

_OFF = set()  # ids switched off by `without`
_FIRED = []  # one set per active `watch`, innermost last


class Rule:
    """One hand rule: an id, what it does in a few words, and its pattern (None for a rule that is code)."""

    def __init__(self, id, description, pattern=None, flags=0):
        self.id = id
        self.description = description
        self.pattern = re.compile(pattern, flags) if isinstance(pattern, str) else pattern

    def on(self):
        """True unless the rule is switched off."""
        return self.id not in _OFF

    def _fired(self, result):
        if result and _FIRED:
            _FIRED[-1].add(self.id)
        return result

    def applies(self, condition):
        """`condition`, for a rule written as code: False when the rule is off."""
        return self.on() and self._fired(bool(condition))

    def search(self, text, *args):
        """The pattern's search, or None when the rule is off."""
        return self._fired(self.pattern.search(text, *args)) if self.on() else None

    def match(self, text):
        """The pattern's match, or None when the rule is off."""
        return self._fired(self.pattern.match(text)) if self.on() else None

    def fullmatch(self, text):
        """The pattern's fullmatch, or None when the rule is off."""
        return self._fired(self.pattern.fullmatch(text)) if self.on() else None

    def findall(self, text):
        """The pattern's findall, or [] when the rule is off."""
        return self._fired(self.pattern.findall(text)) if self.on() else []

    def sub(self, replacement, text):
        """The pattern's sub, or `text` unchanged when the rule is off."""
        if not self.on():
            return text
        out, n = self.pattern.subn(replacement, text)
        self._fired(n)
        return out

    def split(self, text):
        """The pattern's split, or [text] when the rule is off."""
        if not self.on():
            return [text]
        parts = self.pattern.split(text)
        self._fired(len(parts) > 1)
        return parts


@contextlib.contextmanager
def without(ids):
    """Switch the rules `ids` off inside the block (for the ablation only; not thread-safe)."""
    unknown = set(ids) - set(TABLE)
    if unknown:
        raise KeyError(f"no rule {', '.join(sorted(unknown))}")
    added = set(ids) - _OFF
    _OFF.update(added)
    try:
        yield
    finally:
        _OFF.difference_update(added)


@contextlib.contextmanager
def watch():
    """Yield the set of ids of the rules that fire inside the block."""
    fired = set()
    _FIRED.append(fired)
    try:
        yield fired
    finally:
        _FIRED.remove(fired)
        if _FIRED:
            _FIRED[-1].update(fired)


# --- pieces shared by several patterns (not rules of their own) -----------------------

# "Since 2019", "since college", "since I was 5": when, not a reason.
_A_TIME = (
    r"(?:\d+|last|early|late|childhood|birth|then|college|high school|(?:i|we) (?:was|were)|"
    r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*)\b"
)
# A word in -ing that can be a gerund: not "something", "morning" or "king".
GERUND = (
    r"(?!(?:some|no|any|every)?thing|morning|evening|during|spring|string|bring|sing|king|ring|ceiling)[a-z]{2,}ing\b"
)
_LANGUAGES = (
    r"(?:plain |simple |British |American )?(?P<value>English|German|French|Spanish|Portuguese|Italian|Dutch|Polish|"
    r"Czech|Swedish|Norwegian|Danish|Finnish|Greek|Turkish|Russian|Ukrainian|Arabic|Hebrew|Hindi|Japanese|Chinese|"
    r"Mandarin|Korean|Vietnamese|Indonesian|Romanian|Hungarian)\b"
)
# Capitalised words that are not names of tools: days, months, holidays.
_NOT_A_TOOL = (
    r"(?!(?:Mon|Tues|Wednes|Thurs|Fri|Satur|Sun)day|January|February|March|April|May|June|July|August|September"
    r"|October|November|December|Christmas|Easter)"
)
_I = re.IGNORECASE

# --- the table ------------------------------------------------------------------------

TABLE = {
    r.id: r
    for r in (
        # Which sentences and clauses are candidates (phrasing.py).
        Rule(
            "abbreviation_stop",
            "a full stop after a title or an initial ends no sentence ('a nurse at St. Agnes', 'Dr. Lee')",
            r"\b(?:" + "|".join((*TITLES, "[A-Z]")) + r")\.$",
        ),
        Rule(
            "question",
            "a question is no statement",
            r"\?\s*$|^(how|what|why|when|where|which|who|whom|whose|can you|could you|would you|will you|do you|"
            r"does|did|is there|are there|should i|shall i|may i)\b",
            _I,
        ),
        Rule(
            "conditional",
            "a sentence that opens with a hypothetical states no fact ('If I ever moved to Canada, …', 'If I had …')",
            r"^(?:even\s+)?(?:if\s+(?:i|we)\s+(?:ever|were|was|had|could|would)|suppose|supposing|imagine|what if)\b",
            _I,
        ),
        Rule(
            "reported_quote",
            "someone else's quoted words ('he said \"…')",
            r"\b(said|says|wrote|writes|reads|read|states|stated|replied|told me|tells me|showed|shows|sent|posted)\b"
            r"(\s+(me|us|this|that))?\s*[:,]?\s*[\"“'‘]",
            _I,
        ),
        Rule(
            "reported_colon",
            "someone else's words after 'said:'",
            r"\b(said|says|wrote|writes|reads|states|stated|replied|showed|shows|sent|posted)(\s+(me|us|this|that))?\s*:",
            _I,
        ),
        Rule("pasted", "pasted, copied, quoted or forwarded text", r"\b(pasted|copied|quoting|forwarded)\b", _I),
        Rule(
            "document_says",
            "what a page, email or document says",
            r"\b(the|this|that|a) (page|email|e-mail|document|doc|ticket|message|website|site|article|pdf|file) "
            r"(said|says|reads|stated|states)\b",
            _I,
        ),
        Rule(
            "transient",
            "moods and the moment ('tired', 'right now') are not kept",
            r"\b(today|tonight|right now|at the moment|this morning|this afternoon|tired|sleepy|hungry|frustrated|"
            r"annoyed|angry|upset|confused|stuck|bored|sorry|excited|busy|in a hurry|not sure|no idea|unsure)\b",
            _I,
        ),
        Rule(
            "how_i_am",
            "drops the answer to 'how are you?' ('I'm good, thanks')",
            r"^(?:i am|i'm|doing|am) (?:very |pretty |really |quite |so )?(?:good|fine|well|great|ok|okay|alright|"
            r"not bad)(?=$|[,.!]|\s+(?:thanks|thank you|and you|how)\b)[,.!]?\s*",
            _I,
        ),
        Rule(
            "filler",
            "drops leading filler ('oh', 'btw', 'honestly')",
            r"^(also|and|but|so|oh|ok|okay|well|btw|by the way|fyi|just so you know|for context|for the record|"
            r"personally|honestly|actually|basically|note that|heads up|anyway|ah|hi|hello|hey|thanks|yes|yeah|no|lol|"
            r"haha|wow|sure|as i (?:said|mentioned)|like i (?:said|mentioned)|as mentioned|again)\b[,:!.]?\s*",
            _I,
        ),
        Rule(
            "trailing_filler",
            "drops trailing filler (', btw', 'too')",
            r"[,]?\s+(by the way|btw|fyi|though|lol|haha|too|as well|actually|honestly|anyway|please)$",
            _I,
        ),
        Rule(
            "clause_break",
            "cuts a sentence holding two statements (dash, semicolon, 'because', ', and I')",
            r"\s+[—–]\s+|\s+-{1,2}\s+|;\s*|:\s+|,\s*(?:so|but|because|since|as)\s+|\s+(?:because|since(?!\s+"
            + _A_TIME
            + r")|but)\s+|,?\s*and\s+(?=(?:i|we|my|our|i'm|we're)\b)",
            _I,
        ),
        Rule(
            "hedges",
            "drops hedging adverbs ('I personally prefer')",
            r"\b(personally|honestly|actually|basically|definitely|genuinely|frankly)\b,?\s*",
            _I,
        ),
        Rule(
            "subject",
            "the first-person subject a statement starts from",
            r"\b(i|we|my|our|i'm|we're|i've|we've|i'd|we'd)\b",
            _I,
        ),
        Rule(
            "since_last",
            "drops 'since we last chatted'",
            r",?\s*\bsince (?:we|i) (?:last )?(?:chatted|chat|spoke|talked|met|caught up|saw each other)(?: last)?\b"
            r"|,?\s*\bsince our last (?:chat|talk|conversation|catch-up|call)\b",
            _I,
        ),
        Rule(
            "comma_then_i",
            "cuts before ', I …' ('don't explain the basics, I'm a senior developer'; 'I'm Alice, I live in Berlin')",
            r",\s*(?=(?:i|we)(?:'m|'ve|'d)?\s)",
            _I,
        ),
        Rule("speaker_carries", "a past-tense clause after an 'I' clause is the speaker's ('…but grew up in London')"),
        Rule(
            "implicit_be",
            "a subjectless gerund is the speaker's ('Still training for it' -> 'I'm still training')",
            r"^((?:still|currently|now|also|always|mostly|just) )?"
            + GERUND
            + r"(?!.*\b(?:is|was|are|were|isn't|wasn't|aren't|weren't|has|had|sounds?|seems?|looks?|can|could|will|"
            r"would|should|might|must|makes?|made|gives?|gave|helps?|helped|brings?|brought|fills?|means?|meant|keeps?|"
            r"kept)\b)(?=.*\s)",
            _I,
        ),
        Rule(
            "implicit_verb",
            "a subjectless liking is the speaker's ('Love hiking')",
            r"^((?:still|also|really|totally|absolutely) )?(love|like|hate|enjoy|prefer)\b",
            _I,
        ),
        Rule(
            "here",
            "'Django shop here' -> 'We're a Django shop'",
            r"^(?:(?:a|an|just a|just an) )?(?P<what>[\w/+#.-]+(?: [\w/+#.-]+){0,2}) "
            r"(?P<who>shop|team|house|company|startup|user|developer|dev|engineer|programmer|person|fan) here$",
            _I,
        ),
        Rule(
            "before_object",
            "a 'my' after a preposition is in an object ('in my free time I paint')",
            r"\b(in|on|at|for|with|to|from|about|by|after|before|during|into|like|is|are|was|were|here's|there's|"
            r"that's|thanks|thank you)\s*,?\s*$|^" + GERUND,
            _I,
        ),
        Rule(
            "named_as_mine",
            "'Summer is my favorite season' -> 'my favorite season is summer'",
            r"^(?P<what>(?!(?:it|its|it's|that|this|these|those|they|he|she|which|there|here|what|because|so|and|"
            r"but|or|if)\b)[\w'-]+(?: [\w'-]+){0,3}) (?P<be>is|are|was|were) (?P<mine>(?:my|our) [\w'-]+"
            r"(?: [\w'-]+){0,6})$",
            _I,
        ),
        Rule(
            "relative",
            "a subject with 'I' in its relative clause ('The project I'm on uses Kafka')",
            r"^(?:the|this|that) [\w-]+(?: [\w-]+)? (?:i|we)(?:'m| am|'re| are)?(?: [\w-]+){0,2} "
            r"(?:is|are|was|were|has|have|uses|runs|needs|takes|makes|lets|gets)\b",
            _I,
        ),
        Rule(
            "someone_we",
            "'Everyone we love was there' is about other people",
            r"^(?:everyone|everybody|someone|somebody|anyone|anybody|nobody|people|all|those) (?:i|we)\b",
            _I,
        ),
        Rule("bare_possessive", "a bare 'my wife' states nothing"),
        # Who "we" is when rewriting to the third person (phrasing.py).
        Rule(
            "household",
            "'we live…', 'our kids' is the user's family",
            r"^we(?:'re| are)? (?:(?:still|just|recently|now|also|both|all) )*(?:live|lived|got married|are married|"
            r"'re married|are expecting|'re expecting|have (?:a|one|two|three|four|five|\d+) (?:kids?|children|sons?|"
            r"daughters?|bab(?:y|ies)|grandchildren))\b|^our (?:kids?|children|sons?|daughters?|bab(?:y|ies)|family|"
            r"home|house|flat|apartment|neighbou?rs?)\b",
            _I,
        ),
        Rule(
            "at_work",
            "work words make 'we' the user's team",
            r"\b(?:use|uses|using|deploy\w*|ship|ships|shipping|release\w*|stack|code|coding|codebase|repos?|"
            r"repository|sprints?|standups?|on-prem|cloud|servers?|databases?|api|apis|production|staging|customers?|"
            r"clients?|products?|offices?|company|startup|team|colleagues?|co-?workers?|projects?|deadlines?|"
            r"migrat\w*|switched|software|framework|libraries|library|hiring|roadmap|shop|job|business|store|firm|"
            r"at work|services?|builds?|containers?|pull requests?|branch(?:es)?|incidents?|rollouts?|pipelines?|"
            r"work(?:s|ed|ing)? (?:at|for) \w+)\b",
            _I,
        ),
        Rule(
            "together",
            "'together', 'each other' make 'we' the user and others",
            r"\b(?:together|each other|one another|both|all of us|we all|us all)\b",
            _I,
        ),
        # Wishes addressed to the assistant (offline.py).
        Rule(
            "wish_never",
            "'never suggest X' -> does not want the assistant to suggest X",
            r"^(?:please )?(?:never|don't ever|do not ever|don't|do not) "
            r"(suggest|propose|recommend|use|mention|give|add|show|send|include|write|explain|apologi[sz]e|repeat|"
            r"call|contact)\b(.*)$",
            _I,
        ),
        Rule(
            "wish_always",
            "'always answer in …' -> wants the assistant to",
            r"^(?:please )?(always|never) (answer|reply|respond|write|use|give|keep|explain|show|include|format|talk|"
            r"speak)\b(.*)$",
            _I,
        ),
        Rule(
            "rather_you",
            "'I'd rather you didn't use emojis' -> a wish about the assistant",
            r"^(?:i|we)(?:'d| would) rather you (?P<not>didn't |did not |don't |do not |not |never )?"
            r"(?P<verb>[a-z]+)\b(?P<rest>.*)$",
            _I,
        ),
        Rule(
            "style",
            "'keep answers short' -> wants the assistant to",
            r"^(?:please )?(?P<verb>keep|make) (?:your |the |all |my )?(?P<what>answers|replies|responses|"
            r"explanations|summaries|code comments|comments)\b(?P<rest>[^,;]*)",
            _I,
        ),
        Rule(
            "stop_doing",
            "'stop using emojis' -> does not want the assistant to",
            r"^(?:please )?stop (?P<verb>using|adding|giving|writing|including|suggesting|recommending|apologi[sz]ing|"
            r"putting|explaining|repeating|summari[sz]ing|ending|starting)\b(?P<rest>.*)$",
            _I,
        ),
        Rule(
            "be_how",
            "'be blunt with me' -> wants the assistant to be blunt",
            r"^(?:please )?(?:always )?be (?P<how>(?:more |very |really |brutally |extra )?(?:blunt|direct|concise|"
            r"brief|honest|terse|succinct|formal|casual|patient|gentle|critical|precise|detailed|thorough))\b"
            r"(?P<rest>.*)$",
            _I,
        ),
        Rule(
            "imperative",
            "an imperative to the assistant, kept when it lasts",
            r"^(?:please )?(?:just |always )?(?P<verb>use|call|answer|reply|respond|write|give|show|keep|make|put|add|"
            r"include|format|explain|avoid|assume|stick|speak|talk|send|list|start|end|sign|address|cite|mention|"
            r"suggest|recommend)\b(?P<rest>.*)$",
            _I,
        ),
        Rule(
            "lasting",
            "'from now on', 'going forward': the imperative lasts",
            r"^(?:from now on|going forward|in (?:the )?future|by default),?\s+|,?\s+(?:from now on|going forward|"
            r"in (?:the )?future|by default)$",
            _I,
        ),
        Rule(
            "in_language",
            "'answer in German': a language lasts",
            r"^(?:please )?(?P<verb>answer|reply|respond|write|talk|speak)(?: to me)? in " + _LANGUAGES,
            _I,
        ),
        Rule("call_me", "'call me Sam': a name lasts", r"^(?i:(?:please )?(?:just )?call me )[A-Z][\w'-]*$"),
        Rule(
            "wish_points_back",
            "a wish whose object only the conversation names ('don't call me that')",
            r"\b(?:it|that|this|those|these|them|so)\.$",
        ),
        # Facts the rules write without the model (offline.py).
        Rule(
            "org",
            "'our team deploys on Fridays' -> an org fact",
            r"^(?:(?:our|the) (?:team|company|org|organisation|organization)|our (?:stack|tech stack|codebase|"
            r"infrastructure|infra|platform|product)) (always |usually )?(deploys?|ships?|releases?|uses?|runs?|"
            r"works?|has|is|are)\b",
            _I,
        ),
        Rule(
            "house_rule",
            "'every deployment must pass the smoke tests' -> a rule of the user's work",
            r"^(?!(?:it|this|that|these|those|there|you|your|he|she|they|his|her|their|everyone|everybody|someone|"
            r"people|i|we|my|our|the user)\b)(?:(?:every|each|all|no|the|any) )?(?:(?!(?:i|we|you|he|she|it|they|"
            r"user)\b)[a-z][\w-]* ){1,4}(?:must(?: not| never| always| only)? (?!be\b)[a-z]+\b.*"
            r"|must(?: not| never| always| only)? be (?:[a-z]+(?:ed|en)|done|kept|run|built|made|set|shown|written|"
            r"sent|put|left|held|paid|read|shipped)\b.*)$",
            _I,
        ),
        # What the model's candidates are kept or dropped by (offline.py).
        Rule(
            "maybe",
            "a maybe ('I could live on my motorbike') is no fact",
            r"^(?:i|we) (?:could|should|might|would)\b(?! (?:really |also )?(?:like|love|prefer|rather|consider)\b)",
            _I,
        ),
        Rule("i_think", "'I think I can …' is no fact", r"^(?:i|we) (?:think|guess|suppose|bet|imagine)\b", _I),
        Rule(
            "doing_now",
            "what the speaker is doing now ('I'm just sitting here') is no fact",
            r"^(?:i(?:'m| am)|we(?:'re| are)) (?:just |currently |still )?(?:sitting|listening|watching|"
            r"getting ready|about to|heading|on (?:my|our) way)\b",
            _I,
        ),
        Rule("grow_up", "'when I grow up' is no fact", r"\bwhen (?:i|we) grow up\b", _I),
        Rule(
            "one_time",
            "'tomorrow', 'one time', 'once': a moment, no fact",
            r"\b(?:tomorrow|one time|once(?! a (?:day|week|month|year)| (?:worked|lived|was|were|had|owned|"
            r"studied)\b))\b",
            _I,
        ),
        Rule(
            "fallback_constraint",
            "keeps a first-person constraint the model passed over ('we can't use GPL code')",
            r"^(?:i|we)(?:'m| am| are|'re|'d)? (?:can't|cannot|can not|must not|mustn't|(?:not|aren't|am not) "
            r"allowed|on-prem|on prem|air-gapped|allergic)\b",
            _I,
        ),
        Rule(
            "fallback_preference",
            "keeps an explicit preference the model passed over ('I prefer tabs')",
            r"^(?:i|we)(?:'m| am| are|'re|'d)? (?:prefer|rather|would rather)\b",
            _I,
        ),
        Rule(
            "fallback_goal",
            "keeps a stated goal the model passed over ('I'm trying to learn Rust')",
            r"^(?:i|we)(?:'m| am| are|'re|'d)? (?:trying to|learning|planning to|plan to|want to learn|aim to)\b",
            _I,
        ),
        Rule(
            "tool",
            "keeps a named tool after a verb of use ('I code in VS Code')",
            r"^(?i:i|we)(?: (?i:mostly|usually|mainly|primarily|always|normally|now|still))? "
            r"(?i:use|code in|write in|program in|develop in|work in|work with|build with|deploy (?:on|to)|host on|"
            r"run on|am on|are on) (?:[a-z]+ ){0,2}" + _NOT_A_TOOL + r"(?:[A-Z][\w+#.-]*|[a-z]+[A-Z][\w+#.-]*)",
        ),
        Rule(
            "points_back",
            "drops a fact whose object only the conversation names ('The user loves it.')",
            r"^The user(?:'s team)? (?:\w+ ){0,2}?\w+ (?:it|them|those|these|that|this|that one|this one)"
            r"(?=\.$| (?:on|in|at|for|with|to|from|every|all|a lot|so much|too|very|really|now)\b)",
        ),
        Rule(
            "points_back_there",
            "drops 'The user has never been there.'",
            r"^The user (?:has |had |would )?(?:\w+ )?(?:been|gone|went|goes|go|lived|moved|visited|"
            r"travel(?:l?ed|s)?) there\b",
        ),
        Rule(
            "cut_short",
            "drops a fact cut short ('The user cannot.', 'The user's husband is.')",
            r"\b(?:been|cannot|can't|can|theirs|mine|here|there|in|to|of|for|with|at|from|by)\.$"
            # or all its predicate is a verb that stands for one left out ("my cousin is [colour blind] as well")
            r"|^The user(?:'s(?: [\w'-]+){1,3})?(?: also| never| too)?"
            r" (?:is|are|was|were|does|did|has|have|will|would)\.$",
        ),
        Rule("says_nothing", "drops a possession with nothing said of it ('The user's best friend.')"),
        Rule(
            "constraint_cue",
            "'can't', 'by contract', 'allergic' make the kind a constraint",
            r"\b(can't|cannot|can not|must not|must never|must always|mustn't|not allowed|aren't allowed|"
            r"isn't allowed|contractually|by contract|for compliance|legally|on-prem|on prem|on-premises|"
            r"air-gapped|allergic)\b|^we must\b",
            _I,
        ),
        # Clearer wordings (offline.py).
        Rule("rather", "'I'd rather X' -> 'prefers to X'", r"^(i|we)('d| would) rather\b(?! you\b)", _I),
        Rule(
            "on_tool",
            "'We're on Postgres' -> 'uses Postgres'",
            r"^(?i:(i|we)(?:'m| am|'re| are) (?:all |still |now )?on )(?=[A-Z])" + _NOT_A_TOOL,
        ),
        Rule(
            "moved",
            "'I moved to Madrid' -> 'lives in Madrid'",
            r"^i (?:have |'ve |just |recently |finally )?moved to (?P<place>[A-Z][\w'-]*(?: [A-Z][\w'-]*)*)"
            r"(?P<rest>(?:,? (?:last|this|a few|two|three) (?:week|month|year|weeks|months|years)(?: ago)?"
            r"|,? (?:recently|lately|a while ago))?)$",
        ),
        Rule(
            "switched",
            "'we migrated to X' -> 'now uses X'",
            r"^(i|we) (?:have |'ve |just |recently )?(?:(?:migrated|switched|changed)(?: over| again)?,?"
            r"(?: (?:the|our|my) [\w-]+(?: [\w-]+)?)?|moved (?:the|our|my) [\w-]+(?: [\w-]+)?) "
            r"(?:from (?P<old>.+?) )?to (?P<new>.+)$",
            _I,
        ),
        Rule(
            "replaced",
            "'we replaced Redis with Valkey' -> 'now uses Valkey instead of Redis'",
            r"^(i|we) (?:have |'ve |just |recently )?replaced (?P<old>.+?) with "
            r"(?P<new>(?!(?:an? |the )?(?:new |other |different )?(?:one|ones|it|them|that|this)\b).+)$",
            _I,
        ),
        Rule(
            "trailing_time",
            "drops 'last month' after a switch",
            r"\s+(last|this|a few|two|three) (week|month|year|weeks|months|years|days)( ago)?$"
            r"|\s+(recently|yesterday|lately|a while ago)$",
            _I,
        ),
        # Verdicts (offline.py).
        Rule(
            "announces_change",
            "'now', 'no longer', 'switched': a change (a lower neighbour floor, no one-value veto)",
            r"\b(?:(?<!right )now|no longer|any ?more|switched|migrated|moved|changed|instead of|has become|"
            r"these days)\b",
            _I,
        ),
        Rule(
            "names",
            "the names and numbers a fact mentions",
            r"(?<!^)(?<![.!?] )\b([A-Z][\w+#.-]*|\w*\d[\w.]*)",
        ),
        Rule(
            "additive",
            "'also', 'another': an added fact is INDEPENDENT",
            r"\b(also|too|as well|another|a second)\b",
            _I,
        ),
        Rule(
            "one_named",
            "a new value for 'the user's <thing> is X' CONTRADICTS",
            r"^the user's ((?:[\w-]+ ){0,3}[\w-]+) is (?!not\b)(.+?)\.?$",
            _I,
        ),
        Rule(
            "one_home",
            "a new named place for 'the user lives in X' CONTRADICTS (one home at a time)",
            r"^The user (?:now |currently )?lives in ([A-Z][\w'.-]*(?:,? [A-Z][\w'.-]*)*)"
            r"(?: now| these days| nowadays)?\.?$",
        ),
        Rule(
            "someone_else",
            "a fact about someone else in the user's life (their boss, a child, a pet) never replaces or repeats one "
            "about the user or another person",
            r"^the user's (?:(?:best|closest|oldest|youngest|eldest|older|younger|little|big|new|former|ex-?) )?"
            r"(colleague|co-?worker|boss|manager|supervisor|wife|husband|partner|spouse|girlfriend|boyfriend|"
            r"fianc[eé]e?|daughter|son|child|children|kids?|baby|mother|mom|mum|father|dad|parents?|sister|brother|"
            r"siblings?|friend|neighbou?r|room-?mate|flatmate|grand(?:mother|father|ma|pa|parents?|son|daughter|"
            r"children|kids?)|aunt|uncle|cousin|niece|nephew|teammate|team lead|client|customer|doctor|therapist|"
            r"teacher|in-laws?|(?:mother|father|sister|brother)-in-law|dog|cat|pet|puppy|kitten|horse)s?\b",
            _I,
        ),
        Rule("contradicts_confidence", "the model's CONTRADICTS stands only when it is sure (CONTRADICTS_CONFIDENCE)"),
        Rule("common_ground", "a CONTRADICTS without a shared word or one-value relation is INDEPENDENT"),
        Rule("relation_support", "a CONTRADICTS needs the relation head's support"),
        Rule("duplicate_similarity", "a DUPLICATE needs a close rewording"),
        Rule("duplicate_leaning", "facts that lean differently (a liking, a dislike, neither) are no DUPLICATE"),
        Rule("names_differ", "facts naming different things are no DUPLICATE (one value: CONTRADICTS)"),
        Rule("one_word_swapped", "a rule with one word swapped repeats another only as close as any DUPLICATE"),
        Rule("two_likings", "liking one thing never CONTRADICTS liking another, unless the new one says it changed"),
        Rule("named_subject", "a fact that opens with someone else's name is about them, not the user"),
        Rule("same_text", "the same text is a DUPLICATE"),
        Rule(
            "negation",
            "a negated restatement CONTRADICTS ('likes Rust' / 'does not like Rust')",
            r"\b(not|no|never|no longer|doesn't|isn't|don't|cannot|can't)\b",
            _I,
        ),
        Rule(
            "changed",
            "an announced change CONTRADICTS what it replaces",
            r"\b(now|no longer|instead of|switched|migrated|moved (?:to|from)|changed|replaced|stopped|quit|gave up|"
            r"promoted)\b",
            _I,
        ),
        Rule("instead_of", "'instead of X' replaces only a fact naming X", r"\binstead of (.+?)\.?$", _I),
        Rule("still", "'still', 'again': a restatement is a DUPLICATE", r"\b(still|as always|again)\b", _I),
        Rule(
            "uses",
            "'is on Postgres' and 'uses Postgres' share a frame",
            r"\b(?:(?:is|are|am|runs?|running|relies|rely) on(?!-)|uses|using)\b",
        ),
        Rule(
            "likes",
            "a liking, for a turned feeling",
            r"\b(?:loves|likes|enjoys|adores|is (?:a )?(?:big |huge )?fan of|is fond of|is into)\b",
        ),
        Rule(
            "dislikes",
            "a dislike, for a turned feeling",
            r"\b(?:hates|dislikes|detests|loathes|can't stand|cannot stand|is sick of|is tired of)\b",
        ),
        Rule(
            "gave_up", "'quit', 'gave up' CONTRADICTS the activity", r"\b(?:quit|gave up|given up|stopped|no longer)\b"
        ),
        Rule(
            "wish_language",
            "a new answer language replaces the old",
            r"\bwants the assistant to (?:answer|reply|respond|write|talk|speak)(?: to them)? in " + _LANGUAGES,
            _I,
        ),
        Rule(
            "wish_name",
            "a new name to be called replaces the old",
            r"\bwants the assistant to call them (?P<value>[A-Z][\w'-]*)",
        ),
        Rule(
            "keeps_rule",
            "two rules pile up unless one rewords the other",
            r"\b(?:must|mustn't|may not|(?:is|are) not allowed|(?:has|have) to|wants the assistant|"
            r"does not want the assistant|(?:cannot|can't|can not) (?!wait|believe|imagine|stand|help|remember|say|"
            r"get enough|stop)[a-z])",
            _I,
        ),
    )
}
R = SimpleNamespace(**TABLE)

"""How facts are shown on every page: one kind order, one set of kind names, one date style,
and the person's own facts read in the second person."""

import re
import uuid
from datetime import timedelta

from django.urls import reverse
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.dateparse import parse_datetime
from django.utils.html import escape
from django.utils.safestring import mark_safe

# kind -> (one, many, what it means to the person), in the person's own words.
# Which facts reach the assistant is recall's decision (memoryapp.recall.tier1_ids), shown per fact.
KIND_NAMES = {
    "constraint": (
        "Constraint",
        "Constraints",
        "Rules the assistant must respect. The first ones are given in every conversation, the rest when relevant.",
    ),
    "profile": (
        "About you",
        "About you",
        "Who you are and what you work with. A few are given in every conversation, the rest when relevant.",
    ),
    "preference": ("Preference", "Preferences", "How you like things done. Given to the assistant when relevant."),
    "goal": ("Goal", "Goals", "What you are working towards. Given to the assistant when relevant."),
}
# What an empty kind says on its filter.
EMPTY_KIND = {
    "constraint": "No constraints yet.",
    "profile": "Nothing about you yet.",
    "preference": "No preferences yet.",
    "goal": "No goals yet.",
}
# How each live fact reaches the assistant, in the person's words (see fact_use).
USE_ALWAYS = "In every conversation"
USE_RELEVANT = "When relevant"
USE_IDLE = "Not used lately"
USE_OFF = "Not used: memory is off"
LATELY_DAYS = 30
# Why the nightly job forgot a fact (memoryapp.forgetting's rule names), in the person's words.
FORGET_REASONS = {
    "stale_goal": "A goal not mentioned for a long time",
    "never_recalled": "Never needed in a conversation",
}
# For org facts the profile kind describes the organisation, not "you".
ORG_KIND_NAMES = {"profile": ("About the team", "About the team")}
DATE_FORMAT = "j M Y"  # 3 Dec 2026, on every page


def kind_name(kind, plural=False, org=False):
    """The display name of a kind (org facts' profile kind reads 'About the team')."""
    names = ORG_KIND_NAMES.get(kind) if org else None
    names = names or KIND_NAMES.get(kind, (kind, kind))
    return names[1] if plural else names[0]


def how_long_ago(moment, now):
    """'just now', '5 minutes ago', '3 hours ago', 'yesterday', else the date."""

    delta = now - moment
    if delta < timedelta(minutes=1):
        return "just now"
    if delta < timedelta(hours=1):
        n = int(delta.total_seconds() // 60)
        return f"{n} minute{'s' if n != 1 else ''} ago"
    if delta < timedelta(days=1):
        n = int(delta.total_seconds() // 3600)
        return f"{n} hour{'s' if n != 1 else ''} ago"
    if delta < timedelta(days=2):
        return "yesterday"
    if delta < timedelta(days=7):
        return f"{delta.days} days ago"
    return date_format(moment, DATE_FORMAT)


def day(moment):
    """The one date format (a datetime, or ISO text as in the export document); '' for none."""
    if isinstance(moment, str):
        moment = parse_datetime(moment)
    return date_format(timezone.localtime(moment), DATE_FORMAT) if moment else ""


def usd(amount):
    """A cost in dollars: '$0' for nothing, cents from a cent up ('$1.25'), else two significant digits ('$0.0012')."""
    amount = float(amount or 0)
    if amount == 0:
        return "$0"
    if abs(amount) >= 0.01:
        return f"${amount:,.2f}"
    return f"${amount:.2g}" if abs(amount) >= 0.0001 else "under $0.0001"


def why_in_words(reason):
    """A judge's reason for a person to read: without the outcome the page already states ("to confirm: ...")."""
    return re.sub(r"^(?:to confirm|refused): ", "", str(reason or ""))


# A fact's audit events in words, for the person's readable download (the JSON keeps the codes).
EVENT_WORDS = {
    "created": "remembered",
    "confirmed": "said again",
    "superseded": "replaced",
    "corrected": "corrected",
    "deleted": "deleted",
    "expired": "forgotten, as unused or out of date",
    "restored": "brought back",
    "proposed": "suggested to your organisation",
    "approved": "approved",
    "rejected": "rejected",
    "pending": "held for your word",
    "kept": "kept",
    "discarded": "discarded",
    "lapsed": "dropped, never answered",
}
ACTOR_WORDS = {
    "extractor": "from a conversation",
    "user": "you",
    "staff": "support staff",
    "org_admin": "an organisation admin",
    "forgetting": "forgetting",
    "agent": "an assistant (API)",
    "mcp": "an assistant (MCP)",
}


# What an event about no stored fact is about (a candidate held for the person's word, a suggestion to the org).
ABOUT_NO_FACT = {
    "pending": "something held for your word",
    "discarded": "something held for your word",
    "lapsed": "something held for your word",
    "proposed": "a suggestion to your organisation",
}
# The audit trail's reasons, in words; ids of candidates and proposals are dropped (they mean nothing here).
REASON_WORDS = {
    "contradicts": "a newer fact said something different",
    "corrected": "a correction",
    "staff": "support staff",
    **{rule: words.lower() for rule, words in FORGET_REASONS.items()},
}
_REASON_IDS = re.compile(r"\b(?:candidate [0-9a-f-]{36}|proposal \d+)(?::\s*)?|\s*\((?:created|superseded|confirmed)\)")


def reason_in_words(reason):
    """An audit-trail reason for the person: no internal ids or codes ("candidate …: to confirm: …")."""
    reason = _REASON_IDS.sub("", reason or "").replace("to confirm: ", "").strip(" ;:")
    return REASON_WORDS.get(reason, reason)


def history_in_words(doc):
    """The export document's fact events, each with what it is about and in words, oldest first."""
    texts = {str(f["id"]): f["text"] for f in doc["facts"]}
    waiting = {w["id"]: w["text"] for w in doc.get("waiting_for_you", [])}
    rows = []
    for e in doc["fact_events"]:
        held = re.search(r"candidate ([0-9a-f-]{36})", e["reason"] or "")
        rows.append(
            {
                "at": parse_datetime(e["at"]),
                "text": texts.get(e["fact"]) or (waiting.get(held[1]) if held else None),
                "about": ABOUT_NO_FACT.get(e["action"], "a fact") if e["fact"] is None else "a fact since deleted",
                "what": EVENT_WORDS.get(e["action"], e["action"]),
                "by": ACTOR_WORDS.get(e["actor"], e["actor"]),
                "why": reason_in_words(e["reason"]),
            }
        )
    return rows


def possessive(name):
    """'Acme' -> "Acme's", 'Demo Logistics' -> "Demo Logistics'"."""
    name = str(name)
    return f"{name}'" if name.endswith(("s", "S")) else f"{name}'s"


def how_many_times(n):
    """1 -> 'once', 2 -> 'twice', else 'n times'."""
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


_IRREGULAR = {"is": "are", "was": "were", "has": "have", "does": "do", "doesn't": "don't", "isn't": "aren't"}
_SUBJECT = re.compile(r"^The user(?:'s|’s)?\b", re.IGNORECASE)
# Words that may stand between "The user" and the verb ("now works", "no longer eats", "always writes"):
# they stay as they are, and the verb after them changes.
_BEFORE_THE_VERB = r"(?:now|also|still|never|always|often|sometimes|already|just|even|no|longer|not|\w{2,}ly|[^\w\s]+)"
_LEAD = re.compile(rf"^The user ((?:{_BEFORE_THE_VERB}\s+)*)([^\s.,;:!?]+)(.*)$", re.IGNORECASE | re.DOTALL)
_INNER = re.compile(r"\bthe user(?:'s|’s)\b|\bthe user\b", re.IGNORECASE)


_THEIR = re.compile(r"\b(?:their|theirs|themselves|themself)\b", re.IGNORECASE)
_YOURS = {"their": "your", "theirs": "yours", "themselves": "yourself", "themself": "yourself"}


def _verb_for_you(verb):
    low = verb.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if re.search(r"[^aeiou]ies$", low):
        return verb[:-3] + "y"
    if re.search(r"(ss|sh|ch|x|z|o)es$", low):
        return verb[:-2]
    if low.endswith("s") and not low.endswith("ss"):
        return verb[:-1]
    return verb


def as_yours(text):
    """'The user prefers X' -> 'You prefer X', for the person's own page. Display only: stored text
    stays as extracted. Sentences that do not start with 'The user' are shown unchanged."""
    if text.lower().startswith(("the user's ", "the user’s ")):
        rest = text[len("The user's ") :]
        return _INNER.sub(_inner_you, "Your " + rest)
    match = _LEAD.match(text)
    if match is None:
        return text
    before, verb, rest = match.groups()
    # With the user as subject, "their" is theirs: the rewrite of "I take my kids" says "their kids".
    rest = _THEIR.sub(lambda m: _YOURS[m[0].lower()], rest)
    return _INNER.sub(_inner_you, "You " + before + _verb_for_you(verb) + rest)


def _inner_you(match):
    return "your" if match.group(0).lower().endswith(("'s", "’s")) else "you"


# --- one of the person's facts, as a list item ------------------------------------------------
# Written in Python rather than as a template partial: My memory shows 50 of these per page, and
# the template engine spent ~2 ms on each (variable lookups, filters, a URL reversal per row).
# It is the only rendering of the row: the list, a fact's history and the htmx answers use it.

_ANY_ID = uuid.UUID(int=0)


def urls_by_id(name, *args):
    """A function from an id to the URL of route `name` (after `args`), reversing it once, not once per row."""
    pattern = reverse(name, args=[*args, _ANY_ID])
    return lambda object_id: pattern.replace(str(_ANY_ID), str(object_id))


def fact_urls():
    """A function from one of the person's fact ids to its page's URL."""
    return urls_by_id("me:fact")


def fact_use(fact, tier1, memory_on, now):
    """How a live fact reaches the assistant now: in every conversation (tier 1 took it), when relevant,
    not used lately (not recalled for LATELY_DAYS), or not at all while memory is off."""
    if not memory_on:
        return USE_OFF
    if fact.id in tier1:
        return USE_ALWAYS
    if (fact.last_recalled_at or fact.created_at) < now - timedelta(days=LATELY_DAYS):
        return USE_IDLE
    return USE_RELEVANT


_USE_CLASS = {USE_ALWAYS: "always", USE_RELEVANT: "relevant", USE_IDLE: "idle", USE_OFF: "off"}


def _learned(fact):
    when = day(fact.created_at)
    if fact.origin == "user":
        return f"Your correction, {when}"
    if fact.origin == "staff":
        return f"Changed by support, {when}"
    if fact.origin in ("agent", "mcp"):
        return f"Added by your assistant, {when}"
    return f"Learned {when}"


def fact_item(fact, now, url, fresh=False, just_corrected=False, on_history=False, use=""):
    """The <li> for one of the person's own facts: text, actions when live, where it came from, last use,
    and `use`, how it reaches the assistant (fact_use)."""
    fid = escape(fact.id)
    text = escape(as_yours(fact.text or ""))
    state = fact.state
    out = [f'<li class="fact{" fresh" if fresh or just_corrected else ""}" id="fact-{fid}">\n  <div class="fact-head">']
    out.append(f'    <p class="text">{text}</p>')
    if state != "live":
        out.append(f'    <span class="badge {state}">{"replaced" if state == "superseded" else state}</span>')
    else:
        href = escape(url)
        history = "" if on_history else f'\n        <a href="{href}">History</a>'
        out.append(
            '    <details class="row-menu">\n'
            f'      <summary aria-label="Actions for: {text}" title="Actions">'
            '<span aria-hidden="true">⋯</span></summary>\n'
            '      <div class="row-menu-panel">\n'
            f'        <a href="{href}correct/" hx-get="{href}correct/" hx-target="#fact-{fid}" '
            'hx-swap="outerHTML">Correct</a>'
            f"{history}\n"
            f'        <a class="destructive" href="{href}delete/" hx-get="{href}delete/" hx-target="#fact-{fid}" '
            'hx-swap="outerHTML">Delete…</a>\n'
            "      </div>\n    </details>"
        )
    out.append('  </div>\n  <div class="meta">')
    if use and state == "live":
        out.append(f'    <span class="use use-{_USE_CLASS.get(use, "relevant")}">{escape(use)}</span>')
    out.append(f"    <span>{escape(_learned(fact))}</span>")
    if fact.confirmation_count > 1:
        out.append(f"    <span>Heard again {how_many_times(fact.confirmation_count - 1)}</span>")
    recalled = fact.last_recalled_at
    used = f"Last used {escape(how_long_ago(recalled, now))}" if recalled else "Not used in a conversation yet"
    out.append(f"    <span>{used}</span>\n  </div>")
    if just_corrected:
        saved = "Saved. The assistant will use your version from now on."
        out.append(f'  <p class="small ok-note" role="status">{saved}</p>')
    out.append("</li>")
    return mark_safe("\n".join(out))  # noqa: S308 - every value above is escaped


# What a support access log entry's page was, in words (memoryapp.support_access's page names).
ACCESS_WORDS = {
    "find": "a search",
    "poisoning audit": "a safety check of stored facts",
    "recall review": "a review of the memory given to the assistant",
    "extraction run": "how a conversation was read for memory",
    "forgetting run": "the list of facts memory forgot",
    "admin": "the administration site",
}


def _short(text, limit=60):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + "…"


def access_words(page, facts, sessions):
    """What support looked at, in plain words: "a fact: 'Your team is on-prem…'", "a search". `facts` and
    `sessions` map ids (text) to the person's facts and conversations that log entries name."""
    name, _, ref = page.partition(" ")
    if name == "fact":
        fact = facts.get(ref)
        return f"a fact: “{_short(as_yours(fact.text))}”" if fact else "a fact since deleted"
    if name == "conversation":
        session = sessions.get(ref)
        return f"a conversation from {day(session.started_at)}" if session else "a conversation since deleted"
    if page.startswith("admin:"):
        return ACCESS_WORDS["admin"]
    for known, words in ACCESS_WORDS.items():
        if page == known or page.startswith(known + " "):
            return words
    return "your memory"


def _person_name(user, gone):
    if user is None:
        return gone
    return user.get_full_name() or user.username


def org_fact_item(fact, actions=None):
    """The <li> for one live org fact: text, who added, approved or corrected it, when; with
    `actions` (edit URL, delete URL, CSRF token) the admin's menu."""
    fid = escape(fact.id)
    text = escape(fact.text)
    admin = _person_name(fact.added_by, "a former admin")
    proposal = getattr(fact, "proposal", None)
    if proposal is not None:
        who = f"Proposed by {_person_name(proposal.proposed_by, 'a former member')}, approved by {admin}"
    elif getattr(fact, "is_correction", False):
        who = f"Corrected by {admin}"
    else:
        who = f"Added by {admin}"
    created = timezone.localtime(fact.created_at)
    out = [
        f'<li class="fact" id="fact-{fid}">\n  <div class="fact-head">\n  <div class="fact-body">',
        f'  <div class="text">{text}</div>\n  <div class="meta">',
        f"    <span>{escape(who)}</span>",
        f'    <span><time datetime="{created.isoformat()}">{date_format(created, DATE_FORMAT)}</time></span>',
    ]
    if fact.confirmation_count > 1:
        out.append(f"    <span>Heard again {how_many_times(fact.confirmation_count - 1)}</span>")
    out.append("  </div>\n  </div>")
    if actions is not None:
        edit, delete = (escape(a) for a in actions)
        out.append(
            '  <details class="row-menu">\n'
            f'    <summary aria-label="Actions for: {text}" title="Actions">'
            '<span aria-hidden="true">⋯</span></summary>\n'
            '    <div class="row-menu-panel">\n'
            f'      <a href="{edit}" hx-get="{edit}" hx-target="#fact-{fid}" hx-swap="outerHTML">Correct</a>\n'
            # Without JavaScript the link opens a confirmation page; with it, htmx asks and posts.
            f'      <a class="destructive" href="{delete}" hx-post="{delete}" hx-target="#org-facts" '
            'hx-swap="outerHTML" hx-confirm="Delete this org fact for every member?">'
            f'Delete…<span class="visually-hidden"> “{text}”</span></a>\n'
            "    </div>\n  </details>"
        )
    out.append("  </div>\n</li>")
    return mark_safe("\n".join(out))  # noqa: S308 - every value above is escaped

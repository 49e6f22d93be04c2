"""How facts are shown on every page: one kind order, one set of kind names, one date style,
and the person's own facts read in the second person."""

import re
from datetime import timedelta

from django.utils.dateformat import format as date_format

# Always-on kinds first: they are in every prompt.
KIND_ORDER = ["constraint", "profile", "preference", "goal"]
# kind -> (one, many, what it means to the person)
KINDS = {
    "constraint": ("Constraint", "Constraints", "Rules the assistant must respect. Always given to the assistant."),
    "profile": ("About you", "About you", "Who you are and what you work with. Always given to the assistant."),
    "preference": ("Preference", "Preferences", "How you like things done. Given to the assistant when relevant."),
    "goal": ("Goal", "Goals", "What you are working towards. Given to the assistant when relevant."),
}
# For org facts the profile kind describes the organisation, not "you".
ORG_KIND_NAMES = {"profile": ("About the team", "About the team")}
KIND_CHOICES = [
    ("constraint", "Constraint: a rule the assistant must respect"),
    ("profile", "Profile: who someone is, what they work with"),
    ("preference", "Preference: how things should be done"),
    ("goal", "Goal: something being worked towards"),
]
# The neutral names, for staff (a profile fact is not "about you" to a support agent).
KIND_LABELS = {"constraint": "Constraint", "profile": "Profile", "preference": "Preference", "goal": "Goal"}
DATE_FORMAT = "j M Y"  # 3 Dec 2026, on every page


def kind_name(kind, plural=False, org=False):
    """The display name of a kind (org facts' profile kind reads 'About the team')."""
    names = ORG_KIND_NAMES.get(kind) if org else None
    names = names or KINDS.get(kind, (kind, kind))
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


def how_many_times(n):
    """1 -> 'once', 2 -> 'twice', else 'n times'."""
    return {0: "never", 1: "once", 2: "twice"}.get(n, f"{n} times")


_IRREGULAR = {"is": "are", "was": "were", "has": "have", "does": "do", "doesn't": "don't", "isn't": "aren't"}
_SUBJECT = re.compile(r"^The user(?:'s|’s)?\b", re.IGNORECASE)
_LEAD = re.compile(r"^The user (\S+)(.*)$", re.IGNORECASE | re.DOTALL)
_INNER = re.compile(r"\bthe user(?:'s|’s)\b|\bthe user\b", re.IGNORECASE)


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
    verb, rest = match.groups()
    return _INNER.sub(_inner_you, "You " + _verb_for_you(verb) + rest)


def _inner_you(match):
    return "your" if match.group(0).lower().endswith(("'s", "’s")) else "you"

"""The vocabulary of facts: the kinds, their one order and names, the size of a fact, and negation."""

import re
from typing import Literal

# The order is part of the learned models' weights (a kind's index is its output unit): append only.
KINDS = ("preference", "constraint", "profile", "goal")
# The kinds as a type, for the API's and the MCP tools' schemas.
KindName = Literal[KINDS]
# Tier 1 of recall: the kinds given to the assistant before any similarity is computed.
ALWAYS_ON_KINDS = ("constraint", "profile")
# One order wherever facts are listed or put in a block: always-on kinds first.
KIND_ORDER = ("constraint", "profile", "preference", "goal")
# The neutral names, for staff and agents (a profile fact is not "about you" to a support agent).
KIND_LABELS = {"constraint": "Constraint", "profile": "Profile", "preference": "Preference", "goal": "Goal"}
# What each kind is, for the forms that ask for one, in the names the pages use: a person's profile
# facts are "About you", an organisation's "About the team".
KIND_CHOICES = [
    ("constraint", "Constraint: a rule the assistant must respect"),
    ("profile", "About the team: who the team is, what it works with"),
    ("preference", "Preference: how things should be done"),
    ("goal", "Goal: something being worked towards"),
]
PERSONAL_KIND_CHOICES = [
    ("profile", "About you: who you are, what you work with") if kind == "profile" else (kind, label)
    for kind, label in KIND_CHOICES
]
FACT_MAX_CHARS = 200
# How a fact's words are matched (search and recall's word side): English stemming with accents
# folded, so "cafe" finds "café" and "Zurich" "Zürich". A PostgreSQL text search configuration made
# by migration 0015 (the unaccent dictionary, then english_stem).
TEXT_SEARCH_CONFIG = "memory_english"
# Longer text is refused (the API and the MCP tools) before the fact checks spend time reading it.
FACT_INPUT_MAX_CHARS = 2000

# Words a full stop follows without ending a sentence ("Dr. Ng", "St. Agnes"); a single capital, an initial
# ("Ursula K. Le Guin"), is not an end either. Read by the fact's shape check and the keyless extractor.
TITLES = ("Mr", "Mrs", "Ms", "Dr", "St", "Jr", "Sr", "Mt", "Prof")

# A sentence that denies or withdraws what it states ("is not", "no longer", "can't"). A feature of the
# learned verdict classifier (its weights were trained with exactly this) and of the offline rules.
NEGATION = re.compile(r"\b(not|no|never|nothing|none|nobody|neither|nor|without|cannot|\w+n't)\b", re.I)


def kind_rank(kind):
    """A kind's place in KIND_ORDER (unknown kinds last)."""
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)

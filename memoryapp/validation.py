"""The shape squeeze: what a fact may look like, whoever wrote it."""

import re
import unicodedata

from memoryapp.models import FACT_MAX_CHARS, KINDS

# Zero-width, bidi override/isolate and other invisible format characters.
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\u00ad]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SPACE = re.compile(r"\s+")
# A sentence end followed by more text means more than one sentence.
_SENTENCE_BREAK = re.compile(r"[.!?](?=\s+[A-Z\"'(])|;|\n")

# Phrasings that address the assistant or grant permissions rather than describe the user.
INSTRUCTION_PATTERNS = [
    r"\bignore (all |any )?(previous|prior|above|earlier) (instructions|prompts?|messages)",
    r"\bdisregard (all |any )?(previous|prior|above|earlier|your)",
    r"\byou are now\b",
    r"\b(note|message|instructions?) (for|to) the (assistant|ai|model|agent)\b",
    r"\bthe (assistant|ai|model|agent) (must|should|shall|may|is allowed|can)\b",
    r"\b(is|are|has been|have been) (authori[sz]ed|permitted|allowed) to\b",
    r"\bhas authori[sz]ed\b",
    r"\balways (allow|approve|grant|accept|comply)\b",
    r"\bnever (refuse|deny|decline|ask for (confirmation|approval))\b",
    r"\b(grant|give) (the user )?(unrestricted|unlimited|full|admin) (access|refunds?|permissions?)\b",
    r"\bunrestricted (refunds?|access)\b",
    r"\bremember (this|that)\b",
    r"\bsystem prompt\b",
    r"^(ignore|disregard|forget|do not|don't|always|never|you must|you should|please)\b",
]
_INSTRUCTION = re.compile("|".join(INSTRUCTION_PATTERNS), re.IGNORECASE)


def normalise(text):
    """Fact text as stored: NFC, no invisible or control characters, single spaces."""
    text = unicodedata.normalize("NFC", str(text))
    text = _INVISIBLE.sub("", text)
    text = _CONTROL.sub(" ", text)
    return _SPACE.sub(" ", text).strip()


def looks_like_instruction(text):
    """True when the text reads as an instruction to the assistant or a grant of permission."""
    return bool(_INSTRUCTION.search(text))


def fact_problem(text, kind):
    """Why (text, kind) is not a storable fact, or None when it is."""
    if not isinstance(text, str) or not isinstance(kind, str):
        return "text and kind must be strings"
    if kind not in KINDS:
        return f"kind must be one of {', '.join(KINDS)}"
    if not text:
        return "the text is empty"
    if len(text) > FACT_MAX_CHARS:
        return f"the text is longer than {FACT_MAX_CHARS} characters"
    if _SENTENCE_BREAK.search(text):
        return "the text is more than one sentence"
    if looks_like_instruction(text):
        return "the text reads as an instruction to the assistant, not a fact about the user"
    return None

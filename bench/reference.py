"""An exact reference for recall, written from the specification and sharing no code with memoryapp.recall.

The vector side is plain numpy cosine, of the vectors rounded as they are stored. The text side is a
Python re-statement of what PostgreSQL does for
`to_tsvector('memory_english', text) @@ to_tsquery('memory_english', 'w1 | w2 | ...')` ranked by `ts_rank`:
words are lower-cased, their accents removed (the unaccent dictionary), English stop words dropped,
the rest reduced by the Snowball English stemmer.
For an OR query with default weights (every lexeme in weight class D = 0.1), PostgreSQL's
`calc_rank_or` (src/backend/utils/adt/tsrank.c) scores each query lexeme found in the text as
0.1 x (1 + 1/2² + … + 1/n²) for its n occurrences, divides that by π²/6 (the series' limit), and
divides the sum by the number of distinct lexemes in the query.
PostgreSQL's parser knows more token types (hyphenated compounds, e-mail addresses, numbers with
dots), so the text side can differ in rare cases: its agreement is measured, not assumed.
The fusion is reciprocal rank fusion as defined by Cormack, Clarke and Buettcher (SIGIR 2009):
score(d) = sum over rankings of 1 / (k + rank(d)), with k = 60 as in the paper.
"""

import re
import unicodedata
from collections import Counter

import numpy as np
import snowballstemmer

RRF_K_FROM_PAPER = 60  # Cormack et al. 2009, section 2: "k = 60 was fixed during a pilot investigation"
WEIGHT_D = 0.1  # PostgreSQL's default weight for lexemes of class D (all of ours)
ZETA_2 = 1.64493406685  # π²/6, the limit of the sum of 1/i², as tsrank.c writes it
MAX_QUERY_WORDS = 64  # the API documents that only the message's first 64 words are searched

# PostgreSQL's share/tsearch_data/english.stop (the Snowball English stop list), written out here.
ENGLISH_STOP = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
    herself it its itself they them their theirs themselves what which who whom this that these those am is are
    was were be been being have has had having do does did doing a an the and but if or because as until while of
    at by for with about against between into through during before after above below to from up down in out on
    off over under again further then once here there when where why how all any both each few more most other
    some such no nor not only own same so than too very s t can will just don should now""".split()
)
_TOKEN = re.compile(r"[^\W_]+")
_STEMMER = snowballstemmer.stemmer("english")


def _folded(text):
    """Lower case without accents: "Zürich" → "zurich" (unaccent's rules for letters with marks)."""
    decomposed = unicodedata.normalize("NFKD", (text or "").lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def lexemes(text):
    """The stemmed, stop-word-free words of `text`, one per occurrence, in order."""
    words = [w for w in _TOKEN.findall(_folded(text)) if w not in ENGLISH_STOP]
    return _STEMMER.stemWords(words)


def query_lexemes(message):
    """The lexemes of the message's first 64 words of two or more characters, as a set (an OR query)."""
    words = [w for w in _TOKEN.findall(_folded(message)) if len(w) >= 2][:MAX_QUERY_WORDS]
    return set(_STEMMER.stemWords([w for w in words if w not in ENGLISH_STOP]))


def text_rank(text, query):
    """ts_rank of `text` for an OR query of lexemes (the formula in the module's docstring)."""
    found = Counter(lexeme for lexeme in lexemes(text) if lexeme in query)
    per_lexeme = (WEIGHT_D * sum(1 / j**2 for j in range(1, n + 1)) / ZETA_2 for n in found.values())
    return sum(per_lexeme) / len(query) if query else 0.0


def vector_ranking(vectors, message_vector, candidates, ids, floor, precision=np.float32):
    """Candidates at or above the similarity floor, most similar first (ties by id); and all similarities.

    Cosine of the vectors as stored at `precision` (recall ranks half-precision copies: np.float16).
    """
    # einsum, not `@`: a BLAS call leaves OpenBLAS's threads spinning on both cores for a while
    # afterwards, which slowed the next timed recall's embedding by a third (docs/benchmarks.md).
    stored = np.asarray(vectors, dtype=precision).astype(np.float64)
    message = np.asarray(message_vector, dtype=precision).astype(np.float64)
    dots = np.einsum("ij,j->i", stored, message)
    norms = np.sqrt(np.einsum("ij,ij->i", stored, stored)) * np.sqrt(message @ message)
    sims = np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)
    ranked = sorted((i for i in candidates if sims[i] >= floor), key=lambda i: (-sims[i], ids[i]))
    return ranked, sims


def text_ranking(texts, message, candidates, ids):
    """Candidates sharing a lexeme with the message, highest rank first (ties by id)."""
    query = query_lexemes(message)
    if not query:
        return []
    ranks = {i: text_rank(texts[i], query) for i in candidates}
    return sorted((i for i, r in ranks.items() if r > 0), key=lambda i: (-ranks[i], ids[i]))


def fuse(rankings, ids, k=RRF_K_FROM_PAPER):
    """Reciprocal rank fusion of several rankings of the same items; best first, ties by id."""
    score = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            score[item] = score.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(score, key=lambda i: (-score[i], ids[i]))


def agreement(got, expected):
    """(same set, same order) of two lists of ids."""
    return set(got) == set(expected), list(got) == list(expected)

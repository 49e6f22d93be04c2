"""Searching facts by their words: one meaning of "matches" for the person's page, the console and the
agents (API and MCP)."""

from django.contrib.postgres.search import SearchQuery
from django.db.models import Q

from memoryapp.vocabulary import TEXT_SEARCH_CONFIG

QUERY_MAX_CHARS = 200


def clean_query(query):
    """The query as searched: no NUL, no surrounding space, at most QUERY_MAX_CHARS characters."""
    return (query or "").replace("\x00", "").strip()[:QUERY_MAX_CHARS]


def matching(queryset, query):
    """Facts of `queryset` whose text matches `query`: full text with English stemming and accents
    folded ("cache" finds "caching", "on prem" "on-prem", "cafe" "café"; quotes for a phrase, -word to
    exclude), or the query as a
    literal piece of the text (a fragment of a word, a name the stemmer does not know)."""
    query = clean_query(query)
    if not query:
        return queryset
    # search_vector is a stored generated column (to_tsvector(TEXT_SEARCH_CONFIG, text)), so the full-text side
    # reads no text at query time; the substring side keeps exact fragments ("Postg") findable.
    words = SearchQuery(query, config=TEXT_SEARCH_CONFIG, search_type="websearch")
    return queryset.filter(Q(search_vector=words) | Q(text__icontains=query))

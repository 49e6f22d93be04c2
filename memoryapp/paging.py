"""One keyset pager for every list, on pages and in the API: no OFFSET, no COUNT, an opaque cursor.

A page is read by its position after the last row of the previous one, on an ordering whose last
field is unique (an id), so rows written meanwhile neither repeat nor vanish between pages, and a
deep page costs what the first one does.
"""

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from operator import or_

from django.core.exceptions import ValidationError
from django.db.models import Q


class BadCursor(ValueError):
    """The cursor was not one this service handed out."""


FIRST = ""  # the previous page's cursor when the previous page is the first


@dataclass
class Page:
    rows: list
    next_cursor: str | None  # None on the last page
    previous_cursor: str | None = None  # None on the first page (and where it was not asked for); FIRST


def _field_value(row, name):
    if isinstance(row, dict):  # a .values() queryset
        return row[name]
    value = row
    for part in name.split("__"):
        value = getattr(value, part)
    return value


def _encode(values):
    plain = [{"t": v.isoformat()} if isinstance(v, datetime) else v if isinstance(v, int) else str(v) for v in values]
    return base64.urlsafe_b64encode(json.dumps(plain, separators=(",", ":")).encode()).decode().rstrip("=")


def _decode(cursor, count):
    try:
        plain = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode())
        if not isinstance(plain, list) or len(plain) != count:
            raise ValueError("wrong length")
        return [datetime.fromisoformat(v["t"]) if isinstance(v, dict) else v for v in plain]
    except (ValueError, TypeError, KeyError, binascii.Error) as exc:  # UnicodeDecodeError is a ValueError
        raise BadCursor("cursor: not a cursor from a previous page") from exc


def position_of(cursor, order):
    """The values on `order` of the row a page's cursor follows (BadCursor for one we never handed out)."""
    return _decode(cursor, len(tuple(order)))


def _after(order, values, before=False):
    """Rows after (or `before`) the position `values` on `order`: (a > x) or (a = x and b > y) or …"""
    clauses = []
    for i, field in enumerate(order):
        name = field.lstrip("-")
        op = "lt" if field.startswith("-") != before else "gt"
        equal = {f.lstrip("-"): v for f, v in zip(order[:i], values[:i], strict=True)}
        clauses.append(Q(**equal, **{f"{name}__{op}": values[i]}))
    return reduce(or_, clauses)


def keyset_page(queryset, order, cursor=None, limit=50, previous=False):
    """One page of `queryset` in `order` (fields, "-" for descending, the last one unique) and the next cursor;
    with `previous`, the cursor of the page before it too (one query more, on pages after the first)."""
    order = tuple(order)
    try:
        page_rows = queryset
        if cursor:
            position = _decode(cursor, len(order))
            page_rows = queryset.filter(_after(order, position))
        rows = list(page_rows.order_by(*order)[: limit + 1])  # one row more says whether a page follows
        page = _cut(rows, limit, lambda row: cursor_after(row, order))
        if previous and cursor:
            # The page before ends at the cursor's row; it starts after the row `limit` places back.
            back = tuple(f[1:] if f.startswith("-") else f"-{f}" for f in order)
            earlier = list(queryset.filter(_after(order, position, before=True)).order_by(*back)[limit - 1 : limit])
            page.previous_cursor = cursor_after(earlier[0], order) if earlier else FIRST
    except ValidationError as exc:  # a value of the wrong type for its field
        raise BadCursor("cursor: not a cursor from a previous page") from exc
    return page


def cursor_at(queryset, order, row, limit):
    """The cursor of the page of `limit` rows, counted from the first, that holds `row` (None for the first
    page): the same page a reader paging from the start reaches, with what comes before it on it."""
    position = [_field_value(row, f.lstrip("-")) for f in order]
    before = queryset.filter(_after(order, position, before=True)).count()
    start = before - before % limit
    if start == 0:
        return None
    # One OFFSET, only here: a redirect after an action, to the page a reader paging from the start sees.
    last_of_previous = queryset.order_by(*order)[start - 1]
    return cursor_after(last_of_previous, order)


def _cut(rows, limit, cursor_of):
    """The first `limit` rows, and the cursor after the last of them when more follow."""
    return Page(rows[:limit], cursor_of(rows[limit - 1]) if len(rows) > limit and limit else None)


def cursor_after(row, order):
    """The cursor of the page that starts just after `row` in `order`."""
    return _encode([_field_value(row, f.lstrip("-")) for f in order])


def keyset_rows(rows, key, cursor=None, limit=50):
    """keyset_page for a list already sorted by `key` (a row -> tuple of ints and strings, unique per
    row), for lists computed in Python rather than read by one query: the same cursors, no positions."""
    earlier = []
    if cursor and rows:
        after = tuple(_decode(cursor, len(key(rows[0]))))
        try:
            earlier = [row for row in rows if key(row) <= after]
            rows = rows[len(earlier) :]
        except TypeError as exc:  # a value of another type than the key's
            raise BadCursor("cursor: not a cursor from a previous page") from exc
    page = _cut(rows, limit, lambda row: _encode(key(row)))
    if cursor:
        page.previous_cursor = _encode(key(earlier[-limit - 1])) if len(earlier) > limit else FIRST
    return page

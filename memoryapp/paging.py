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


@dataclass
class Page:
    rows: list
    next_cursor: str | None  # None on the last page


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


def keyset_page(queryset, order, cursor=None, limit=50):
    """One page of `queryset` in `order` (fields, "-" for descending, the last one unique) and the next cursor."""
    order = tuple(order)
    try:
        if cursor:
            queryset = queryset.filter(_after(order, _decode(cursor, len(order))))
        rows = list(queryset.order_by(*order)[: limit + 1])  # one row more says whether a page follows
    except ValidationError as exc:  # a value of the wrong type for its field
        raise BadCursor("cursor: not a cursor from a previous page") from exc
    return _cut(rows, limit, lambda row: cursor_after(row, order))


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
    if cursor and rows:
        after = tuple(_decode(cursor, len(key(rows[0]))))
        try:
            rows = [row for row in rows if key(row) > after]
        except TypeError as exc:  # a value of another type than the key's
            raise BadCursor("cursor: not a cursor from a previous page") from exc
    return _cut(rows, limit, lambda row: _encode(key(row)))

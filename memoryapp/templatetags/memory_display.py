"""Template filters for showing facts the same way on every page."""

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html

from memoryapp.pages import display

register = template.Library()


@register.filter
def yours(text):
    """A fact about the signed-in person, in the second person."""
    return display.as_yours(text or "")


@register.filter
def ago(moment, now=None):
    """'just now', 'x minutes ago', ... or the date."""
    if not moment:
        return ""
    return display.how_long_ago(moment, now or timezone.now())


@register.filter
def times(n):
    """'once', 'twice', 'n times'."""
    return display.how_many_times(n or 0)


@register.filter
def kind_name(kind, plural=False):
    """One kind's display name."""
    return display.kind_name(kind, plural=bool(plural))


@register.filter
def kind_label(kind):
    """A kind's neutral name (support console)."""
    return display.KIND_LABELS.get(kind, kind)


@register.filter
def org_kind_name(kind):
    """One kind's display name for an org fact."""
    return display.kind_name(kind, org=True)


@register.filter
def org_kind_plural(kind):
    """A kind's plural display name for org facts (group headings)."""
    return display.kind_name(kind, plural=True, org=True)


@register.filter
def day(moment):
    """The one date format."""

    if isinstance(moment, str):  # ISO text, as in the export document
        moment = parse_datetime(moment)
    return date_format(timezone.localtime(moment), display.DATE_FORMAT) if moment else ""


@register.simple_tag
def short_id(value, length=8):
    """A long id or hash shortened, with the whole value in a tooltip and a copy button."""
    value = str(value)
    shown = value if len(value) <= length + 1 else value[:length] + "…"
    return format_html(
        '<span class="short-id"><code title="{}">{}</code>'
        '<button type="button" class="copy" data-copy="{}" aria-label="Copy {}">Copy</button></span>',
        value,
        shown,
        value,
        value,
    )

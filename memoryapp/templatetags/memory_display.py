"""Template filters for showing facts the same way on every page."""

from django import template
from django.utils import timezone
from django.utils.html import format_html

from memoryapp import vocabulary
from memoryapp.pages import display

register = template.Library()


@register.filter
def yours(text):
    """A fact about the signed-in person, in the second person."""
    return display.as_yours(text or "")


@register.filter
def why(reason):
    """A judge's reason, in words (display.why_in_words)."""
    return display.why_in_words(reason)


@register.filter
def possessive(name):
    """The name escaped, then "'s" or "'" (display.possessive), which needs no escaping."""
    name = str(name)
    return format_html("{}" + display.possessive(name)[len(name) :], name)


@register.filter
def usd(amount):
    """A cost in dollars, as every page shows it (display.usd)."""
    return display.usd(amount)


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
    return vocabulary.KIND_LABELS.get(kind, kind)


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
    return display.day(moment)


@register.simple_tag(takes_context=True)
def fact_item(context, fact):
    """One of the person's facts as a list item (display.fact_item), with what the page asked for."""
    if "_fact_urls" not in context.render_context:  # reversed once per page, not once per row
        context.render_context["_fact_urls"] = display.fact_urls()
    urls = context.render_context["_fact_urls"]
    highlight = context.get("highlight") or ""
    now = context.get("now") or timezone.now()
    tier1 = context.get("tier1")  # recall.tier1_ids, on pages that say how each fact is used
    use = display.fact_use(fact, tier1, context.get("memory_on", True), now) if tier1 is not None else ""
    return display.fact_item(
        fact,
        now,
        urls(fact.id),
        use=use,
        fresh=bool(highlight) and highlight == str(fact.id),
        just_corrected=bool(context.get("just_corrected")),
        on_history=bool(context.get("on_history")),
    )


@register.simple_tag(takes_context=True)
def org_fact_item(context, fact):
    """One live org fact as a list item (display.org_fact_item); the admin's menu for admins."""
    actions = None
    if context.get("is_admin"):
        slug = context["org"].slug
        if "_org_fact_urls" not in context.render_context:
            context.render_context["_org_fact_urls"] = (
                display.urls_by_id("org-fact-edit", slug),
                display.urls_by_id("org-fact-delete", slug),
            )
        edit, delete = context.render_context["_org_fact_urls"]
        actions = (edit(fact.id), delete(fact.id))
    return display.org_fact_item(fact, actions)


@register.simple_tag
def short_id(value, length=8):
    """A long id or hash shortened, with the whole value in a tooltip and a copy button."""
    value = str(value)
    shown = value if len(value) <= length + 1 else value[:length] + "…"
    return format_html(
        '<span class="short-id"><code title="{}">{}</code>'
        '<button type="button" class="copy" data-copy="{}" data-needs-clipboard aria-label="Copy {}" hidden>'
        "Copy</button></span>",
        value,
        shown,
        value,
        value,
    )

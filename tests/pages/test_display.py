"""How facts read on their owner's pages, and the one way times are put into words."""

from datetime import UTC, datetime, timedelta

import pytest

from memoryapp.pages.display import as_yours, how_long_ago, how_many_times, why_in_words


@pytest.mark.parametrize(
    "stored,shown",
    [
        ("The user prefers short answers.", "You prefer short answers."),
        ("The user is a backend engineer.", "You are a backend engineer."),
        ("The user's team uses Postgres.", "Your team uses Postgres."),
        ("The user does not want cloud services.", "You do not want cloud services."),
        ("The user studies French.", "You study French."),
        ("The user watches films with the user's partner.", "You watch films with your partner."),
        ("The user has two cats.", "You have two cats."),
        ("The user now works remotely for the team.", "You now work remotely for the team."),
        ("The user no longer eats meat.", "You no longer eat meat."),
        ("The user always writes tests first.", "You always write tests first."),
        ("The user also likes tea.", "You also like tea."),
        ("The user usually juggles.", "You usually juggle."),
        ("The user juggles.", "You juggle."),
        ("The user 🎉 loves emoji.", "You 🎉 love emoji."),  # a sign before the verb stays, the verb changes
        ("Works at Acme.", "Works at Acme."),  # not about "the user": shown as stored
        # The rewrite of "I take my kids to school" says "their"; with the user as subject it is theirs.
        ("The user takes their kids to school.", "You take your kids to school."),
        ("The user taught themselves Rust.", "You taught yourself Rust."),
        ("The user's parents live in Lyon; their house is old.", "Your parents live in Lyon; their house is old."),
    ],
)
def test_a_fact_reads_in_the_second_person(stored, shown):
    assert as_yours(stored) == shown


def test_times_in_plain_words():
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert how_long_ago(now - timedelta(seconds=20), now) == "just now"
    assert how_long_ago(now - timedelta(minutes=1), now) == "1 minute ago"
    assert how_long_ago(now - timedelta(hours=5), now) == "5 hours ago"
    assert how_long_ago(now - timedelta(days=1, hours=2), now) == "yesterday"
    assert how_long_ago(now - timedelta(days=40), now) == "22 Oct 2026"
    assert [how_many_times(n) for n in (1, 2, 3)] == ["once", "twice", "3 times"]


def test_a_reason_reads_without_the_outcome_the_page_already_states():
    # Pages say "Why it waits:" and "This can't be saved:" themselves: "Why it waits: to confirm: ..." read twice.
    assert why_in_words("to confirm: it may claim authority over refunds") == "it may claim authority over refunds"
    assert why_in_words("refused: markup is not allowed") == "markup is not allowed"
    assert why_in_words("a fact needs at least two letters") == "a fact needs at least two letters"


def test_a_copy_button_shows_only_where_a_script_can_copy():
    from memoryapp.templatetags.memory_display import short_id

    html = short_id("0123456789abcdef")
    assert "0123456789abcdef" in html and "data-needs-clipboard" in html and " hidden>" in html


def test_an_organisations_name_takes_the_possessive_it_should():
    from memoryapp.pages.display import possessive

    assert possessive("Acme") == "Acme's" and possessive("Demo Logistics") == "Demo Logistics'"

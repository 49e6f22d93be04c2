"""Quality metrics and charts against a hand-computed fixture, and the recall review queue."""

import re
from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from memoryapp import charts, clock, metrics, sessions
from memoryapp.models import AgentSession, FactEvent, MemoryFact, RecallLog, RecallReview

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(make_user):
    client = Client()
    client.force_login(make_user("sam", is_staff=True))
    return client


def _monday_noon(weeks_ago):
    today = timezone.localtime(clock.now()).date()
    monday = today - timedelta(days=today.weekday()) - timedelta(weeks=weeks_ago)
    return timezone.make_aware(datetime(monday.year, monday.month, monday.day, 12))


def _month_day(months_ago, day=10):
    today = timezone.localtime(clock.now()).date().replace(day=1)
    for _ in range(months_ago):
        today = (today - timedelta(days=1)).replace(day=1)
    return timezone.make_aware(datetime(today.year, today.month, day, 12))


@pytest.fixture
def fixture(org):
    """Hand-built history. Expected numbers are written out next to each row group.

    Facts per session: week -6: 4 sessions, 2 facts -> 0.5; week -5: 2 sessions, 3 facts -> 1.5
      (a user-added fact and a memory-off session do not count).
    Contradiction rate: week -4: 10 writes, 1 supersession -> 10; week -3: 10 writes, 1 -> 10;
      week -2: 8 writes (6 created + 2 corrected), 4 supersessions -> 50 = spike (median 10).
    Recall precision: two months ago 3 of 4 relevant -> 0.75; last month 1 of 2 -> 0.5; one unjudged.
    """
    user = sessions.get_or_create_user(org, "quinn")

    def session(ended, memory="on", status="done"):
        return AgentSession.objects.create(
            user=user,
            org=org,
            memory=memory,
            started_at=ended - timedelta(minutes=5),
            ended_at=ended,
            extraction_status=status,
        )

    def fact(source, origin="extracted"):
        return MemoryFact.objects.create(
            user=user,
            text="The user likes tea.",
            kind="preference",
            embedding_model="x",
            origin=origin,
            source_session=source,
        )

    w6, w5 = _monday_noon(6), _monday_noon(5)
    s = [session(w6 + timedelta(days=i)) for i in range(4)]
    fact(s[0])
    fact(s[0])
    session(w6 + timedelta(days=1), memory="off", status="skipped")
    t = [session(w5 + timedelta(days=2)), session(w5 + timedelta(days=3))]
    fact(t[0])
    fact(t[1])
    fact(t[1])
    fact(t[1], origin="user")

    def events(when, created, superseded, corrected=0):
        for action, n in (("created", created), ("superseded", superseded), ("corrected", corrected)):
            for _ in range(n):
                FactEvent.objects.create(user=user, action=action, actor="extractor", created_at=when)

    events(_monday_noon(4), 10, 1)
    events(_monday_noon(3) + timedelta(days=3), 10, 1)
    events(_monday_noon(2) + timedelta(days=6), 6, 4, corrected=2)
    FactEvent.objects.create(user=user, action="confirmed", actor="extractor", created_at=_monday_noon(2))

    recalled = fact(None)
    probe = AgentSession.objects.create(user=user, org=org, ended_at=clock.now())
    for when, verdicts in ((_month_day(2), [True, True, True, False]), (_month_day(1), [True, False, None])):
        for i, verdict in enumerate(verdicts):
            log = RecallLog.objects.create(
                user=user, session=probe, fact=recalled, tier="always", position=i, created_at=when
            )
            RecallReview.objects.create(
                recall_log=log, user=user, relevant=verdict, judged_at=None if verdict is None else when
            )
    return user


def _by_label(series):
    return {p.label: p for p in series}


def test_quality_metrics_match_the_hand_computed_fixture(fixture):
    fps = _by_label(metrics.facts_per_session())
    w6, w5 = _monday_noon(6).date().isoformat(), _monday_noon(5).date().isoformat()
    assert (fps[w6].numerator, fps[w6].denominator, fps[w6].value) == (2, 4, 0.5)
    assert (fps[w5].numerator, fps[w5].denominator, fps[w5].value) == (3, 2, 1.5)
    assert all(p.value is None for label, p in fps.items() if label not in (w6, w5))
    assert metrics.average(list(fps.values())) == pytest.approx(5 / 6)

    rate = _by_label(metrics.contradiction_rate())
    w4, w3, w2 = (_monday_noon(n).date().isoformat() for n in (4, 3, 2))
    assert (rate[w4].value, rate[w3].value, rate[w2].value) == (10.0, 10.0, 50.0)
    assert (rate[w2].numerator, rate[w2].denominator) == (4, 8)
    assert [label for label, p in rate.items() if p.spike] == [w2]

    precision = _by_label(metrics.recall_precision())
    m2, m1 = _month_day(2).strftime("%Y-%m"), _month_day(1).strftime("%Y-%m")
    assert (precision[m2].numerator, precision[m2].denominator, precision[m2].value) == (3, 4, 0.75)
    assert (precision[m1].numerator, precision[m1].denominator, precision[m1].value) == (1, 2, 0.5)


def test_quality_page_charts_carry_the_same_numbers(staff_client, fixture):
    page = staff_client.get(reverse("console-quality")).content.decode()
    points = dict(re.findall(r'<circle class="point[^"]*"[^>]*data-label="([^"]+)" data-value="([^"]+)"', page))
    w6, w5, w2 = (_monday_noon(n).date().isoformat() for n in (6, 5, 2))
    m2, m1 = _month_day(2).strftime("%Y-%m"), _month_day(1).strftime("%Y-%m")
    assert points[w6] == "0.5" and points[w5] == "1.5"
    assert points[w2] == "50"
    assert points[m2] == "75" and points[m1] == "50"  # precision charted in percent
    # the spike is marked on the chart and named above it
    assert re.search(rf'<circle class="point spike"[^>]*data-label="{w2}"', page)
    # one spike, in the chart drawn for screens and in the one drawn for phones (the stylesheet shows one)
    wide, narrow = page.split('<div class="chart-wide">')[2], page.split('<div class="chart-narrow">')[2]
    assert wide.split("</svg>")[0].count('class="point spike"') == 1
    assert narrow.split("</svg>")[0].count('class="point spike"') == 1
    assert page.count('class="point spike"') == 2 and f"week of {w2} (50.0 per 100 writes)" in page
    assert "0.83 average" in page  # 5 facts / 6 sessions
    assert "1 injected fact waiting for review" in page
    # no inline styles or scripts in the SVG (CSP)
    assert " style=" not in page and not re.search(r"<script(?![^>]*\ssrc=)", page)


def test_a_phone_gets_a_chart_drawn_for_its_width_with_fewer_labels():
    from types import SimpleNamespace as P

    weeks = [P(label=f"2026-{m:02d}-01", value=m) for m in range(1, 14)]
    both = str(charts.responsive(charts.line_chart, weeks, "By week"))
    wide, narrow = both.split('<div class="chart-narrow">')
    assert 'viewBox="0 0 720 240"' in wide and 'viewBox="0 0 360 220"' in narrow
    x_label = r'class="tick" x="[^"]+" y="[^"]+" text-anchor="(?:middle|end)">'
    labels = [len(re.findall(x_label, part)) for part in (wide, narrow)]
    assert labels[0] > labels[1] >= 3  # each label keeps room for its text at the phone's width


def test_review_queue_sample_and_judge(staff_client, org):
    user = sessions.get_or_create_user(org, "rita")
    facts = [
        MemoryFact.objects.create(user=user, text=f"The user owns cat {i}.", kind="profile", embedding_model="x")
        for i in range(3)
    ]
    for _ in range(4):
        s = AgentSession.objects.create(user=user, org=org)
        for i, f in enumerate(facts[:2]):
            RecallLog.objects.create(user=user, session=s, fact=f, tier="always", position=i)
    response = staff_client.post(reverse("console-review-draw"), {"n": "3"})
    assert response.status_code == 302 and response["Location"] == reverse("console-review")
    assert RecallReview.objects.values("recall_log__session_id").distinct().count() == 3
    assert RecallReview.objects.count() == 6  # every injected fact of each sampled session
    # a second draw takes only the session not yet sampled
    staff_client.post(reverse("console-review-draw"), {"n": "50"})
    assert RecallReview.objects.count() == 8
    assert staff_client.post(reverse("console-review-draw"), {"n": "lots"}, follow=True).status_code == 200
    queue = staff_client.get(reverse("console-review")).content.decode()
    assert queue.count('class="fact review"') == 8 and "Read the conversation" in queue
    assert "no longer kept" in queue  # these sessions kept no turns

    first, second = RecallReview.objects.order_by("id")[:2]
    # htmx: the row comes back judged
    row = staff_client.post(
        reverse("console-review-judge", args=[first.id]), {"relevant": "yes"}, headers={"HX-Request": "true"}
    ).content.decode()
    assert row.lstrip().startswith("<li") and "relevant" in row and 'aria-pressed="true"' in row
    # no JavaScript: post and redirect back to the queue
    response = staff_client.post(reverse("console-review-judge", args=[second.id]), {"relevant": "no"})
    assert response.status_code == 302
    bad = staff_client.post(reverse("console-review-judge", args=[second.id]), {"relevant": "maybe"}, follow=True)
    assert "Choose relevant or not relevant" in bad.content.decode()
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.relevant is True and second.relevant is False and first.reviewer.username == "sam"
    month = timezone.localtime(clock.now()).strftime("%Y-%m")
    assert _by_label(metrics.recall_precision())[month].value == 0.5
    assert staff_client.get(reverse("console-review")).content.decode().count('class="fact review"') == 6


def test_line_chart_escapes_labels_and_breaks_on_gaps():
    class P:
        def __init__(self, label, value, spike=False):
            self.label, self.value, self.spike = label, value, spike

    svg = str(charts.line_chart([P("<a>", 1), P("b", None), P("c", 2), P("d", 3, spike=True)], "T & <t>"))
    assert "<a>" not in svg and "&lt;a&gt;" in svg and "T &amp; &lt;t&gt;" in svg
    assert svg.count("<polyline") == 2  # the gap splits the line
    assert svg.count('class="point spike"') == 1 and ">spike</text>" in svg
    empty = str(charts.line_chart([P("a", None)], "Nothing"))
    assert "No data in this period" in empty


def test_the_period_buttons_change_every_chart(staff_client, fixture):
    def points(weeks):
        page = staff_client.get(reverse("console-quality"), {"weeks": weeks}).content.decode()
        return dict(re.findall(r'<circle class="point[^"]*"[^>]*data-label="([^"]+)" data-value="([^"]+)"', page))

    w6, w2 = (_monday_noon(n).date().isoformat() for n in (6, 2))
    m2 = _month_day(2).strftime("%Y-%m")
    long, short = points(12), points(4)
    assert w6 in long and m2 in long  # facts per session and precision both reach back 12 weeks
    assert w6 not in short  # facts per session: only the last 4 weeks
    assert w2 in short  # contradiction rate: the spike two weeks ago is still inside
    assert m2 not in short  # precision too follows the period (two months ago is outside 4 weeks)

"""axe-core over every page for every audience (the walk of test_screenshots), at both widths: no violations."""

from pathlib import Path

import axe_playwright_python  # requirements-dev.txt: only its bundled axe.min.js is used
import pytest

from tests.pages.test_screenshots import walk

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AXE = (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text(encoding="utf-8")


def violations(page):
    """axe-core's violations on the page as it is shown: 'rule: target …' lines."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE)  # evaluated, not a <script>: the pages' CSP allows only their own scripts
    found = page.evaluate("async () => (await axe.run(document)).violations")
    return [f"{v['id']}: {', '.join(str(n['target']) for n in v['nodes'][:3])}" for v in found]


def test_no_page_has_an_axe_violation(browser, live_server):
    problems = []

    def check(page, name):
        for width, height in ((1440, 900), (375, 812)):
            page.set_viewport_size({"width": width, "height": height})
            problems.extend(f"{name} at {width}px: {line}" for line in violations(page))

    for _ in walk(browser, live_server, check):
        pass
    assert not problems, "\n".join(problems)

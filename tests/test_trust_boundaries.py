"""Issue 15, domain side: the last admin of an organisation cannot be erased from any path, who
counts as operating an org, and the service refuses to start without a SECRET_KEY."""

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client

from memoryapp import erasure, orgs, people, sessions
from memoryapp.models import ExternalIdentity, Membership

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def olga(org, make_user):
    """The only admin of Acme, also someone Acme's agent remembers."""
    user = make_user("olga", org, role="admin")
    ExternalIdentity.objects.create(org=org, user=user, external_id="olga-ext")
    return user


def exists(user):
    return get_user_model().objects.filter(id=user.id).exists()


def test_the_last_admin_cannot_be_erased_by_the_domain_function(olga, org):
    with pytest.raises(erasure.ErasureRefused, match="only admin of Acme"):
        erasure.erase_user(olga, requested_via="self")
    assert exists(olga) and Membership.objects.filter(org=org, role="admin").count() == 1


def test_the_last_admin_cannot_be_erased_by_the_command(olga):
    with pytest.raises(CommandError, match="only admin of Acme"):
        call_command("erase_user", "olga", "--noinput", stdout=StringIO())
    assert exists(olga)


def test_the_last_admin_cannot_erase_themselves_on_the_erase_page(olga):
    browser = Client()
    browser.force_login(olga)
    response = browser.post("/me/erase/", {"confirm": "ERASE"})
    assert response.status_code == 400 and "only admin of Acme" in response.content.decode()
    assert exists(olga)


def test_the_last_admin_cannot_be_erased_through_the_api(api, olga):
    assert api.delete("/v1/users/olga-ext").status_code == 409
    assert exists(olga)


def test_with_a_second_admin_or_after_deleting_the_org_the_erasure_goes_through(olga, org, make_user):
    second = make_user("sid", org, role="admin")
    receipt = erasure.erase_user(olga, requested_via="self")
    assert receipt.counts["memberships"] == 1 and not exists(olga)
    orgs.delete_org(org)
    assert erasure.erase_user(second, requested_via="self") and not exists(second)


def test_an_admin_of_two_orgs_is_refused_for_the_one_they_alone_run(olga, org, other_org, make_user):
    make_user("sid", org, role="admin")
    Membership.objects.create(user=olga, org=other_org, role="admin")
    with pytest.raises(erasure.ErasureRefused, match="only admin of Globex"):
        erasure.erase_user(olga, requested_via="self")


def test_who_operates_an_org(org, make_user):
    remembered = sessions.get_or_create_user(org, "r1")
    assert not people.operates(remembered)  # made by the API: no password, no membership, no role
    assert not Membership.objects.filter(user=remembered).exists()
    assert people.operates(make_user("pw"))  # a password
    assert people.operates(make_user("st", is_staff=True))
    joined = sessions.get_or_create_user(org, "r2")
    Membership.objects.create(user=joined, org=org)  # whoever holds a membership operates
    assert people.operates(joined)


# --- SECRET_KEY -----------------------------------------------------------------------------------


def _start(env_overrides, data_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DEBUG")}
    env["MEMORYAPP_DATA_DIR"] = str(data_dir)
    env.update(env_overrides, DJANGO_SETTINGS_MODULE="memoryapp.settings")
    code = (
        "import django, hashlib; django.setup(); from django.conf import settings; "
        "print(len(settings.SECRET_KEY), hashlib.sha256(settings.SECRET_KEY.encode()).hexdigest())"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)


def test_a_checkouts_generated_key_file_is_used_when_the_environment_has_none(tmp_path):
    (tmp_path / "secret_key").write_text("k" * 50 + "\n")
    result = _start({"DEBUG": "0"}, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "50"


def test_without_a_secret_key_the_service_refuses_to_start(tmp_path):
    result = _start({"DEBUG": "0"}, tmp_path)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and "SECRET_KEY is not set" in result.stderr


def test_with_debug_on_and_no_key_each_process_gets_its_own_random_key(tmp_path):
    first, second = _start({"DEBUG": "1"}, tmp_path), _start({"DEBUG": "1"}, tmp_path)
    assert first.returncode == 0 and second.returncode == 0, first.stderr
    length, digest = first.stdout.split()
    assert int(length) >= 50 and digest != second.stdout.split()[1]  # never one known, shared value


def test_the_run_script_and_makefile_supply_a_generated_key(tmp_path):
    result = subprocess.run(
        [str(ROOT / "scripts" / "secret_key")],
        env={**os.environ, "MEMORYAPP_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    key = result.stdout.strip()
    assert len(key) >= 50 and (tmp_path / "secret_key").read_text().strip() == key
    assert oct((tmp_path / "secret_key").stat().st_mode)[-3:] == "600"
    again = subprocess.run(
        [str(ROOT / "scripts" / "secret_key")],
        env={**os.environ, "MEMORYAPP_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert again.stdout.strip() == key  # stable across runs, so sessions survive a restart
    assert "scripts/secret_key" in (ROOT / "scripts" / "run").read_text()
    assert "scripts/secret_key" in (ROOT / "Makefile").read_text()


def test_the_receipt_reference_depends_on_the_secret_key(settings):
    settings.SECRET_KEY = "one-" + "x" * 50
    first = erasure.subject_ref(42)
    settings.SECRET_KEY = "two-" + "x" * 50
    assert erasure.subject_ref(42) != first

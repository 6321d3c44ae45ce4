from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from memory.models import ApiKey, AuditEvent


def test_it_creates_a_key_printed_once_and_stored_as_a_hash(db, project, project_dir):
    out = StringIO()

    call_command("apikey", "create", "--scope", str(project_dir), "--name", "laptop", stdout=out)

    secret = out.getvalue().strip().splitlines()[-1]
    key = ApiKey.objects.get(name="laptop")
    assert secret.startswith("tl_") and secret not in key.key_hash
    assert key.key_hash == ApiKey.hash_secret(secret)
    assert list(key.scopes.all()) == [project] and key.include_global
    assert AuditEvent.objects.filter(target_type="apikey", target_id=key.pk).count() == 1
    client = Client(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get(f"/api/v1/memories?scope_id={project.pk}").status_code == 200


def test_it_refuses_a_scope_that_names_nothing(db, tmp_path):
    with pytest.raises(CommandError, match="names no scope"):
        call_command("apikey", "create", "--scope", str(tmp_path / "not-a-project"))


def test_it_revokes_a_key(db, project):
    out = StringIO()
    call_command("apikey", "create", "--scope", f"{project.pk}", stdout=out)
    secret = out.getvalue().strip().splitlines()[-1]
    prefix = ApiKey.objects.get().prefix

    call_command("apikey", "revoke", prefix, stdout=StringIO())
    listing = StringIO()
    call_command("apikey", "list", stdout=listing)

    assert Client(HTTP_AUTHORIZATION=f"Bearer {secret}").get("/api/v1/stats").status_code == 401
    assert "revoked" in listing.getvalue() and secret not in listing.getvalue()

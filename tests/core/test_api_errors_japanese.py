"""The API answers Rackplane's own error messages in the client's language (found by a walkthrough, issue 31:
a client sending `Accept-Language: ja` with a member's token got them all in English). Without the header they
stay English, word for word (docs/api/index.md says which stay English for everyone)."""

import datetime
import json

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from core import tokens
from tests.factories import make_department, make_member

pytestmark = pytest.mark.django_db
JA = {"HTTP_ACCEPT_LANGUAGE": "ja"}


@pytest.fixture
def member(demo_inventory):
    return make_member("ja-member", make_department("Research", guaranteed_gpus=8))


def _client(member) -> tuple[APIClient, object]:
    token, key = tokens.issue(member, "nightly", timezone.now() + datetime.timedelta(days=1))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client, token


def _post(client, body: str, **headers):
    return client.generic("POST", "/api/v1/jobs/", body, content_type="application/json", **headers)


def test_a_fields_reason_reads_in_japanese_and_english_without_the_header(member):
    client, _ = _client(member)
    body = json.dumps({"department": "research", "name": "a", "gpus": "4", "work": {"script": "#!/bin/sh"}})
    assert _post(client, body, **JA).json()["gpus"] == [
        'JSON の整数で指定してください（4。"4" や 4.0 は不可）。'  # noqa: RUF001 (the Japanese text's)
    ]
    assert _post(client, body).json()["gpus"] == ['Must be a JSON integer (4, not "4" nor 4.0).']


@pytest.mark.parametrize(
    ("body", "japanese", "english"),
    [
        (
            "[" * 65 + "]" * 65,
            "入れ子が、この API の上限である 64 階層を超えています",
            "more than 64 levels deep",
        ),
        ('{"name": "\\ud800"}', "$.name の値に孤立したサロゲート", "lone surrogate"),
        ('{"gpus": 1, "gpus": 2}', "キー 'gpus' が 2 回指定されています", "gives the key 'gpus' twice"),
        ('{"gpus": ', "JSON の解析エラー - ", "JSON parse error - "),
    ],
)
def test_a_body_the_api_cannot_read_is_refused_in_japanese(member, body, japanese, english):
    client, _ = _client(member)
    refused = _post(client, body, **JA)
    assert refused.status_code == 400 and japanese in refused.json()["detail"], refused.json()
    assert english in _post(client, body).json()["detail"]


def test_a_body_over_the_limit_is_refused_in_japanese(member):
    client, _ = _client(member)
    refused = _post(client, '"' + "x" * (4 * 1024 * 1024) + '"', **JA)
    assert refused.status_code == 413
    assert refused.json()["detail"] == "リクエストの本文がこの API の上限 4 MiB を超えています"


def test_a_revoked_tokens_401_reads_in_japanese(member):
    client, token = _client(member)
    tokens.revoke(token)
    token.refresh_from_db()
    at = f"{token.revoked_at:%Y-%m-%d %H:%M}"
    refused = client.get("/api/v1/jobs/", **JA)
    assert refused.status_code == 401
    assert refused.json()["detail"].startswith(
        f"API トークン {token.prefix}…（nightly）は {at} UTC に失効しました"  # noqa: RUF001
    )
    english = client.get("/api/v1/jobs/").json()["detail"]
    assert english.startswith(f"API token {token.prefix}… (nightly) was revoked at {at} UTC: make a new one")

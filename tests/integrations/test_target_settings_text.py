"""A configuration target's text settings are held to the text rule (found by an outside test).

Names, reasons and job text refuse control, bidi and invisible characters everywhere; a target's settings
(its directory, slurm.conf directory, slurmrestd user, CA file, addresses, tokens) did not: the target form
saved a directory target whose path held a newline. Now every kind's text setting goes through
integrations.fields.text, which applies core.textrule: a 400 naming the setting, nothing saved.
"""

from __future__ import annotations

import pytest

from integrations import registry
from integrations.models import ConfigTarget

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("kind", "values", "key", "char"),
    [
        ("directory", {"path": "/srv/rendered\n/etc"}, "path", "U+000A"),
        ("directory", {"path": "/srv/ren\u202edered"}, "path", "U+202E"),
        ("slurm", {"config_dir": "/etc/slurm\u200b"}, "config_dir", "U+200B"),
        (
            "kubernetes",
            {"api_url": "https://k8s.example:6443", "ca_file": "/etc/ca\x1b.pem"},
            "ca_file",
            "U+001B",
        ),
    ],
)
def test_a_setting_breaking_the_text_rule_is_refused_naming_it(kind, values, key, char):
    raw = {setting.key: setting.default for setting in registry.get(kind).settings}
    raw.update(values)
    with pytest.raises(Exception) as caught:
        registry.clean_settings(kind, raw)
    messages = getattr(caught.value, "message_dict", {})
    assert key in messages, caught.value
    assert char in " ".join(messages[key])


def test_the_target_form_saves_nothing_for_a_path_with_a_newline(client_as, platform_admin):
    client = client_as(platform_admin)
    before = ConfigTarget.objects.count()
    response = client.post(
        "/scheduling/targets/new/",
        {
            "name": "rendered",
            "kind": "directory",
            "enabled": "on",
            "path": "/srv/rendered\n/etc",
            "keep": "5",
        },
    )
    assert response.status_code in (200, 400)
    assert "U+000A" in response.content.decode()
    assert ConfigTarget.objects.count() == before

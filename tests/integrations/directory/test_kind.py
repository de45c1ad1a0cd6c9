"""A directory target's folder (integrations.directory.kind.path_error): found by an outside test in
production mode, an admin could save `../../etc`, `/tmp/x/../../etc` or `/etc` as the folder, and the next
push would have written `versions/` and a `current` link there."""

import pytest
from django.core.exceptions import ValidationError
from hypothesis import given
from hypothesis import strategies as st

from integrations.directory.kind import path_error
from integrations.registry import clean_settings


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("../../etc", "`..`"),
        ("/tmp/rendered/../../etc", "`..`"),
        ("rendered/..", "`..`"),
        ("/etc", "system directory"),
        ("/etc/rackplane", "system directory"),
        ("/", "system directory"),
        ("/usr/local/share", "system directory"),
        ("/proc/self", "system directory"),
        ("a\nb", "U+000A"),  # the text rule's words (core.textrule)
        ("a\x00b", "U+0000"),
    ],
)
def test_a_folder_outside_its_own_place_is_refused_in_words(path, says):
    with pytest.raises(ValidationError) as refused:
        clean_settings("directory", {"path": path})
    assert says in " ".join(refused.value.message_dict["path"])


@pytest.mark.parametrize(
    "path", ["", "rendered", "/srv/rackplane/rendered", "/var/lib/rackplane", "/etcetera"]
)
def test_a_folder_of_its_own_is_taken(path):
    assert clean_settings("directory", {"path": path})["path"] == path


@given(st.lists(st.sampled_from(["a", "b", "..", ".", "etc", "srv"]), min_size=1, max_size=6), st.booleans())
def test_no_accepted_path_climbs_out_of_where_it_starts(parts, absolute):
    path = ("/" if absolute else "") + "/".join(parts)
    if path_error(path) is None:
        assert ".." not in parts


@pytest.mark.django_db
def test_the_target_form_refuses_it_with_a_400_and_saves_nothing(admin_client_logged_in):
    from django.urls import reverse

    from integrations.models import ConfigTarget

    fields = {"name": "evil", "kind": "directory", "path": "../../etc", "keep": "5", "enabled": "on"}
    response = admin_client_logged_in.post(reverse("integrations:target-create"), fields)
    assert response.status_code == 400 and "must not contain `..`" in response.content.decode()
    assert not ConfigTarget.objects.filter(name="evil").exists()

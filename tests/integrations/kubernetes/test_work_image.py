"""A Kubernetes job's image is a container image reference (found by a walkthrough, issue 31).

POST /api/v1/jobs/ took `{"image": "../../etc/passwd"}` with a 201, and the job was placed and dispatched:
the rule only refused whitespace and hidden characters. An image is now parsed as containerd and Docker parse
it (distribution/reference's ParseNormalizedNamed, through docker-image-py): registry/name[:tag][@digest],
a lowercase name. Anything else is a 400 naming "image", from the API and the job form alike, and no job is
made. The OpenAPI schema's pattern states the same grammar and is never stricter than the rule.
"""

from __future__ import annotations

import re

import pytest
from docker_image.regexp import ImageRegexps
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.workloads import WorkError
from integrations.kubernetes.work import IMAGE_PATTERN, MAX_IMAGE, SCHEMA, validate_work
from scheduling.models import Job
from tests.factories import make_department, post_kubernetes_job

TAKEN = [
    "busybox",
    "image",
    "nvcr.io/nvidia/pytorch:25.01-py3",
    "localhost:5000/team/train:v1",
    "[::1]:5000/x",
    "registry.example:443/a/b__c/d--e:TAG_1.2-x",
    "ubuntu@sha256:" + "a" * 64,
    "nvcr.io/nvidia/pytorch:25.01-py3@sha256:" + "0123456789abcdef" * 4,
]
REFUSED = [
    "../../etc/passwd",
    "/etc/passwd",
    "./busybox",
    "example.com/../x",
    "a//b",
    "busybox/",
    "Busybox",
    "team/Train",
    "-x",
    "x:",
    "x@",
    "a:b:c",
    "x:" + "t" * 129,
    "x@sha256:abc",
    "x@sha256:" + "A" * 64,
    "x@md5:" + "a" * 32,
    "a" * 64,  # a name of 64 hex digits reads as an image ID
    "a/" * 128 + "b",  # the name's path over 255 characters
    "café",
    "x?y",
]


@pytest.mark.parametrize("image", TAKEN)
def test_an_image_reference_is_taken_as_written(image):
    assert validate_work({"image": image}) == {"image": image}


@pytest.mark.parametrize("image", REFUSED)
def test_what_is_no_image_reference_is_refused_naming_the_image(image):
    with pytest.raises(WorkError) as refused:
        validate_work({"image": image})
    message = str(refused.value)
    assert message.startswith(f'"image": "{image}" is not a container image reference (')
    assert "registry/name[:tag][@digest]" in message


# Strings made of the grammar's own characters (so that near misses are common), and of anything.
_PIECES = st.sampled_from(
    (*"abz09AZ._-/:@[]", *"é\u212a \n\x00\u202e", "..", "__", "--", "sha256:", "a" * 32, "0" * 64, "x.io/")
)
ODD = st.one_of(st.lists(_PIECES, max_size=24).map("".join), st.text(max_size=40))


def _schema_takes(image: str) -> bool:
    # jsonschema's `pattern` is a search, as ECMA-262's is.
    return len(image) <= MAX_IMAGE and re.search(SCHEMA["properties"]["image"]["pattern"], image) is not None


@pytest.mark.slow(reason="hypothesis: a few hundred generated image references")
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(ODD)
def test_odd_strings_are_taken_or_refused_never_crash_and_never_pass_the_schema_only(image):
    try:
        out = validate_work({"image": image})
    except WorkError as error:
        assert '"image"' in str(error)
        return
    assert out == {"image": image}
    assert _schema_takes(image)
    # Nothing taken climbs out of a path or starts one.
    assert ".." not in image.split("/") and not image.startswith(("/", ".", "-"))
    assert image.isascii() and not any(c.isspace() for c in image)


@pytest.mark.slow(reason="hypothesis: a few hundred generated image references")
@settings(max_examples=200)
@given(ODD)
def test_the_schemas_pattern_is_upstreams_grammar(image):
    # distribution/reference's ReferenceRegexp, as docker-image-py compiles it (ASCII, anchored).
    upstream = image.isascii() and not image.endswith("\n") and ImageRegexps.REFERENCE_REGEXP.match(image)
    assert bool(re.search(IMAGE_PATTERN, image)) == bool(upstream)


@pytest.mark.slow(reason="hypothesis: a few hundred generated image references")
@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.from_regex(IMAGE_PATTERN))
def test_a_reference_of_the_grammar_is_taken_or_refused_in_words_never_crashes(image):
    # The parser refuses some of the grammar's strings for reasons of its own (the name's length, a name of
    # 64 hex digits, a digest's length, a first component Docker's rule takes for a registry that is none).
    try:
        assert validate_work({"image": image}) == {"image": image}
    except WorkError as error:
        assert str(error).startswith('"image"')
    else:
        assert _schema_takes(image)


# --- through the API and the job form: a 400 naming the image, and no job --------------------------------


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=96)


@pytest.mark.django_db
@pytest.mark.parametrize("image", ["../../etc/passwd", "Busybox:latest", "x@sha256:abc"])
def test_the_api_refuses_a_bad_image_with_a_400_naming_it_and_makes_no_job(api_as, member_a, image):
    response = post_kubernetes_job(api_as(member_a), {"image": image})
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["work"]
    assert response.json()["work"][0].startswith(f'"image": "{image}" is not a container image reference')
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_api_still_takes_a_registry_image(api_as, member_a):
    response = post_kubernetes_job(api_as(member_a), {"image": "nvcr.io/nvidia/pytorch:25.01-py3"})
    assert response.status_code == 201, response.content


@pytest.mark.django_db
def test_the_job_form_refuses_a_bad_image_next_to_the_work_and_makes_no_job(client, member_a):
    client.force_login(member_a)
    data = {"department": "research", "name": "escape", "gpus": "1", "backend": "kubernetes"}
    response = client.post("/scheduling/jobs/new/", data | {"image": "../../etc/passwd"})
    assert response.status_code == 400
    markup = response.content.decode()
    assert "is not a container image reference" in markup and "../../etc/passwd" in markup
    assert not Job.objects.exists()

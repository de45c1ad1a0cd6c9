"""What a member writes into a Kubernetes job's pod is held to the text rule (found by an outside test).

The job's name and a Slurm job's script were refused with a bidi override, ESC or an invisible character,
but a Kubernetes job's image, its command and arguments and its environment's values were not: a job whose
image reads `busybox` on the portal (`busybox\\u202e...`), whose arguments clear the terminal of whoever reads
its logs (ESC [2J) or hide a zero-width space, and an image of 3 MB, were all saved and sent to the API
server. Now POST /api/v1/jobs/ answers 400 naming the place and the character, and makes no job
(integrations.kubernetes.work, core.textrule); newlines and tabs in arguments (`bash -c` scripts) still go.
"""

from __future__ import annotations

import pytest

from integrations.kubernetes.work import MAX_IMAGE
from scheduling.models import Job
from tests.factories import make_department, post_kubernetes_job

pytestmark = pytest.mark.django_db

IMAGE = "nvcr.io/nvidia/pytorch:25.01-py3"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=96)


@pytest.fixture
def post(api_as, member_a):
    def post(work):
        return post_kubernetes_job(api_as(member_a), work)

    return post


@pytest.mark.slow(reason="7 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("work", "named"),
    [
        ({"image": "busybox\u202e4pm"}, '"image" contains U+202E RIGHT-TO-LEFT OVERRIDE'),
        ({"image": "busy\u200bbox"}, '"image" contains U+200B ZERO WIDTH SPACE'),
        ({"image": "a" * (MAX_IMAGE + 1)}, f'"image" is {MAX_IMAGE + 1} characters long'),
        ({"image": IMAGE, "command": ["\x1b[2Jtorchrun"]}, '"command"[0] contains U+001B'),
        ({"image": IMAGE, "args": ["--ok", "train\u2066.py"]}, '"args"[1] contains U+2066'),
        ({"image": IMAGE, "args": ["a\rb"]}, '"args"[0] contains U+000D'),
        ({"image": IMAGE, "env": {"NCCL_DEBUG": "INFO\u3164"}}, '"env" NCCL_DEBUG contains U+3164'),
    ],
)
def test_hidden_or_control_characters_in_the_pod_are_a_400_naming_where_and_make_no_job(post, work, named):
    response = post(work)
    assert response.status_code == 400, response.content
    assert named in response.json()["work"][0]
    assert not Job.objects.exists()


def test_ordinary_commands_arguments_and_values_are_still_taken(post):
    work = {
        "image": IMAGE,
        "command": ["bash", "-c"],
        "args": ["set -e\n\tpython train.py --name 'café ❤️'\n"],
        "env": {"NCCL_DEBUG": "INFO", "NOTE": "日本語"},
    }
    response = post(work)
    assert response.status_code == 201, response.content
    assert Job.objects.get().work["args"] == work["args"]

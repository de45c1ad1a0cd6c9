"""POST /api/v1/telemetry/dcgm/ with a charset that is not text.

`charset=rot13` or `charset=hex` used to end in a LookupError, a 500: Python knows them, but as bytes-to-bytes
or str-to-str codecs. Now any charset that does not decode bytes to text is a 415 naming it, and nothing is
recorded; a real text charset still works.
"""

import pytest

from inventory.models import Gpu
from tenancy.models import GpuActivity, GpuUtilization

pytestmark = pytest.mark.django_db

URL = "/api/v1/telemetry/dcgm/"


def page(gpu: Gpu, value: int = 87) -> str:
    return (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu.index}",UUID="{gpu.uuid}",'
        f'Hostname="{gpu.tray.hostname}"}} {value}\n'
    )


def rows() -> tuple[int, int]:
    return GpuActivity.objects.count(), GpuUtilization.objects.count()


@pytest.fixture
def agent(api_as, node_agent, demo_inventory):
    client = api_as(node_agent)
    client.raise_request_exception = False  # a 500 is an answer to assert on, not an exception
    return client


@pytest.mark.parametrize("charset", ["rot13", "hex", "base64", "zlib", "no-such-charset"])
def test_a_charset_that_is_not_text_is_a_415_naming_it_and_records_nothing(agent, charset):
    gpu = Gpu.objects.select_related("tray").first()
    before = rows()
    response = agent.post(URL, page(gpu), content_type=f"text/plain; version=0.0.4; charset={charset}")
    assert response.status_code == 415, response.content[:300]
    assert response.json() == {
        "detail": f"charset '{charset}' is not a text encoding this API reads: send UTF-8"
    }
    assert rows() == before


@pytest.mark.parametrize("charset", ["utf-8", "UTF8", "latin-1"])
def test_a_text_charset_is_read(agent, charset):
    gpu = Gpu.objects.select_related("tray").first()
    response = agent.post(URL, page(gpu).encode(charset), content_type=f"text/plain; charset={charset}")
    assert response.status_code == 200, response.content[:300]
    assert response.json()["recorded"] == 1
    assert GpuActivity.objects.get(gpu=gpu).utilization == 87


def test_bytes_that_are_not_the_charset_are_a_400_naming_it(agent):
    before = rows()
    response = agent.post(URL, b"DCGM_FI_DEV_GPU_UTIL{} \xff\xfe\n", content_type="text/plain; charset=utf-8")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("the body is not utf-8 text:")
    assert rows() == before

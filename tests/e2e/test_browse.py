import re

import pytest
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from inventory.models import Gpu
from tests.e2e.browser import sign_in

PASSWORD = "e2e-operator-password-1"


@pytest.fixture
def seeded_inventory(transactional_db):
    return seed_datacenter(racks=3)


@pytest.fixture
def operator(transactional_db, django_user_model):
    return django_user_model.objects.create_user("e2e-operator", "e2e@example.com", PASSWORD)


@pytest.mark.e2e
def test_log_in_open_a_rack_and_inspect_a_gpu(live_server, page, seeded_inventory, operator):
    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(re.compile(r"/login/"))

    sign_in(page, live_server, operator.username, PASSWORD)
    expect(page).not_to_have_url(re.compile(r"/login/"))

    response = page.goto(f"{live_server.url}/inventory/racks/gb-r01/")
    assert response is not None and response.ok, f"rack page answered {response and response.status}"

    gpu_button = page.locator("button.gpu").first
    expect(gpu_button).to_be_visible()
    gpu_uuid = gpu_button.get_attribute("data-gpu-uuid")
    assert gpu_uuid, "the GPU button carries no data-gpu-uuid"
    assert Gpu.objects.filter(uuid=gpu_uuid, tray__rack__name="gb-r01").exists()

    gpu_button.click()
    expect(page.locator("#detail")).to_contain_text(gpu_uuid)

"""Fixtures the portal's tests share."""

import pytest


@pytest.fixture
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path  # where seed_demo writes the demo logins
    return tmp_path

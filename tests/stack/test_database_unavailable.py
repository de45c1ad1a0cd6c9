"""The 503 a lost database gets (portal.web.middleware), without a stack: from a view (process_exception) and
from
outside one (handler500, portal.pages.home.server_error). The real outage is tests/stack/test_outages.py."""

from __future__ import annotations

import json

from django.db import IntegrityError, OperationalError
from django.test import RequestFactory

from portal.pages.home import server_error
from portal.web.middleware import DatabaseUnavailableMiddleware


def test_a_view_that_loses_the_database_answers_503_json_under_the_api():
    request = RequestFactory().get("/api/v1/jobs/")
    middleware = DatabaseUnavailableMiddleware(lambda r: None)
    response = middleware.process_exception(request, OperationalError("server closed the connection"))
    assert response.status_code == 503 and response["Retry-After"] == "5"
    body = json.loads(response.content)
    assert body["reason"] == "database_unavailable" and "Try again in a moment" in body["detail"]


def test_a_page_that_loses_the_database_answers_a_503_page_and_other_errors_are_left_alone():
    request = RequestFactory().get("/inventory/racks/")
    middleware = DatabaseUnavailableMiddleware(lambda r: None)
    response = middleware.process_exception(request, OperationalError("connection refused"))
    assert response.status_code == 503 and response["Content-Type"].startswith("text/html")
    assert b"The database is not answering" in response.content and b"<script" not in response.content
    assert middleware.process_exception(request, IntegrityError("duplicate")) is None
    assert middleware.process_exception(request, ValueError("bug")) is None


def test_handler500_turns_a_database_error_outside_views_into_the_503():
    request = RequestFactory().get("/")
    try:
        raise OperationalError("the database system is shutting down")
    except OperationalError:
        response = server_error(request)
    assert response.status_code == 503
    try:
        raise ValueError("a bug")
    except ValueError:
        response = server_error(request)
    assert response.status_code == 500

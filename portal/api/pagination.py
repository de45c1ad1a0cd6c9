"""The API's page-number pagination, strict about its parameters.

DRF's PageNumberPagination falls back to the default size for a `page_size` it cannot read (`true`, `-1`),
and answers a malformed `page` with 404. Here both are a 400 naming the parameter; a page past the last is
still a 404. The OpenAPI document states the bounds.
"""

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination


def _positive_int(request, name: str, maximum: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw, 10)
    except ValueError:
        value = None
    if value is None or value < 1 or (maximum is not None and value > maximum):
        bound = f"1 to {maximum}" if maximum is not None else "1 or more"
        raise ValidationError({name: [f"must be a whole number, {bound} (not {raw!r})"]})
    return value


class StandardPagination(PageNumberPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000

    def get_page_size(self, request):
        return _positive_int(request, self.page_size_query_param, self.max_page_size) or self.page_size

    def paginate_queryset(self, queryset, request, view=None):
        if request.query_params.get(self.page_query_param) not in self.last_page_strings:
            _positive_int(request, self.page_query_param)  # a page past the last stays DRF's 404
        return super().paginate_queryset(queryset, request, view)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_query_param:
                parameter["schema"]["minimum"] = 1
            elif parameter["name"] == self.page_size_query_param:
                parameter["schema"].update(minimum=1, maximum=self.max_page_size)
        return parameters

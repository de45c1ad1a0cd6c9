"""The API's page-number pagination, strict about its parameters.

DRF's PageNumberPagination falls back to the default size for a `page_size` it cannot read (`true`, `-1`),
and answers a malformed `page` with 404. Here both are a 400 naming the parameter; a page past the last is
still a 404. The OpenAPI document states the bounds.

The largest lists (GPUs, trays: 720,000 and 180,000 at 10,000 racks) page by cursor by default
(CursorOrPagePagination): no count, no OFFSET; a client that asks for `page` gets numbered pages as before.
"""

import base64
import binascii
import hashlib
from urllib import parse

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination, Cursor, CursorPagination, PageNumberPagination
from rest_framework.utils.urls import replace_query_param


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


def cursor_tag(model, ordering) -> str:
    """What a cursor is for: the list's model and its order (`ordering`, a field name or DRF's tuple of
    them), as a short digest, so that one list's cursor (or another order's) is refused by the others."""
    fields = (ordering,) if isinstance(ordering, str) else tuple(ordering)
    what = f"{model._meta.label_lower}:{','.join(fields)}"
    return hashlib.blake2s(what.encode(), digest_size=4).hexdigest()


def encode_cursor_text(tag: str, offset: int = 0, reverse: bool = False, position=None) -> str:
    """A cursor's text (base64 of its query string, as DRF's): the list's `tag` (cursor_tag) and DRF's
    offset, direction and position."""
    tokens = {"l": tag}
    if offset:
        tokens["o"] = str(offset)
    if reverse:
        tokens["r"] = "1"
    if position is not None:
        tokens["p"] = str(position)
    return base64.b64encode(parse.urlencode(tokens).encode("ascii")).decode("ascii")


class StrictCursorPagination(CursorPagination):
    """DRF's cursor pagination on a unique ordering (`ordering`, set per request by CursorOrPagePagination),
    with the page-number pages' strict `page_size`. A cursor names the list and order it was given for
    (`cursor_tag`); one this list did not give is a 400 naming `cursor`: not base64 (DRF skips what is not,
    so `%%%` read as no cursor: the first page), not a query string, a key or a value DRF never writes, an
    offset beyond DRF's cutoff (DRF clamps it), another list's or order's cursor (DRF read a GPU id as a
    tray host name), a position that is no value of the ordering's field (DRF failed in the query)."""

    page_size = StandardPagination.page_size
    page_size_query_param = StandardPagination.page_size_query_param
    max_page_size = StandardPagination.max_page_size
    ordering = "pk"

    def get_page_size(self, request):
        return _positive_int(request, self.page_size_query_param, self.max_page_size) or self.page_size

    def decode_cursor(self, request):
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        cursor = self._read(encoded)
        if cursor is None:
            raise ValidationError({self.cursor_query_param: [INVALID_CURSOR]})
        return cursor

    def _read(self, encoded: str) -> Cursor | None:
        """The cursor `encoded` says, or None when this list did not give it."""
        try:
            text = base64.b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
            tokens = parse.parse_qs(text, keep_blank_values=True, strict_parsing=True)
        except (ValueError, binascii.Error):  # UnicodeError is a ValueError
            return None
        if not set(tokens) <= {"l", "o", "r", "p"} or any(len(values) != 1 for values in tokens.values()):
            return None
        one = {key: values[0] for key, values in tokens.items()}
        if one.get("l") != cursor_tag(self.model, self.ordering) or one.get("r", "1") != "1":
            return None
        offset = one.get("o", "0")
        if not (offset.isascii() and offset.isdigit()) or int(offset) > self.offset_cutoff:
            return None
        position = one.get("p")
        if position is not None and not self._readable(position):
            return None
        return Cursor(offset=int(offset), reverse="r" in one, position=position)

    def encode_cursor(self, cursor):
        text = encode_cursor_text(
            cursor_tag(self.model, self.ordering), cursor.offset, cursor.reverse, cursor.position
        )
        return replace_query_param(self.base_url, self.cursor_query_param, text)

    def _readable(self, position: str) -> bool:
        name = self.ordering[0].lstrip("-")
        opts = self.model._meta
        field = opts.pk if name == "pk" else opts.get_field(name)
        try:
            value = field.to_python(position)
        except DjangoValidationError:
            return False
        if isinstance(value, int):
            return 0 <= value < 2**63
        return value is not None

    def paginate_queryset(self, queryset, request, view=None):
        self.model = queryset.model
        return super().paginate_queryset(queryset, request, view)


INVALID_CURSOR = "is not a cursor this list gave: start again from the list without `cursor`"


class CursorOrPagePagination(BasePagination):
    """A large list's pages: by cursor (keyset, no count) by default, by number when the client asks for a
    `page` (the page-number clients of /api/v1 keep working, `count` and all).

    A cursor page costs the same at any depth (`WHERE id > last ORDER BY id LIMIT n`, an index walk): at
    10,000 racks a page-number page counts 720,000 GPUs and skips up to all of them (OFFSET). The view names
    the `sort` keys whose single field is unique (`cursor_sorts`: {key: field}) and the unique field of its
    default order (`cursor_default`, else the primary key). A sort by another key (not unique, e.g. health)
    pages by number, as before.

    Mode, per request: `cursor` given -> cursor; else `page` given -> number; else a sort that is not in
    `cursor_sorts` -> number; else cursor. Both answers have `next`, `previous` and `results`; only the
    page-number one has `count` (the schema says so).
    """

    def __init__(self):
        self.by_number = StandardPagination()
        self.by_cursor = StrictCursorPagination()
        self.chosen: BasePagination = self.by_cursor

    @property
    def ways(self) -> tuple[BasePagination, BasePagination]:
        """Both ways of paging (their query parameters are all this paginator's: core.filters)."""
        return (self.by_number, self.by_cursor)

    def _cursor_ordering(self, request, view) -> str | None:
        raw = request.query_params.get("sort", "")
        if not raw:
            return getattr(view, "cursor_default", "pk")
        field = getattr(view, "cursor_sorts", {}).get(raw.removeprefix("-"))
        if field is None:
            return None
        return f"-{field}" if raw.startswith("-") else field

    def paginate_queryset(self, queryset, request, view=None):
        ordering = self._cursor_ordering(request, view)
        params = request.query_params
        if params.get(self.by_cursor.cursor_query_param) is not None:
            if ordering is None:
                raise ValidationError({"sort": ["pages by number only: leave out `cursor` and give `page`"]})
        elif params.get(self.by_number.page_query_param) is not None or ordering is None:
            self.chosen = self.by_number
            return self.by_number.paginate_queryset(queryset, request, view)
        self.chosen = self.by_cursor
        self.by_cursor.ordering = ordering
        return self.by_cursor.paginate_queryset(queryset, request, view)

    def get_paginated_response(self, data):
        return self.chosen.get_paginated_response(data)

    def get_paginated_response_schema(self, schema):
        numbered = self.by_number.get_paginated_response_schema(schema)
        numbered["required"] = ["results"]
        numbered["properties"]["count"]["description"] = "Only on pages asked for by number (`page`)."
        return numbered

    def get_schema_operation_parameters(self, view):
        return [
            *self.by_cursor.get_schema_operation_parameters(view)[:1],
            *self.by_number.get_schema_operation_parameters(view),
        ]

"""Every list page's table: sortable columns, page size and CSV / JSON export, in one place.

A view builds one `Table` from the request with the columns people may sort by (a whitelist: anything else
in `?sort=` is ignored and the default order kept; `strict=True`, for the API, refuses it instead), orders
its rows with `table.order(queryset)` (or `order_rows(list)` for rows computed in Python), pages them with
`table.page(rows)` and, when `table.export_format` is set (`?export=csv` or `?export=json`), answers with
`table.export(columns, rows)` instead of the page: every row the current filter shows, in the current order,
streamed (1,000 racks are 72,000 GPUs), under a file name with the date.

The rows are the view's own queryset, already narrowed by `visible_to(user)` and the filter: the export is
exactly what the list shows, all its pages. Cells a spreadsheet would read as a formula (starting with
= + - @, a tab or a carriage return) are prefixed with an apostrophe in CSV; JSON keeps values as they are.

Templates: templates/_table_th.html (a header cell linking to the other direction, with aria-sort)
and templates/_table_tools.html (page size, export links, the time display toggle).

Lives in core (not portal) because list views of every layer use it: inventory, scheduling, integrations
and the portal's own pages.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import BadRequest
from django.core.paginator import Page, Paginator
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Func, IntegerField, QuerySet
from django.http import QueryDict, StreamingHttpResponse
from django.utils import timezone
from django.utils.translation import gettext
from rest_framework.exceptions import ValidationError
from rest_framework.filters import BaseFilterBackend

PAGE_SIZES = (25, 50, 100, 500)
EXPORT_FORMATS = ("csv", "json")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
CHUNK = 2000  # rows fetched per database round trip while exporting

SortSpec = tuple[str, ...] | Callable[[Any], Any]


class JsonArrayLength(Func):
    """The number of items of a JSON list column, for sorting by it in the database (SQLite's
    json_array_length; PostgreSQL stores JSONField as jsonb)."""

    function = "JSON_ARRAY_LENGTH"
    output_field = IntegerField()

    def as_postgresql(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, function="JSONB_ARRAY_LENGTH", **extra_context)


def safe_cell(value: Any) -> Any:
    """A CSV cell no spreadsheet runs as a formula: text starting with = + - @, a tab or a CR gets a leading
    apostrophe. Numbers, dates and None pass through (None as an empty cell)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def page_size(params: Mapping, default: int = 50) -> int:
    """`?per_page=` when it is one of PAGE_SIZES, else `default`."""
    raw = params.get("per_page", "")
    return int(raw) if raw.isdigit() and int(raw) in PAGE_SIZES else default


@dataclass(frozen=True)
class Column:
    """One exported column: its key (the CSV header and the JSON member) and how a row gives its value."""

    key: str
    value: Callable[[Any], Any]


@dataclass(frozen=True)
class Header:
    """A sortable header cell: the URL of the other direction and the aria-sort value (None: not sorted)."""

    url: str
    aria_sort: str | None

    @property
    def arrow(self) -> str:
        return {"ascending": "▲", "descending": "▼"}.get(self.aria_sort or "", "↕")

    @property
    def title(self) -> str:
        if self.aria_sort == "ascending":
            return gettext("Sorted ascending: click for descending")
        if self.aria_sort == "descending":
            return gettext("Sorted descending: click for ascending")
        return gettext("Sort by this column")


def unknown_sort(raw: str, sorts) -> str:
    """Why a sort is refused (a 400), naming the keys there are."""
    return gettext("Unknown sort %(sort)s. Sort by one of: %(keys)s (prefix with - for descending).") % {
        "sort": repr(raw),
        "keys": ", ".join(sorted(sorts)),
    }


def _flip(expression: str) -> str:
    return expression[1:] if expression.startswith("-") else "-" + expression


class _Headers(dict):
    """`table.headers.<key>` in templates; a key the table cannot sort by is a template error worth seeing."""

    def __missing__(self, key):
        raise KeyError(f"no sortable column {key!r}")


class Table:
    """The sort, page size and export a list request asks for (see the module docstring).

    `sorts` maps each sortable key to the fields it orders by (a queryset's order_by expressions) or, for
    rows in Python, a function of the row. `default` is a key, prefixed with "-" for descending. `tiebreak`
    (querysets) is appended in the same direction so pages never overlap.
    """

    def __init__(
        self,
        request,
        name: str,
        sorts: Mapping[str, SortSpec],
        default: str,
        *,
        per_page: int = 50,
        tiebreak: str | None = "pk",
        strict: bool = False,
        exports: bool = True,
    ):
        self.request = request
        self.name = name
        self.sorts = dict(sorts)
        self.default = default
        self.tiebreak = tiebreak
        self.exports = exports
        params = request.GET
        raw = (params.getlist("sort") or [""])[-1].strip()
        key = raw.removeprefix("-")
        if raw and key not in self.sorts:
            if strict:
                raise BadRequest(unknown_sort(raw, self.sorts))
            raw = ""
        self.sort = raw or default
        self.key = self.sort.removeprefix("-")
        self.descending = self.sort.startswith("-")
        self.per_page = page_size(params, per_page)
        self.default_per_page = per_page
        fmt = params.get("export", "")
        self.export_format = fmt if exports and fmt in EXPORT_FORMATS else None

    # ------------------------------------------------------------------------------------------ ordering

    @property
    def ordering(self) -> list[str]:
        spec = self.sorts[self.key]
        if callable(spec):
            raise TypeError(f"column {self.key!r} sorts rows in Python: use order_rows()")
        fields = [_flip(f) if self.descending else f for f in spec]
        if self.tiebreak and self.tiebreak not in spec:
            fields.append(_flip(self.tiebreak) if self.descending else self.tiebreak)
        return fields

    def order(self, queryset: QuerySet) -> QuerySet:
        return queryset.order_by(*self.ordering)

    def order_rows(self, rows: Iterable) -> list:
        """Rows computed in Python, sorted by the key's function (None sorts first, then by value)."""
        spec = self.sorts[self.key]
        if not callable(spec):
            field = spec[0].removeprefix("-")

            def spec(row, field=field):
                return getattr(row, field)

        def key(row):
            value = spec(row)
            return (value is not None, value)

        return sorted(rows, key=key, reverse=self.descending)

    def page(self, rows) -> Page:
        return Paginator(rows, self.per_page).get_page(self.request.GET.get("page"))

    # ------------------------------------------------------------------------------------------ links

    def url(self, **changes) -> str:
        """This list's URL with `changes` applied (None removes a parameter); always back to page 1."""
        params: QueryDict = self.request.GET.copy()
        for name in ("page", "export", *changes):
            params.pop(name, None)
        for name, value in changes.items():
            if value is not None:
                params[name] = str(value)
        query = params.urlencode()
        return f"{self.request.path}?{query}" if query else self.request.path

    @property
    def headers(self) -> dict[str, Header]:
        headers = _Headers()
        for key in self.sorts:
            if key == self.key:
                aria = "descending" if self.descending else "ascending"
                target = key if self.descending else f"-{key}"
            else:
                aria = None
                # A column first sorts the way its default would (the default's direction for its key).
                target = self.default if self.default.removeprefix("-") == key else key
            headers[key] = Header(self.url(sort=None if target == self.default else target), aria)
        return headers

    @property
    def export_urls(self) -> dict[str, str]:
        if not self.exports:
            return {}
        urls = {}
        for fmt in EXPORT_FORMATS:
            params: QueryDict = self.request.GET.copy()
            params.pop("page", None)
            params.pop("per_page", None)
            params["export"] = fmt
            urls[fmt] = f"{self.request.path}?{params.urlencode()}"
        return urls

    @property
    def size_choices(self) -> list[tuple[int, bool]]:
        return [(size, size == self.per_page) for size in PAGE_SIZES]

    @property
    def kept_params(self) -> list[tuple[str, str]]:
        """The current parameters a page size form must carry along (all but page, per_page, export)."""
        return [
            (name, value)
            for name, values in self.request.GET.lists()
            if name not in ("page", "per_page", "export")
            for value in values
        ]

    # ------------------------------------------------------------------------------------------ export

    def filename(self, extension: str, noun: str | None = None) -> str:
        return f"{noun or self.name}-{timezone.localdate().isoformat()}.{extension}"

    def export(self, columns: list[Column], rows: Iterable, noun: str | None = None) -> StreamingHttpResponse:
        """The rows as the requested format, streamed; a queryset is read CHUNK rows at a time."""
        if isinstance(rows, QuerySet):
            rows = rows.iterator(chunk_size=CHUNK)
        fmt = self.export_format or "csv"
        body = _csv(columns, rows) if fmt == "csv" else _json(columns, rows)
        content_type = "text/csv; charset=utf-8" if fmt == "csv" else "application/json"
        response = StreamingHttpResponse(body, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{self.filename(fmt, noun)}"'
        response["Cache-Control"] = "private, no-store"
        return response


class _Line:
    """A file-like object csv.writer writes one line into, handed straight back."""

    def write(self, text: str) -> str:
        return text


def _csv(columns: list[Column], rows: Iterable):
    writer = csv.writer(_Line())
    yield writer.writerow([column.key for column in columns])
    for row in rows:
        yield writer.writerow([safe_cell(column.value(row)) for column in columns])


def _json(columns: list[Column], rows: Iterable):
    encoder = DjangoJSONEncoder(ensure_ascii=False)
    yield "["
    first = True
    for row in rows:
        item = {column.key: column.value(row) for column in columns}
        yield ("\n" if first else ",\n") + encoder.encode(item)
        first = False
    yield "\n]\n"


class SortFilter(BaseFilterBackend):
    """`?sort=key` / `?sort=-key` on API lists: the view's `sort_fields` ({key: order_by fields}, as Table's
    `sorts`); an unknown key is a 400 saying which keys there are. Views without `sort_fields` are untouched.
    """

    def filter_queryset(self, request, queryset, view):
        sorts = getattr(view, "sort_fields", None)
        raw = request.query_params.get("sort", "")
        if not sorts or not raw:
            return queryset
        key = raw.removeprefix("-")
        if key not in sorts:
            raise ValidationError({"sort": [unknown_sort(raw, sorts)]})
        descending = raw.startswith("-")
        fields = [_flip(f) if descending else f for f in sorts[key]]
        if "pk" not in sorts[key]:
            fields.append("-pk" if descending else "pk")
        return queryset.order_by(*fields)

    def get_schema_operation_parameters(self, view):
        sorts = getattr(view, "sort_fields", None)
        if not sorts:
            return []
        values = [value for key in sorts for value in (key, f"-{key}")]
        return [
            {
                "name": "sort",
                "required": False,
                "in": "query",
                "description": "Order of the list: a column, prefixed with - for descending.",
                "schema": {"type": "string", "enum": values},
            }
        ]


def json_dumps(value: Any) -> str:
    """A JSON value (a dict or list field) as one CSV cell."""
    return "" if value in (None, "", [], {}) else json.dumps(value, sort_keys=True, default=str)

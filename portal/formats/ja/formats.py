"""Japanese formats the portal changes (Django's own for the rest): a moment names its zone ("2026年11月30日
19:28 JST": the Django admin's dates and times, which use DATETIME_FORMAT)."""

DATETIME_FORMAT = "Y年n月j日G:i T"

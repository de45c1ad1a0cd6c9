"""English formats the portal changes (Django's own for the rest): a moment names its zone (the Django
admin's dates and times, which use DATETIME_FORMAT; the portal's pages name it through core.moments)."""

DATETIME_FORMAT = "N j, Y, P T"

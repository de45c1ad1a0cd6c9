from django.shortcuts import render

from inventory import selectors


def home(request):
    """The overview: the whole fleet at a glance, a fixed handful of aggregate queries."""
    return render(request, "portal/home.html", {"overview": selectors.overview(request.user)})

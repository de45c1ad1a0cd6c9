"""The Django admin's change forms in the viewer's zone (portal.web.middleware.ViewerTimezoneMiddleware): a
form for a model with dates and times says which zone they are read and shown in
(templates/admin/change_form.html): the admin writes them without their zone."""

from django import template
from django.db import models

register = template.Library()


@register.filter
def has_moments(opts) -> bool:
    """Whether the model of `opts` (its _meta, the change form's `opts`) has a date-and-time field."""
    return any(isinstance(field, models.DateTimeField) for field in opts.get_fields())

"""django-axes in the admin in the viewer's language, without forking it.

Axes marks its models', fields' and filters' names for translation (gettext_lazy) but ships no Japanese
catalogue: the same English texts are marked here, so they land in the portal's catalogue, whose Japanese
gettext finds for them (a translation is looked up by its English text in every installed app's catalogue).
Its lockout column, which it leaves without a translated title, gets one (re-registered, as Django allows).
"""

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.contrib import admin
from django.utils.translation import gettext_lazy, gettext_noop

AXES_WORDS = (
    gettext_noop("access attempt"),
    gettext_noop("access attempts"),
    gettext_noop("access attempt expiration"),
    gettext_noop("access attempt expirations"),
    gettext_noop("access failure"),
    gettext_noop("access failures"),
    gettext_noop("access log"),
    gettext_noop("access logs"),
    gettext_noop("Access Attempt"),
    gettext_noop("Access lock out"),
    gettext_noop("Attempt Remaining"),
    gettext_noop("Attempt Time"),
    gettext_noop("Clean up expired attempts"),
    gettext_noop("Expires At"),
    gettext_noop("Failed Logins"),
    gettext_noop("Form Data"),
    gettext_noop("GET Data"),
    gettext_noop("HTTP Accept"),
    gettext_noop("IP Address"),
    gettext_noop("Locked Out"),
    gettext_noop("Logout Time"),
    gettext_noop("Meta Data"),
    gettext_noop("Not set"),
    gettext_noop("POST Data"),
    gettext_noop("Path"),
    gettext_noop("Session key hash (sha256)"),
    gettext_noop("The time when access attempt expires and is no longer valid."),
    gettext_noop("User Agent"),
    gettext_noop("Username"),
)


class LockoutAdmin(AccessAttemptAdmin):
    @admin.display(description=gettext_lazy("Status"))
    def status(self, obj):
        return super().status(obj)


if admin.site.is_registered(AccessAttempt):
    admin.site.unregister(AccessAttempt)
admin.site.register(AccessAttempt, LockoutAdmin)

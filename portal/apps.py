from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal"

    def ready(self):
        from django.contrib import admin

        # Django admin says whose it is: its header, the browser tab and the index page.
        admin.site.site_header = "Rackplane administration"
        admin.site.site_title = "Rackplane admin"
        admin.site.index_title = "Rackplane administration"
        admin.site.site_url = "/"

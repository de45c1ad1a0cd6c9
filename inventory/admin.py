from django.contrib import admin

from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack


@admin.register(Rack)
class RackAdmin(admin.ModelAdmin):
    list_display = ["name", "system_model", "cluster_uuid", "location"]
    list_filter = ["system_model"]
    search_fields = ["name", "cluster_uuid", "location"]


@admin.register(NVLinkPartition)
class NVLinkPartitionAdmin(admin.ModelAdmin):
    list_display = ["__str__", "rack", "clique_id", "name"]
    list_filter = ["rack"]
    search_fields = ["name", "rack__name"]
    list_select_related = ["rack"]


@admin.register(ComputeTray)
class ComputeTrayAdmin(admin.ModelAdmin):
    list_display = ["hostname", "rack", "slot", "state", "state_reason", "partition", "reported_clique"]
    list_filter = ["state", "rack__system_model"]
    search_fields = ["hostname", "rack__name"]
    list_select_related = ["rack", "partition__rack"]
    raw_id_fields = ["rack", "partition"]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["uuid", "tray", "index", "product", "health", "fabric_state", "reported_clique_id"]
    list_filter = ["health", "fabric_state", "product"]
    search_fields = ["uuid", "serial", "tray__hostname"]
    list_select_related = ["tray"]
    raw_id_fields = ["tray"]

from rest_framework.routers import DefaultRouter

from inventory.api import views

router = DefaultRouter()
router.register("racks", views.RackViewSet, basename="rack")
router.register("trays", views.ComputeTrayViewSet, basename="tray")
router.register("gpus", views.GpuViewSet, basename="gpu")
router.register("partitions", views.NVLinkPartitionViewSet, basename="partition")

urlpatterns = [
    *router.urls,
]

from rest_framework.routers import DefaultRouter

from inventory.api import views
from inventory.api.plans import PartitionPlanViewSet

router = DefaultRouter()
router.register("racks", views.RackViewSet, basename="rack")
router.register("trays", views.ComputeTrayViewSet, basename="tray")
router.register("gpus", views.GpuViewSet, basename="gpu")
router.register("partitions", views.NVLinkPartitionViewSet, basename="partition")
router.register("partition-plans", PartitionPlanViewSet, basename="partition-plan")

urlpatterns = [
    *router.urls,
]

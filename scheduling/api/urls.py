from rest_framework.routers import SimpleRouter

from scheduling.api import views

# SimpleRouter: the API root at /api/v1/ belongs to the inventory router (a second root would shadow it).
router = SimpleRouter()
router.register("jobs", views.JobViewSet, basename="job")

urlpatterns = router.urls

from rest_framework.routers import DefaultRouter

router = DefaultRouter()
urlpatterns = router.urls

from django.urls import path  # noqa: F401

from memoryapp.views import support  # noqa: F401

urlpatterns = []

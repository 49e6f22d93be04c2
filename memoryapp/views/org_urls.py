from django.urls import path  # noqa: F401

from memoryapp.views import org  # noqa: F401

urlpatterns = []

from django.urls import path  # noqa: F401

from memoryapp.views import account  # noqa: F401

urlpatterns = []

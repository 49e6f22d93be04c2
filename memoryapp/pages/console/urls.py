"""Support console pages for staff, mounted at /console/."""

from django.urls import path

from memoryapp.pages.console import views

urlpatterns = [
    path("", views.find, name="console-home"),
    path("facts/<uuid:fact_id>/", views.fact, name="console-fact"),
    path("facts/<uuid:fact_id>/restore", views.restore, name="console-restore"),
    path("sessions/<uuid:session_id>/", views.conversation, name="console-conversation"),
    path("sessions/<uuid:session_id>/rerun", views.rerun_extraction, name="console-rerun"),
    path("runs/<int:run_id>/", views.run, name="console-run"),
    path("health/", views.health, name="console-health"),
    path("poisoning/", views.poisoning_audit, name="console-poisoning"),
    path("poisoning/<uuid:fact_id>/", views.poisoning_action, name="console-poisoning-action"),
    path("quality/", views.quality, name="console-quality"),
    path("quality/review/", views.review_queue, name="console-review"),
    path("quality/review/draw", views.review_draw, name="console-review-draw"),
    path("quality/review/<int:review_id>/", views.review_judge, name="console-review-judge"),
    path("access/", views.access_log, name="console-access"),
    path("at-limit/", views.at_limit, name="console-limit"),
    path("forgetting/", views.forgetting_log, name="console-forgetting"),
    path("forgetting/<int:run_id>/", views.forgetting_run, name="console-forgetting-run"),
]

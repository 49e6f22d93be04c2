"""Support console pages for staff, mounted at /console/."""

from django.urls import path

from memoryapp.views import support

urlpatterns = [
    path("", support.find, name="console-home"),
    path("facts/<uuid:fact_id>/", support.fact, name="console-fact"),
    path("facts/<uuid:fact_id>/restore", support.restore, name="console-restore"),
    path("sessions/<uuid:session_id>/", support.conversation, name="console-conversation"),
    path("sessions/<uuid:session_id>/rerun", support.rerun_extraction, name="console-rerun"),
    path("runs/<int:run_id>/", support.run, name="console-run"),
    path("health/", support.health, name="console-health"),
    path("poisoning/", support.poisoning_audit, name="console-poisoning"),
    path("poisoning/<uuid:fact_id>/", support.poisoning_action, name="console-poisoning-action"),
    path("quality/", support.quality, name="console-quality"),
    path("quality/review/", support.review_queue, name="console-review"),
    path("quality/review/draw", support.review_draw, name="console-review-draw"),
    path("quality/review/<int:review_id>/", support.review_judge, name="console-review-judge"),
    path("access/", support.access_log, name="console-access"),
    path("at-limit/", support.at_limit, name="console-limit"),
    path("forgetting/", support.forgetting_log, name="console-forgetting"),
    path("forgetting/<int:run_id>/", support.forgetting_run, name="console-forgetting-run"),
]

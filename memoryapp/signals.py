"""Receivers for Django's own signals."""

from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver

from memoryapp.models import SignIn


@receiver(user_logged_in, dispatch_uid="memoryapp.record_sign_in")
def record_sign_in(sender, request, user, **kwargs):
    """Keep the new sign-in session's key with the person, for erasure (login has cycled it already)."""
    if request is not None and hasattr(request, "session"):
        if request.session.session_key is None:
            request.session.save()
        SignIn.objects.get_or_create(user=user, session_key=request.session.session_key)

"""The support access log: who at support looked at whose memory, and where."""

from memoryapp import clock
from memoryapp.models import SupportAccess


def record(staff, user, page):
    """Log that `staff` opened `user`'s facts or conversations on `page`; no-op without a person."""
    if user is None:
        return None
    user_id = getattr(user, "pk", user)
    return SupportAccess.objects.create(
        staff=staff, staff_name=staff.get_username(), user_id=user_id, page=page[:200], created_at=clock.now()
    )


def record_many(staff, user_ids, page):
    """Log one access per distinct person shown on a page that lists several people's memory."""
    ids = sorted({uid for uid in user_ids if uid is not None})
    now = clock.now()
    SupportAccess.objects.bulk_create(
        SupportAccess(staff=staff, staff_name=staff.get_username(), user_id=uid, page=page[:200], created_at=now)
        for uid in ids
    )
    return len(ids)


def accesses_for(user):
    """Everyone at support who looked at `user`'s memory, newest first."""
    return SupportAccess.objects.filter(user=user).order_by("-created_at", "-id")

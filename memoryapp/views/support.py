"""Support console pages for staff."""

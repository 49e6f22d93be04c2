"""Organisation pages for members and admins."""

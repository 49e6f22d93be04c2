"""Django's PostgreSQL backend, plus what happens on the first connection of a process.

With no DATABASE_URL, the first connection starts (or reuses) the embedded PostgreSQL under
.data/; with one, the first connection checks that the server has pgvector >= 0.8. Nothing
happens at import, so `manage.py help`, `check` and `makemigrations --check` touch no database.
"""

from django.db.backends.postgresql import base

from memoryapp import db


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self):
        params = super().get_connection_params()
        if self.settings_dict.get("EMBEDDED"):
            params.update(db.embedded_connection_params())
        else:
            db.check_pgvector_once(params)
        return params

"""Django's PostgreSQL backend, plus what happens on the first connection of a process.

With no DATABASE_URL, the first connection starts (or reuses) the embedded PostgreSQL under
.data/; with one, the first connection checks that the server has pgvector >= 0.8. Nothing
happens at import, so `manage.py help`, `check` and `makemigrations --check` touch no database.
"""

from django.db.backends.postgresql import base

from memoryapp import db

# psycopg prepares a statement only on a cursor that asks (prepare=True) once this is not None; a
# huge threshold means nothing is ever prepared automatically. Django's own cursors bind client-side
# and are never prepared whatever this says.
PREPARE_ONLY_ON_REQUEST = 2**31


class PreparedCursor(base.ServerBindingCursor):
    """A server-side-binding cursor whose every statement is prepared once per connection.

    Rows come back in PostgreSQL's binary format: no text parsing of timestamps, ids and floats.
    """

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=True)


class DatabaseOperations(base.DatabaseOperations):
    def last_executed_query(self, cursor, sql, params):
        # A prepared statement leaves no client-side query text behind: compose it for the log
        # (debug and tests only; as Django does for server-side binding).
        return super().last_executed_query(cursor, sql, params) or self.compose_sql(sql, params)


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations

    def init_connection_state(self):
        super().init_connection_state()
        self.connection.prepare_threshold = PREPARE_ONLY_ON_REQUEST
        # Why a generic plan: the recall statement has the same shape for every user and message, and
        # planning its CTEs cost about as much as running them. The setting affects prepared
        # statements only, and only PreparedCursor makes any. (Behind a pooler that drops session
        # settings, recall gets a plan per execution instead: slower, never wrong.)
        with self.connection.cursor() as cursor:
            cursor.execute("SET plan_cache_mode = force_generic_plan")
        if not self.get_autocommit():
            self.connection.commit()

    def prepared_cursor(self):
        """A cursor for a hot statement: prepared on first use on this connection, then run without planning."""
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            return self._prepare_cursor(PreparedCursor(self.connection))

    def get_connection_params(self):
        params = super().get_connection_params()
        if self.settings_dict.get("EMBEDDED"):
            params.update(db.embedded_connection_params())
        else:
            db.check_pgvector_once(params)
        return params

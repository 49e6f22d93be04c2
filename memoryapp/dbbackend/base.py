"""Django's PostgreSQL backend, plus what happens on the first connection of a process.

With no DATABASE_URL, the first connection starts (or reuses) the embedded PostgreSQL under
.data/; with one, the first connection checks that the server has pgvector >= 0.8. Nothing
happens at import, so `manage.py help`, `check` and `makemigrations --check` touch no database.
"""

import functools

from django.db.backends.postgresql import base
from pgvector import Vector
from pgvector.psycopg.vector import VectorBinaryDumper

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
        if isinstance(params, dict):  # a binary vector parameter is logged in pgvector's text form
            params = {k: v.to_text() if isinstance(v, Vector) else v for k, v in params.items()}
        return super().last_executed_query(cursor, sql, params) or self.compose_sql(sql, params)


@functools.cache
def _vector_dumper(oid):
    """pgvector's binary dumper, bound to the `vector` type's oid in one database."""
    return type("VectorParam", (VectorBinaryDumper,), {"oid": oid})


class DatabaseWrapper(base.DatabaseWrapper):
    ops_class = DatabaseOperations
    vector_oid = None  # the `vector` type's oid in this connection's database

    def init_connection_state(self):
        super().init_connection_state()
        self.connection.prepare_threshold = PREPARE_ONLY_ON_REQUEST
        # Why a generic plan: the recall statement has the same shape for every user and message, and
        # planning its CTEs cost about as much as running them. The setting affects prepared
        # statements only, and only PreparedCursor makes any. (Behind a pooler that drops session
        # settings, recall gets a plan per execution instead: slower, never wrong.)
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('plan_cache_mode', 'force_generic_plan', false), to_regtype('vector')::oid"
            )
            self.vector_oid = cursor.fetchone()[1]  # None before the first migration creates the extension
        if not self.get_autocommit():
            self.connection.commit()

    def prepared_cursor(self):
        """A cursor for a hot statement: prepared on first use on this connection, then run without planning.

        A `pgvector.Vector` parameter goes to the server in binary (1.5 KB for MiniLM, nothing to
        format here or to parse there); the text form of 384 floats cost about 0.2 ms a recall.
        """
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            cursor = PreparedCursor(self.connection)
            if self.vector_oid is None:
                self.vector_oid = self.connection.execute("SELECT to_regtype('vector')::oid").fetchone()[0]
            if self.vector_oid is not None:
                cursor.adapters.register_dumper(Vector, _vector_dumper(self.vector_oid))
            return self._prepare_cursor(cursor)

    def get_connection_params(self):
        params = super().get_connection_params()
        if self.settings_dict.get("EMBEDDED"):
            params.update(db.embedded_connection_params())
        else:
            db.check_pgvector_once(params)
        return params

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

    def _configure_connection(self, connection):
        """Once per physical connection (by the pool when it opens one, else on connect)."""
        commit = super()._configure_connection(connection)
        # The `vector` type's oid in this connection's database, kept on the connection itself: a
        # pooled connection serves many threads' wrappers, and a test database has its own oid.
        connection.memoryapp_vector_oid = connection.execute("SELECT to_regtype('vector')::oid").fetchone()[0]
        return True if not connection.autocommit else commit

    def prepared_cursor(self):
        """A cursor for a hot statement: prepared on first use on this connection, then run without planning.

        A `pgvector.Vector` parameter goes to the server in binary (1.5 KB for MiniLM, nothing to
        format here or to parse there); the text form of 384 floats cost about 0.2 ms a recall.
        """
        self.close_if_health_check_failed()
        self.ensure_connection()
        with self.wrap_database_errors:
            cursor = PreparedCursor(self.connection)
            oid = getattr(self.connection, "memoryapp_vector_oid", None)
            if oid is None:  # the extension did not exist yet when the connection was configured
                oid = self.connection.memoryapp_vector_oid = self.connection.execute(
                    "SELECT to_regtype('vector')::oid"
                ).fetchone()[0]
            if oid is not None:
                cursor.adapters.register_dumper(Vector, _vector_dumper(oid))
            return self._prepare_cursor(cursor)

    def get_new_connection(self, conn_params):
        try:
            return super().get_new_connection(conn_params)
        except self.Database.OperationalError:  # refused, or the pool's wait ran out (PoolTimeout)
            # The embedded server stopped (a crash, `embedded_db stop`, a reboot): start it again here,
            # on this connection attempt, instead of answering 503 until someone starts it by hand.
            # A pool's connections point at the old server, so the pool is rebuilt too.
            if not (self.settings_dict.get("EMBEDDED") and db.embedded_stopped()):
                raise
            self.close_pool()
            return super().get_new_connection(self.get_connection_params())

    def get_connection_params(self):
        params = super().get_connection_params()
        if self.settings_dict.get("EMBEDDED"):
            # Django's error, not psycopg's: the pool asks for these outside Django's own wrapping.
            with self.wrap_database_errors:
                params.update(db.embedded_connection_params())
        elif self.settings_dict.get("CHECK_PGVECTOR", True):
            db.check_pgvector_once(params)
        return params

"""The owner of cosid.database, a role that is no superuser (with CREATEDB, as the owner of a
database often is), against the leases: the per-database settings that would break a worker's
session, and the statements that would keep the workers out of the database or take it away."""

from .pgcluster import SqlError, query_as

# Settings that, given to cosid.database with ALTER DATABASE ... SET, would make every claim fail
# (read-only transactions), change what the protocol's transactions see, or end their sessions.
BREAKING_SETTINGS = [
    "default_transaction_read_only = on",
    "default_transaction_isolation = 'serializable'",
    "statement_timeout = '1ms'",
    "idle_session_timeout = '200ms'",
    "idle_in_transaction_session_timeout = '1ms'",
]
# Settings the owner can attach to the database that reach past the protocol's own pins: every
# new session of the database acts as the owner (the workers were refused the schema cosid),
# JIT compiles every statement, and the planner avoids what the protocol's statements use.
ATTACHED_SETTINGS = [
    "role = 'alice'",
    "jit = on",
    "jit_above_cost = 0",
    "jit_inline_above_cost = 0",
    "jit_optimize_above_cost = 0",
    "enable_indexscan = off",
    "enable_bitmapscan = off",
    "search_path = alice, public",
    "lock_timeout = '1ms'",
]
# Of those, the ones that leave the clients' own sessions of the database working (a 1 ms
# statement timeout would cancel their calls, whatever cosid does).
SETTINGS_CLIENTS_SURVIVE = [s for s in BREAKING_SETTINGS if not s.startswith("statement_timeout")]

# The statements that would keep the workers out of the database or move it away; each is
# refused with 55006 while the database is cosid.database.
TAKING_IT_AWAY = [
    "ALTER DATABASE {db} ALLOW_CONNECTIONS false",
    "ALTER DATABASE {db} WITH ALLOW_CONNECTIONS = false",
    "ALTER DATABASE {db} RENAME TO {db}_old",
    "DROP DATABASE {db}",
    "DROP DATABASE {db} WITH (FORCE)",
]


def make_owner(cluster, role, database):
    """`role`, with LOGIN and CREATEDB and no superuser, made the owner of `database` (created
    if it does not exist)."""
    cluster.query(f"CREATE ROLE {role} LOGIN CREATEDB")
    if cluster.query(f"SELECT count(*) FROM pg_database WHERE datname = '{database}'") == "0":
        cluster.query(f"CREATE DATABASE {database} OWNER {role}")
    else:
        cluster.query(f"ALTER DATABASE {database} OWNER TO {role}")


def set_database_settings(cluster, role, database, settings=BREAKING_SETTINGS):
    """The owner gives `database` the settings; they take effect for its new sessions."""
    for setting in settings:
        query_as(cluster, role, f"ALTER DATABASE {database} SET {setting}", db="template1")


def try_taking_it_away(cluster, role, database):
    """Runs each statement of TAKING_IT_AWAY as the owner, from template1 (a database cannot be
    dropped from a session of its own); returns {statement: the SqlError, or None if it went
    through}."""
    answers = {}
    for template in TAKING_IT_AWAY:
        sql = template.format(db=database)
        try:
            query_as(cluster, role, sql, db="template1")
            answers[sql] = None
        except SqlError as error:
            answers[sql] = error
    return answers

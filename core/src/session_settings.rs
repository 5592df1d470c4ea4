//! The settings every session of a lease worker runs with, in its own database (`cosid.database`)
//! and on a shared lease store, whatever `ALTER DATABASE ... SET` or `ALTER ROLE ... SET` gave
//! the session: the owner of a database, or a store role (its own settings, with its password),
//! who need not be a superuser, could otherwise make every claim fail (read-only transactions),
//! end the session between renewals, or change what the protocol's PL/pgSQL means. One list for
//! both transports.

/// A setting pinned for the whole session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinned {
    pub name: &'static str,
    pub value: &'static str,
    /// The first PostgreSQL version that has it (`server_version_num`).
    pub since: u32,
    /// Only a superuser may set it, or give it to a database or role: a session that is no
    /// superuser's cannot pin it, and needs not to.
    pub superuser_only: bool,
}

const fn pinned(
    name: &'static str,
    value: &'static str,
    since: u32,
    superuser_only: bool,
) -> Pinned {
    Pinned {
        name,
        value,
        since,
        superuser_only,
    }
}

/// Every pinned setting, from the oldest store version on (PostgreSQL 13).
pub const PINNED: &[Pinned] = &[
    pinned("default_transaction_read_only", "off", 0, false),
    pinned("default_transaction_isolation", "read committed", 0, false),
    pinned("default_transaction_deferrable", "off", 0, false),
    pinned("statement_timeout", "0", 0, false),
    pinned("idle_in_transaction_session_timeout", "0", 0, false),
    pinned("idle_session_timeout", "0", 140000, false),
    pinned("transaction_timeout", "0", 170000, false),
    pinned("exit_on_error", "off", 0, true),
    pinned("session_replication_role", "origin", 0, true),
    pinned("plpgsql.variable_conflict", "error", 0, true),
    pinned("plpgsql.extra_errors", "none", 0, false),
    pinned("plpgsql.extra_warnings", "none", 0, false),
    // JIT compiling the protocol's small statements only slows them: with its costs set to 0 by
    // a database's owner, every call ran into its timeout.
    pinned("jit", "off", 110000, false),
    // A database's owner can make every new session of it act as another role
    // (`ALTER DATABASE ... SET role`): the worker's calls were then refused the schema cosid.
    pinned("role", "none", 0, false),
];

/// The statement a lease worker runs in its own database (`cosid.database`) right after it
/// connected and pinned [`PINNED`], in a transaction: it undoes whatever else
/// `ALTER DATABASE ... SET` or `ALTER ROLE ... IN DATABASE ... SET` gave the session. The
/// session is the bootstrap superuser's again (`session_authorization` and `role`, which the
/// database's owner can set for the database, and which hide from `pg_settings`), and every
/// setting whose value came from the database or a role takes its built-in default, so that
/// only the server's own configuration (postgresql.conf, `ALTER SYSTEM`, the command line:
/// a superuser's) reaches the worker. A setting that cannot take its default is left with a
/// warning in the server's log: nothing the protocol depends on is among them, since those
/// are pinned above or set in each transaction.
pub fn worker_reset_sql() -> &'static str {
    "DO $cosid$ \
     DECLARE s record; \
     BEGIN \
       PERFORM pg_catalog.set_config('role', 'none', false); \
       BEGIN \
         PERFORM pg_catalog.set_config('session_authorization', \
           (SELECT r.rolname FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) 10), false); \
         PERFORM pg_catalog.set_config('role', 'none', false); \
       EXCEPTION WHEN OTHERS THEN \
         RAISE WARNING 'cosid: the lease worker could not take its session back as the bootstrap superuser: %', \
           SQLERRM; \
       END; \
       FOR s IN SELECT p.name, p.boot_val FROM pg_catalog.pg_settings p \
                 WHERE p.source OPERATOR(pg_catalog.=) ANY (ARRAY['database', 'user', 'database user']) LOOP \
         BEGIN \
           PERFORM pg_catalog.set_config(s.name, COALESCE(s.boot_val, ''), false); \
         EXCEPTION WHEN OTHERS THEN \
           RAISE WARNING 'cosid: the lease worker could not give the setting \"%\" its default: %', \
             s.name, SQLERRM; \
         END; \
       END LOOP; \
     END $cosid$"
}

/// The settings a session of PostgreSQL `server_version_num` pins, as a superuser or not.
pub fn pinned_for(
    server_version_num: u32,
    superuser: bool,
) -> impl Iterator<Item = &'static Pinned> {
    PINNED.iter().filter(move |setting| {
        setting.since <= server_version_num && (superuser || !setting.superuser_only)
    })
}

/// The statement that pins [`PINNED`] on a session of a shared store, in one round trip: the
/// store's version and the store role's privileges decide which settings apply, there. Run with
/// `search_path` set to `pg_catalog, pg_temp`.
///
/// `default_transaction_read_only` is pinned only where a database or role setting gave it: set
/// in the store's own configuration, it says the host takes no writes (an old primary fenced
/// off), as libpq's `target_session_attrs=read-write` reads it, and the store client passes that
/// host over.
pub fn store_pinning_sql() -> String {
    let rows = PINNED
        .iter()
        .map(|setting| {
            format!(
                "('{}', '{}', {}, {})",
                setting.name, setting.value, setting.since, setting.superuser_only
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT pg_catalog.count(pg_catalog.set_config(p.name, p.value, false)) \
         FROM (VALUES {rows}) AS p(name, value, since, superuser_only) \
         WHERE p.since OPERATOR(pg_catalog.<=) pg_catalog.current_setting('server_version_num')::pg_catalog.int4 \
         AND (NOT p.superuser_only OR pg_catalog.current_setting('is_superuser') OPERATOR(pg_catalog.=) 'on') \
         AND (p.name OPERATOR(pg_catalog.<>) 'default_transaction_read_only' \
         OR EXISTS (SELECT FROM pg_catalog.pg_settings s WHERE s.name OPERATOR(pg_catalog.=) p.name \
         AND s.source OPERATOR(pg_catalog.=) ANY (ARRAY['database', 'user', 'database user'])))"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_values_need_no_quoting() {
        for setting in PINNED {
            assert!(setting
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.'));
            assert!(setting
                .value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == ' '));
        }
    }

    #[test]
    fn a_version_pins_only_what_it_has() {
        let of = |version, superuser| {
            pinned_for(version, superuser)
                .map(|setting| setting.name)
                .collect::<Vec<_>>()
        };
        assert!(!of(130000, true).contains(&"idle_session_timeout"));
        assert!(of(140000, true).contains(&"idle_session_timeout"));
        assert!(!of(160000, true).contains(&"transaction_timeout"));
        assert!(of(180000, true).contains(&"transaction_timeout"));
        assert_eq!(of(180000, true).len(), PINNED.len());
    }

    #[test]
    fn a_session_that_is_no_superusers_leaves_out_what_it_cannot_set() {
        let names: Vec<_> = pinned_for(180000, false).map(|s| s.name).collect();
        assert!(names.contains(&"default_transaction_read_only"));
        assert!(!names.contains(&"session_replication_role"));
        assert!(!names.contains(&"exit_on_error"));
        assert!(!names.contains(&"plpgsql.variable_conflict"));
    }

    #[test]
    fn the_worker_takes_back_its_identity_and_every_attached_setting() {
        let sql = worker_reset_sql();
        assert!(sql.contains("'session_authorization'"));
        assert!(sql.contains("'role', 'none'"));
        assert!(sql.contains("ARRAY['database', 'user', 'database user']"));
        assert!(sql.contains("EXCEPTION WHEN OTHERS"));
        // COALESCE is a keyword, not a function of pg_catalog.
        assert!(!sql.contains("pg_catalog.coalesce"));
        let names: Vec<_> = pinned_for(150000, true).map(|s| s.name).collect();
        assert!(names.contains(&"jit"));
        assert!(names.contains(&"role"));
    }

    #[test]
    fn the_store_statement_lists_every_setting_with_its_conditions() {
        let sql = store_pinning_sql();
        for setting in PINNED {
            assert!(sql.contains(&format!(
                "('{}', '{}', {}, {})",
                setting.name, setting.value, setting.since, setting.superuser_only
            )));
        }
        assert!(sql.contains("server_version_num"));
        assert!(sql.contains("is_superuser"));
        assert!(sql.contains("'database user'"));
    }
}

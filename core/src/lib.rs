//! cosid's pure logic, with no PostgreSQL calls: the id layout and its text forms, the lock-free
//! generator state machine, the machine-id distributors that need no store, the lease
//! timing policy, where named generators live (`registry`), and the floor of the local state
//! file, which drops of the extension are refused (`uninstall`), and what the shared store's
//! client takes from a connection string (`store_client`). The extension
//! (`src/` at the top of the repository) wraps these for SQL; everything here is unit-tested on its
//! own with `cargo test -p cosid-core`.

pub mod conninfo;
pub mod cosid_jdbc;
pub mod cosid_redis;
pub mod distributor;
pub mod generator;
pub mod history;
pub mod layout;
pub mod lease;
pub mod names;
pub mod protocol;
pub mod registry;
pub mod session_settings;
pub mod state_file;
pub mod store_client;
pub mod store_timeline;
pub mod uninstall;

#[cfg(test)]
mod tests {
    /// The lease session's messages name "this server's cosid" by this crate's version, so it
    /// must be the extension's.
    #[test]
    fn the_core_crate_has_the_extensions_version() {
        let extension =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml"))
                .expect("the extension's Cargo.toml");
        let version = extension
            .lines()
            .find_map(|line| line.strip_prefix("version = \""))
            .and_then(|rest| rest.split('"').next());
        assert_eq!(version, Some(env!("CARGO_PKG_VERSION")));
    }
}

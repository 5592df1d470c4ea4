//! cosid's pure logic, with no PostgreSQL calls: the id layout and its text forms, the lock-free
//! generator state machine, and the machine-id distributors that need no store. The extension
//! (`src/` at the top of the repository) wraps these for SQL; everything here is unit-tested on its
//! own with `cargo test -p cosid-core`.

pub mod distributor;
pub mod generator;
pub mod layout;

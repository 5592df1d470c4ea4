//! Reading the named generators' definitions: the rows of `cosid.generator` in
//! `cosid.database`, checked as the worker must have them (a row edited past the table's checks
//! is skipped, and one that cannot be used safely is named in the log).

use crate::{shmem, store};
use cosid_core::generator::check_sequence_reset_threshold;
use cosid_core::layout::{Layout, LayoutError, TimeUnit};
use cosid_core::names::Conflict;
use cosid_core::protocol::layout_text;
use std::time::Duration;

/// Each read waits at most this long (for a lock, say).
const READ_TIMEOUT: Duration = Duration::from_millis(500);

/// A definition not used, and why.
type Skipped = (String, &'static str);

/// Marks a name or namespace read from the definitions whose bytes are not UTF-8 (it starts
/// with a character no valid text read there has: a NUL).
const NOT_UTF8: &str = "\0";

/// A definition as read from `cosid.generator`.
pub struct Row {
    pub name: String,
    pub namespace: String,
    pub layout: Layout,
    /// NULL: the layout's own (CosId's, half its maximum sequence).
    pub sequence_reset_threshold: Option<u32>,
    /// Nothing at or before this Unix millisecond: the last id this server's generators of the
    /// namespace issued, as `cosid.names` records it (whatever database held them).
    pub floor_ms: Option<i64>,
}

/// The rows of `cosid.generator` (none when the extension is not installed in this database),
/// and the names of those not used because their layout is not their namespace's.
pub fn read_definitions(default_namespace: &str) -> Result<(Vec<Row>, Vec<Skipped>), String> {
    let (raw, recorded) = store::local::in_transaction(READ_TIMEOUT, |client| {
        // Only the extension's own tables: in a database without the extension, a role that
        // may create schemas could otherwise plant a "cosid.generator" that this superuser
        // session would read (a view running the planter's code).
        let installed = client
            .select(
                "SELECT pg_catalog.count(*) = 2 FROM pg_catalog.pg_depend d \
                 JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid \
                 JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid \
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace \
                 WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass \
                 AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
                 AND d.deptype OPERATOR(pg_catalog.=) 'e' \
                 AND e.extname OPERATOR(pg_catalog.=) 'cosid' \
                 AND c.relkind OPERATOR(pg_catalog.=) 'r' \
                 AND n.nspname OPERATOR(pg_catalog.=) 'cosid' \
                 AND c.relname OPERATOR(pg_catalog.=) ANY (ARRAY['generator', 'generator_namespace'])",
                None,
                &[],
            )
            .map_err(|e| e.to_string())?
            .first()
            .get::<bool>(1)
            .map_err(|e| e.to_string())?
            .unwrap_or(false);
        if !installed {
            return Ok((Vec::new(), Vec::new()));
        }
        let recorded = crate::history::recorded_in_database(client)?;
        // The extension's SQL of 0.4.0 (not updated yet) has no threshold column: its
        // generators take their layouts' thresholds.
        let has_threshold = client
            .select(
                "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute \
                 WHERE attrelid OPERATOR(pg_catalog.=) 'cosid.generator'::pg_catalog.regclass \
                 AND attname OPERATOR(pg_catalog.=) 'sequence_reset_threshold' \
                 AND NOT attisdropped)",
                None,
                &[],
            )
            .map_err(|e| e.to_string())?
            .first()
            .get::<bool>(1)
            .map_err(|e| e.to_string())?
            .unwrap_or(false);
        let query = format!(
            // The text as UTF-8 whatever the database's encoding (the names are ASCII by the
            // table's check; a namespace need not be).
            "SELECT pg_catalog.convert_to(g.name, 'UTF8'), \
             pg_catalog.convert_to(g.namespace, 'UTF8'), g.epoch_ms, g.time_unit, \
             g.timestamp_bits, g.machine_bits, g.sequence_bits, n.layout, {} \
             FROM cosid.generator g LEFT JOIN cosid.generator_namespace n \
             ON n.namespace OPERATOR(pg_catalog.=) g.namespace ORDER BY g.created_at, g.name",
            if has_threshold {
                "g.sequence_reset_threshold::pg_catalog.int8"
            } else {
                "NULL::pg_catalog.int8"
            }
        );
        let table = client
            .select(&query, None, &[])
            .map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        for row in table {
            // Bytes that are not UTF-8 (a database of encoding SQL_ASCII) give a row that is
            // skipped below, not an error that would stop every generator.
            let utf8 = |ordinal| {
                row.get::<Vec<u8>>(ordinal)
                    .map(|bytes| {
                        let bytes = bytes.unwrap_or_default();
                        String::from_utf8(bytes).unwrap_or_else(|not_utf8| {
                            format!("{NOT_UTF8}{}", String::from_utf8_lossy(not_utf8.as_bytes()))
                        })
                    })
                    .map_err(|e| e.to_string())
            };
            let text = |ordinal| {
                row.get::<String>(ordinal)
                    .map(Option::unwrap_or_default)
                    .map_err(|e| e.to_string())
            };
            let int = |ordinal| {
                row.get::<i32>(ordinal)
                    .map(|value| value.unwrap_or(-1))
                    .map_err(|e| e.to_string())
            };
            let epoch_ms = row
                .get::<i64>(3)
                .map_err(|e| e.to_string())?
                .unwrap_or(i64::MIN);
            let threshold = row.get::<i64>(9).map_err(|e| e.to_string())?;
            rows.push((
                (utf8(1)?, utf8(2)?),
                epoch_ms,
                text(4)?,
                int(5)?,
                int(6)?,
                int(7)?,
                text(8)?,
                threshold,
            ));
        }
        Ok((rows, recorded))
    })?;
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    let default_namespaces = crate::history::DefaultNamespaces::read(default_namespace, recorded);
    let leases_left_behind = crate::history::leases_left_behind().is_some();
    for (
        (name, namespace),
        epoch_ms,
        unit,
        timestamp_bits,
        machine_bits,
        sequence_bits,
        recorded,
        threshold,
    ) in raw
    {
        // The table's checks keep such rows out; one edited past them (another spelling too)
        // is skipped.
        let Some(time_unit) = TimeUnit::from_name(&unit).filter(|parsed| parsed.name() == unit)
        else {
            continue;
        };
        let bits = |value: i32| u32::try_from(value).ok();
        let (Some(timestamp_bits), Some(machine_bits), Some(sequence_bits)) = (
            bits(timestamp_bits),
            bits(machine_bits),
            bits(sequence_bits),
        ) else {
            continue;
        };
        let layout = match Layout::new(
            epoch_ms,
            time_unit,
            timestamp_bits,
            machine_bits,
            sequence_bits,
        ) {
            Ok(layout) => layout,
            // cosid 0.4.0 and earlier created such generators: their ids decoded wrongly.
            Err(
                LayoutError::MachineBitsTooMany { .. } | LayoutError::SequenceBitsTooMany { .. },
            ) => {
                skipped.push((
                    name,
                    "its machine_bits or sequence_bits are above 31, the widest a machine id or a sequence can be; drop it and create it under a new namespace",
                ));
                continue;
            }
            Err(_) => continue,
        };
        if name.is_empty() || name == shmem::DEFAULT_NAME || namespace.is_empty() {
            continue;
        }
        if name.starts_with(NOT_UTF8) || namespace.starts_with(NOT_UTF8) {
            skipped.push((
                name.trim_start_matches(NOT_UTF8).to_string(),
                "its name or namespace is not text of a known encoding (cosid.database's encoding is SQL_ASCII); drop it and create it under a new namespace",
            ));
            continue;
        }
        if leases_left_behind {
            skipped.push((
                name,
                "the server did not stop cleanly while it leased from another cosid.database's lease table (cosid_next() says which); start it once with that cosid.database and stop it cleanly",
            ));
            continue;
        }
        // The default generator's namespace may have changed since the generator was created:
        // two generators in one namespace would share a fixed machine id, and one the default
        // generator used before holds its ids, whatever the layout.
        match default_namespaces.used(&namespace) {
            Ok(false) => {}
            Ok(true) => {
                skipped.push((
                    name,
                    "its namespace is the default generator's, now (cosid.namespace) or before (cosid.history, cosid.default_namespace); drop it and create it under a new namespace",
                ));
                continue;
            }
            Err(_) => {
                skipped.push((
                    name,
                    "the default generator's history (cosid.history) cannot be read, so whether the default generator used its namespace is unknown (cosid_next()'s error says what the file needs)",
                ));
                continue;
            }
        }
        // A namespace keeps the layout it was first used with: ids of two layouts can
        // coincide. cosid_create_generator records and checks it; a row written past it, or
        // changed since, is not used.
        if recorded != layout_text(&layout) {
            skipped.push((
                name,
                "its layout is not the one cosid.generator_namespace records for its namespace (ids of two layouts can coincide); drop it and create it under a new namespace",
            ));
            continue;
        }
        // The table's check keeps a threshold within the layout; one edited past it is not
        // used rather than taken for another.
        let sequence_reset_threshold = match threshold {
            None => None,
            Some(value) => match check_sequence_reset_threshold(&layout, value) {
                Ok(value) => Some(value),
                Err(_) => {
                    skipped.push((
                        name,
                        "its sequence_reset_threshold is not from 0 to its maximum sequence; drop it and create it under a new namespace",
                    ));
                    continue;
                }
            },
        };
        rows.push(Row {
            name,
            namespace,
            layout,
            sequence_reset_threshold,
            floor_ms: None,
        });
    }
    Ok(keep_server_names(rows, skipped))
}

/// The rows that keep what this server's earlier named generators left, whatever database
/// they were defined in (`cosid.names`): a name its namespace, a namespace its layout. Those
/// not recorded yet are recorded before they can run; a record that cannot be read or written
/// runs none of them.
fn keep_server_names(rows: Vec<Row>, mut skipped: Vec<Skipped>) -> (Vec<Row>, Vec<Skipped>) {
    let mut record = match crate::names::read() {
        Ok(record) => record,
        Err(_) => {
            skipped.extend(rows.into_iter().map(|row| {
                (
                    row.name,
                    "the server's record of its generators' names (cosid.names) cannot be read (cosid_create_generator()'s error says what the file needs)",
                )
            }));
            return (Vec::new(), skipped);
        }
    };
    let mut kept = Vec::new();
    let mut changed = false;
    for row in rows {
        let layout = layout_text(&row.layout);
        match record.conflict(&row.name, &row.namespace, &layout) {
            Some(Conflict::Name { .. }) => skipped.push((
                row.name,
                "its name was used with another namespace on this server (cosid.names); drop it and give the new definition a new name",
            )),
            Some(Conflict::Layout { .. }) => skipped.push((
                row.name,
                "its namespace was used with another layout on this server (cosid.names); drop it and create it under a new name and namespace",
            )),
            None => {
                changed |= record.add(&row.name, &row.namespace, &layout);
                let floor_ms = record.floor_ms(&row.namespace);
                kept.push(Row { floor_ms, ..row });
            }
        }
    }
    if changed && crate::names::write(&record).is_err() {
        let recorded = crate::names::read().unwrap_or_default();
        let (known, unknown): (Vec<Row>, Vec<Row>) = kept.into_iter().partition(|row| {
            recorded.names.contains_key(&row.name)
                && recorded.namespaces.contains_key(&row.namespace)
        });
        skipped.extend(unknown.into_iter().map(|row| {
            (
                row.name,
                "the server's record of its generators' names (cosid.names) cannot be written",
            )
        }));
        kept = known;
    }
    (kept, skipped)
}

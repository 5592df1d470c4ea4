//! Where a server's machine id comes from: `lease` (the default) leases one from a lease store;
//! `cosid_jdbc` and `cosid_redis` lease one from CosId's JDBC distributor table (`cosid_jdbc.rs`) or
//! its Redis distributor (`cosid_redis.rs`); `manual` takes `cosid.machine_id`; `stateful_set` takes the ordinal at the end of `HOSTNAME`,
//! as a pod of a Kubernetes StatefulSet is named (`pg-3` gives 3). This module resolves the two
//! that need no store.
//!
//! Pure: the settings and the environment are passed in.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum DistributorKind {
    Manual = 0,
    StatefulSet = 1,
    Lease = 2,
    /// Leased from CosId's JDBC distributor table (`cosid_jdbc`), shared with Java services.
    CosidJdbc = 3,
    /// Leased from CosId's Redis distributor (`cosid_redis`), shared with Java services.
    CosidRedis = 4,
}

impl DistributorKind {
    pub const fn name(self) -> &'static str {
        match self {
            DistributorKind::Manual => "manual",
            DistributorKind::StatefulSet => "stateful_set",
            DistributorKind::Lease => "lease",
            DistributorKind::CosidJdbc => "cosid_jdbc",
            DistributorKind::CosidRedis => "cosid_redis",
        }
    }

    /// Whether the machine id is leased from a store (and renewed by the lease worker).
    pub const fn is_leased(self) -> bool {
        matches!(
            self,
            DistributorKind::Lease | DistributorKind::CosidJdbc | DistributorKind::CosidRedis
        )
    }

    /// Whether the machine id is leased from one of CosId's own distributors, shared with Java
    /// services: each claim is a holder of its own there, so a server is never "stable".
    pub const fn is_cosids(self) -> bool {
        matches!(
            self,
            DistributorKind::CosidJdbc | DistributorKind::CosidRedis
        )
    }
}

/// Why a distributor has no machine id to give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoMachineId {
    /// `manual`, and `cosid.machine_id` is unset (-1).
    ManualUnset { max_machine_id: u32 },
    /// `manual`, and `cosid.machine_id` does not fit the machine bits.
    ManualOutOfRange {
        machine_id: i64,
        max_machine_id: u32,
    },
    /// `stateful_set`, and `HOSTNAME` is not set.
    HostnameUnset,
    /// `stateful_set`, and `HOSTNAME` does not end in `-<ordinal>`.
    HostnameWithoutOrdinal { hostname: String },
    /// `stateful_set`, and the ordinal does not fit the machine bits.
    OrdinalOutOfRange {
        hostname: String,
        ordinal: u64,
        max_machine_id: u32,
    },
}

impl NoMachineId {
    /// A full sentence saying what is wrong.
    pub fn detail(&self) -> String {
        match self {
            NoMachineId::ManualUnset { .. } => {
                "cosid.distributor is \"manual\" and cosid.machine_id is not set.".to_string()
            }
            NoMachineId::ManualOutOfRange {
                machine_id,
                max_machine_id,
            } => format!(
                "cosid.machine_id is {machine_id}, outside the range 0 .. {max_machine_id} that \
                 cosid.machine_bits allows."
            ),
            NoMachineId::HostnameUnset => {
                "cosid.distributor is \"stateful_set\" and the server's HOSTNAME environment \
                 variable is not set."
                    .to_string()
            }
            NoMachineId::HostnameWithoutOrdinal { hostname } => format!(
                "cosid.distributor is \"stateful_set\" and HOSTNAME \"{hostname}\" does not end \
                 in an ordinal such as \"-3\"."
            ),
            NoMachineId::OrdinalOutOfRange {
                hostname,
                ordinal,
                max_machine_id,
            } => format!(
                "HOSTNAME \"{hostname}\" gives ordinal {ordinal}, outside the range \
                 0 .. {max_machine_id} that cosid.machine_bits allows."
            ),
        }
    }

    /// A full sentence saying how to fix it.
    pub fn hint(&self) -> String {
        match self {
            NoMachineId::ManualUnset { max_machine_id }
            | NoMachineId::ManualOutOfRange { max_machine_id, .. } => format!(
                "Set cosid.machine_id to a value from 0 to {max_machine_id} that no other server \
                 of the namespace uses, and restart the server."
            ),
            NoMachineId::HostnameUnset | NoMachineId::HostnameWithoutOrdinal { .. } => {
                "Start the server with HOSTNAME set to a name ending in the pod's ordinal, such \
                 as \"pg-3\", or choose another cosid.distributor."
                    .to_string()
            }
            NoMachineId::OrdinalOutOfRange { .. } => {
                "Raise cosid.machine_bits, or run fewer replicas.".to_string()
            }
        }
    }
}

impl fmt::Display for NoMachineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail())
    }
}

/// The machine id a store-less distributor gives, within `0 ..= max_machine_id`; `None` for
/// `lease`, whose machine id comes from the store.
pub fn resolve(
    kind: DistributorKind,
    manual_machine_id: i64,
    hostname: Option<&str>,
    max_machine_id: u32,
) -> Option<Result<u32, NoMachineId>> {
    Some(match kind {
        DistributorKind::Lease | DistributorKind::CosidJdbc | DistributorKind::CosidRedis => {
            return None
        }
        DistributorKind::Manual => {
            if manual_machine_id < 0 {
                Err(NoMachineId::ManualUnset { max_machine_id })
            } else if manual_machine_id > i64::from(max_machine_id) {
                Err(NoMachineId::ManualOutOfRange {
                    machine_id: manual_machine_id,
                    max_machine_id,
                })
            } else {
                Ok(manual_machine_id as u32)
            }
        }
        DistributorKind::StatefulSet => stateful_set_ordinal(hostname, max_machine_id),
    })
}

fn stateful_set_ordinal(hostname: Option<&str>, max_machine_id: u32) -> Result<u32, NoMachineId> {
    let hostname = hostname.ok_or(NoMachineId::HostnameUnset)?;
    let ordinal =
        hostname_ordinal(hostname).ok_or_else(|| NoMachineId::HostnameWithoutOrdinal {
            hostname: hostname.to_string(),
        })?;
    if ordinal > u64::from(max_machine_id) {
        return Err(NoMachineId::OrdinalOutOfRange {
            hostname: hostname.to_string(),
            ordinal,
            max_machine_id,
        });
    }
    Ok(ordinal as u32)
}

/// The StatefulSet ordinal: the decimal digits after the last '-' (`order-db-12` gives 12).
/// A name that is all digits, or whose last part is not all digits, has none. An ordinal too large
/// for a `u64` is reported as `u64::MAX`, which no layout accepts.
pub fn hostname_ordinal(hostname: &str) -> Option<u64> {
    let hostname = hostname.trim();
    let (prefix, digits) = hostname.rsplit_once('-')?;
    if prefix.is_empty() || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(digits.parse().unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_come_from_the_last_dash() {
        assert_eq!(hostname_ordinal("pg-3"), Some(3));
        assert_eq!(hostname_ordinal("order-db-12"), Some(12));
        assert_eq!(hostname_ordinal("pg-0"), Some(0));
        assert_eq!(hostname_ordinal("pg-007"), Some(7));
        assert_eq!(hostname_ordinal("pg"), None);
        assert_eq!(hostname_ordinal("pg-"), None);
        assert_eq!(hostname_ordinal("-3"), None);
        assert_eq!(hostname_ordinal("pg-3a"), None);
        assert_eq!(hostname_ordinal("pg3"), None);
        assert_eq!(
            hostname_ordinal("pg-99999999999999999999999"),
            Some(u64::MAX)
        );
    }

    #[test]
    fn manual_checks_the_range() {
        assert_eq!(resolve(DistributorKind::Manual, 5, None, 1023), Some(Ok(5)));
        assert_eq!(
            resolve(DistributorKind::Manual, 1023, None, 1023),
            Some(Ok(1023))
        );
        assert_eq!(
            resolve(DistributorKind::Manual, -1, None, 1023),
            Some(Err(NoMachineId::ManualUnset {
                max_machine_id: 1023
            }))
        );
        assert_eq!(
            resolve(DistributorKind::Manual, 1024, None, 1023),
            Some(Err(NoMachineId::ManualOutOfRange {
                machine_id: 1024,
                max_machine_id: 1023
            }))
        );
    }

    #[test]
    fn lease_has_no_machine_id_without_its_store() {
        assert_eq!(resolve(DistributorKind::Lease, 5, Some("pg-3"), 7), None);
    }

    #[test]
    fn stateful_set_checks_the_hostname() {
        assert_eq!(
            resolve(DistributorKind::StatefulSet, -1, Some("pg-3"), 7),
            Some(Ok(3))
        );
        assert_eq!(
            resolve(DistributorKind::StatefulSet, -1, None, 7),
            Some(Err(NoMachineId::HostnameUnset))
        );
        assert!(matches!(
            resolve(DistributorKind::StatefulSet, -1, Some("pg-8"), 7),
            Some(Err(NoMachineId::OrdinalOutOfRange { ordinal: 8, .. }))
        ));
        let error = resolve(DistributorKind::StatefulSet, 4, Some("db"), 7)
            .unwrap()
            .unwrap_err();
        assert!(error.detail().contains("\"db\""), "{}", error.detail());
        assert!(error.hint().ends_with('.'));
    }
}

//! Whether a statement that dropped the extension must be refused, from what it would lose.
//!
//! The lease rows come first: losing one lets a machine id be claimed as never used, which can
//! issue ids again. Then the named generators' definitions. Then the records of the names and
//! namespaces generators had: without them, a name could be defined again in another namespace
//! or layout after the extension is installed again, and repeat the ids called under it. Then,
//! for `CASCADE` only, the columns whose default it would strip (without `CASCADE`, PostgreSQL
//! refuses on its own).

/// What a drop of the extension would lose, read before it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DropLoss {
    /// Rows of `cosid.machine_lease`.
    pub lease_rows: u64,
    /// Rows of `cosid.generator`.
    pub generators: u64,
    /// Rows of `cosid.generator_name` and `cosid.generator_namespace`.
    pub recorded_names: u64,
    /// Columns that still exist after the drop and took their default from the extension.
    pub stripped_defaults: u64,
}

/// Why the drop is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropRefusal {
    LeaseRows,
    Generators,
    RecordedNames,
    StrippedDefaults,
}

/// The refusal for a drop that removed the extension, or `None` when nothing is lost.
pub fn drop_refusal(loss: DropLoss, cascade: bool) -> Option<DropRefusal> {
    if loss.lease_rows > 0 {
        Some(DropRefusal::LeaseRows)
    } else if loss.generators > 0 {
        Some(DropRefusal::Generators)
    } else if loss.recorded_names > 0 {
        Some(DropRefusal::RecordedNames)
    } else if cascade && loss.stripped_defaults > 0 {
        Some(DropRefusal::StrippedDefaults)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_lost_is_never_refused() {
        assert_eq!(drop_refusal(DropLoss::default(), false), None);
        assert_eq!(drop_refusal(DropLoss::default(), true), None);
    }

    #[test]
    fn lease_rows_refuse_with_or_without_cascade_and_come_first() {
        let loss = DropLoss {
            lease_rows: 1,
            generators: 2,
            recorded_names: 4,
            stripped_defaults: 3,
        };
        assert_eq!(drop_refusal(loss, false), Some(DropRefusal::LeaseRows));
        assert_eq!(drop_refusal(loss, true), Some(DropRefusal::LeaseRows));
    }

    #[test]
    fn generators_refuse_before_defaults() {
        let loss = DropLoss {
            generators: 1,
            stripped_defaults: 1,
            ..DropLoss::default()
        };
        assert_eq!(drop_refusal(loss, true), Some(DropRefusal::Generators));
        assert_eq!(drop_refusal(loss, false), Some(DropRefusal::Generators));
    }

    #[test]
    fn generators_come_before_the_records_of_names_which_refuse_before_defaults() {
        let loss = DropLoss {
            generators: 1,
            recorded_names: 2,
            stripped_defaults: 1,
            ..DropLoss::default()
        };
        assert_eq!(drop_refusal(loss, false), Some(DropRefusal::Generators));
        let loss = DropLoss {
            generators: 0,
            ..loss
        };
        // With or without CASCADE: the records are lost either way.
        assert_eq!(drop_refusal(loss, true), Some(DropRefusal::RecordedNames));
        assert_eq!(drop_refusal(loss, false), Some(DropRefusal::RecordedNames));
    }

    #[test]
    fn stripped_defaults_refuse_only_a_cascade() {
        let loss = DropLoss {
            stripped_defaults: 1,
            ..DropLoss::default()
        };
        assert_eq!(
            drop_refusal(loss, true),
            Some(DropRefusal::StrippedDefaults)
        );
        // Without CASCADE the columns keep their defaults: PostgreSQL refuses the drop itself.
        assert_eq!(drop_refusal(loss, false), None);
    }
}

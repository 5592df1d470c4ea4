//! The local state file (`cosid.state` in the data directory): the floor a restarted server must
//! honour for the machine id it last used, when no lease watermark says more. Pure: the caller
//! reads and writes the file, and passes the clocks in.
//!
//! A record says: this server had issued ids up to `last_ms`, and expects to issue nothing
//! dated after `floor_ms` (the later of `last_ms` and the wall clock at the write, plus the write
//! interval) before the next record. It also says when it was written, on the wall clock and on
//! the boot-time clock, and in which boot.
//!
//! After a restart in the same boot, the boot-time clock measures how long ago the write was, and
//! every id issued since is dated no later than the wall clock at the write plus that time (plus
//! the drift a disciplined clock may gain), unless the clock was stepped forward meanwhile. That
//! holds however late the next write was, and an ordinary crash costs no wait: a clock that has
//! not been stepped back is already there. After a reboot, only the padded floor is known.

/// One line of the state file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateRecord {
    pub namespace: String,
    pub machine_id: u32,
    /// The later of the last timestamp issued and the wall clock at the write, plus the write
    /// interval.
    pub floor_ms: i64,
    pub written: Option<Written>,
}

/// When and from where a record was written; absent in files written by older versions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The last timestamp issued when the record was written.
    pub last_ms: i64,
    pub wall_ms: i64,
    pub boot_ms: u64,
    /// `/proc/sys/kernel/random/boot_id`: tells whether the boot-time clock is the same one.
    pub boot_id: String,
}

impl StateRecord {
    pub fn to_line(&self) -> String {
        match &self.written {
            Some(w) => format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                self.namespace,
                self.machine_id,
                self.floor_ms,
                w.last_ms,
                w.wall_ms,
                w.boot_ms,
                w.boot_id
            ),
            None => format!(
                "{}\t{}\t{}\n",
                self.namespace, self.machine_id, self.floor_ms
            ),
        }
    }

    /// `None` for anything that is not exactly one record: a torn or foreign file is no floor
    /// at all.
    pub fn parse(text: &str) -> Option<StateRecord> {
        let line = text.strip_suffix('\n')?;
        if line.contains(['\n', '\r']) {
            return None;
        }
        let mut fields = line.split('\t');
        let namespace = fields.next()?.to_string();
        let machine_id = fields.next()?.parse().ok()?;
        let floor_ms = fields.next()?.parse().ok()?;
        let rest: Vec<&str> = fields.collect();
        let written = match rest.as_slice() {
            [] => None,
            [last, wall, boot, boot_id] if !boot_id.is_empty() => Some(Written {
                last_ms: last.parse().ok()?,
                wall_ms: wall.parse().ok()?,
                boot_ms: boot.parse().ok()?,
                boot_id: boot_id.to_string(),
            }),
            _ => return None,
        };
        Some(StateRecord {
            namespace,
            machine_id,
            floor_ms,
            written,
        })
    }

    /// The floor to honour now for this record's machine id: nothing may be issued at or
    /// before it.
    ///
    /// In the boot that wrote the record: the wall clock at the write plus the time elapsed
    /// since on the boot-time clock, with 1 ms per second for drift and 2 ms for the truncation
    /// of the two readings, and never below what was issued before the write. Otherwise the
    /// padded floor is all there is.
    pub fn floor_now_ms(&self, now_boot_ms: u64, boot_id: &str) -> i64 {
        match &self.written {
            Some(w) if w.boot_id == boot_id && now_boot_ms >= w.boot_ms => {
                let elapsed = (now_boot_ms - w.boot_ms).min(i64::MAX as u64 / 2) as i64;
                let since_write = elapsed + elapsed / 1_000 + 2;
                w.last_ms.max(w.wall_ms.saturating_add(since_write))
            }
            _ => self.floor_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> StateRecord {
        StateRecord {
            namespace: "orders".to_string(),
            machine_id: 7,
            floor_ms: 10_000 + 1_000,
            written: Some(Written {
                last_ms: 10_000,
                wall_ms: 10_050,
                boot_ms: 500_000,
                boot_id: "b1".to_string(),
            }),
        }
    }

    #[test]
    fn lines_round_trip_and_old_lines_still_parse() {
        let r = record();
        assert_eq!(StateRecord::parse(&r.to_line()), Some(r));
        let old = StateRecord::parse("orders\t7\t11000\n").unwrap();
        assert_eq!((old.floor_ms, &old.written), (11_000, &None));
        assert_eq!(StateRecord::parse(&old.to_line()), Some(old));
        for torn in [
            "",
            "orders\n",
            "orders\t7\n",
            "orders\tx\t1\n",
            "orders\t7\t1\t2\n",
            "o\t7\t1\t2\t3\t4\t\n",
            "orders\t7\t11000",
            "orders\t7\t11000\r\n",
            "orders\t7\t11000\norders\t7\t11000\n",
        ] {
            assert_eq!(StateRecord::parse(torn), None, "{torn:?}");
        }
    }

    #[test]
    fn a_restart_in_the_same_boot_waits_only_for_a_clock_stepped_back() {
        let r = record();
        // 300 ms after the write: ids after it are dated at most 10_350 (+ 2 ms of truncation).
        assert_eq!(r.floor_now_ms(500_300, "b1"), 10_352);
        // Long after, even if the next writes never came: the elapsed time, not the pad, counts
        // (with 1 ms per second of drift).
        assert_eq!(r.floor_now_ms(600_000, "b1"), 10_050 + 100_000 + 100 + 2);
        // Never below what was already issued when it was written.
        let mut behind = record();
        behind.written.as_mut().unwrap().wall_ms = 9_000;
        assert_eq!(behind.floor_now_ms(500_100, "b1"), 10_000);
    }

    #[test]
    fn after_a_reboot_or_without_write_times_only_the_padded_floor_counts() {
        let r = record();
        assert_eq!(r.floor_now_ms(1_000, "b2"), 11_000);
        assert_eq!(
            r.floor_now_ms(400_000, "b1"),
            11_000,
            "boot clock behind the write"
        );
        let mut old = record();
        old.written = None;
        assert_eq!(old.floor_now_ms(500_300, "b1"), 11_000);
    }
}

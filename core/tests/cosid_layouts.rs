//! cosid's four layouts against CosId's own ids: tests/vectors/cosid-layouts.json was written by
//! CosId's classes (tests/vectors/generate.sh), and every id in it must read and write here as
//! CosId reads and writes it: its parts, its friendly form (plain and padded) and its Radix62
//! form.

use cosid_core::layout::{
    from_radix62, preset, to_radix62, IdParts, Layout, TimeUnit, COSID_EPOCH_MS, PRESETS,
};
use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
struct Vectors {
    layouts: BTreeMap<String, LayoutVectors>,
}

#[derive(Deserialize)]
struct LayoutVectors {
    time_unit: String,
    epoch_ms: i64,
    timestamp_bits: u32,
    machine_bits: u32,
    sequence_bits: u32,
    safe_javascript: bool,
    vectors: Vec<Vector>,
}

#[derive(Deserialize)]
struct Vector {
    note: String,
    id: i64,
    timestamp_ms: i64,
    machine_id: u32,
    sequence: u32,
    friendly: String,
    friendly_padded: String,
    radix62: String,
    radix62_unpadded: String,
}

fn vectors() -> Vectors {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/cosid-layouts.json"
    );
    let text = std::fs::read_to_string(path).expect("tests/vectors/cosid-layouts.json");
    serde_json::from_str(&text).expect("the vectors parse")
}

fn layout_of(name: &str) -> Layout {
    let (unit, timestamp_bits, machine_bits, sequence_bits) =
        preset(name).unwrap_or_else(|| panic!("no preset {name}"));
    Layout::new(
        COSID_EPOCH_MS,
        unit,
        timestamp_bits,
        machine_bits,
        sequence_bits,
    )
    .expect("a preset is a valid layout")
}

/// The presets are CosId's: the same names, bits, time unit and epoch as the generators that
/// wrote the vectors.
#[test]
fn presets_are_cosids_layouts() {
    let vectors = vectors();
    let names: Vec<&str> = PRESETS.iter().map(|preset| preset.0).collect();
    let in_file: Vec<&str> = vectors.layouts.keys().map(String::as_str).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, in_file);
    for (name, cosid) in &vectors.layouts {
        let layout = layout_of(name);
        assert_eq!(cosid.epoch_ms, COSID_EPOCH_MS, "{name}");
        assert_eq!(layout.time_unit().name(), cosid.time_unit, "{name}");
        assert_eq!(
            (
                layout.timestamp_bits(),
                layout.machine_bits(),
                layout.sequence_bits()
            ),
            (
                cosid.timestamp_bits,
                cosid.machine_bits,
                cosid.sequence_bits
            ),
            "{name}"
        );
        let bits = cosid.timestamp_bits + cosid.machine_bits + cosid.sequence_bits;
        assert_eq!(cosid.safe_javascript, bits <= 53, "{name}");
        assert_eq!(cosid.safe_javascript, name.starts_with("safe_js"), "{name}");
        assert!(cosid.vectors.len() >= 8, "{name}: {}", cosid.vectors.len());
    }
}

#[test]
fn every_vector_reads_and_writes_as_in_cosid() {
    let vectors = vectors();
    let mut checked = 0;
    for (name, cosid) in &vectors.layouts {
        let layout = layout_of(name);
        for vector in &cosid.vectors {
            let what = format!("{name}: {} ({})", vector.id, vector.note);
            let id = vector.id;
            // The parts.
            let parts = layout
                .decompose(id)
                .unwrap_or_else(|| panic!("{what}: no parts"));
            assert_eq!(
                layout.ticks_to_unix_ms(parts.ticks),
                vector.timestamp_ms,
                "{what}: timestamp"
            );
            assert_eq!(parts.machine_id, vector.machine_id, "{what}: machine id");
            assert_eq!(parts.sequence, vector.sequence, "{what}: sequence");
            // The same id from the parts.
            let ticks = layout
                .unix_ms_to_ticks(vector.timestamp_ms)
                .unwrap_or_else(|error| panic!("{what}: {error:?}"));
            assert_eq!(ticks, parts.ticks, "{what}: ticks");
            let again = layout.compose(IdParts {
                ticks,
                machine_id: vector.machine_id,
                sequence: vector.sequence,
            });
            assert_eq!(again, Ok(id), "{what}: compose");
            // The smallest id of its tick: machine 0, sequence 0.
            assert_eq!(
                layout.smallest_id_at(vector.timestamp_ms),
                Ok(id
                    - ((i64::from(vector.machine_id) << layout.sequence_bits())
                        | i64::from(vector.sequence))),
                "{what}: smallest id at its timestamp"
            );
            // The friendly forms.
            assert_eq!(
                layout.to_friendly(id).as_deref(),
                Some(vector.friendly.as_str()),
                "{what}: friendly"
            );
            assert_eq!(
                layout.from_friendly(&vector.friendly),
                Ok(id),
                "{what}: from friendly"
            );
            assert_eq!(
                layout.from_friendly(&vector.friendly_padded),
                Ok(id),
                "{what}: from padded friendly"
            );
            // Radix62.
            assert_eq!(
                to_radix62(id).as_deref(),
                Some(vector.radix62.as_str()),
                "{what}: radix62"
            );
            assert_eq!(
                from_radix62(&vector.radix62),
                Ok(id),
                "{what}: from radix62"
            );
            assert_eq!(
                from_radix62(&vector.radix62_unpadded),
                Ok(id),
                "{what}: from unpadded radix62"
            );
            // A JavaScript number holds every id of the 53-bit layouts exactly.
            if cosid.safe_javascript {
                assert!(id < 1 << 53, "{what}: not below 2^53");
                assert_eq!(id as f64 as i64, id, "{what}: not exact as a double");
            }
            checked += 1;
        }
    }
    assert!(checked >= 32, "{checked} vectors");
}

/// The largest id of each 53-bit layout is 2^53 - 1, JavaScript's `Number.MAX_SAFE_INTEGER`: a
/// double holds every integer up to it exactly.
#[test]
fn safe_js_layouts_end_at_javascripts_largest_safe_integer() {
    for name in ["safe_js", "safe_js_second"] {
        let layout = layout_of(name);
        let last = layout
            .compose(IdParts {
                ticks: layout.max_ticks(),
                machine_id: layout.max_machine_id(),
                sequence: layout.max_sequence(),
            })
            .unwrap();
        assert_eq!(last, (1 << 53) - 1, "{name}");
        assert_eq!(last as f64 as i64, last, "{name}");
        assert_eq!(layout.decompose(1 << 53), None, "{name}");
    }
    assert_eq!(layout_of("safe_js").time_unit(), TimeUnit::Millisecond);
    assert_eq!(layout_of("safe_js_second").time_unit(), TimeUnit::Second);
}

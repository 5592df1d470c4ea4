//! Where named generators live: the decisions the managing process takes each time it reads the
//! definitions, given what the slots of shared memory hold. The process carries them out in the
//! order given; this module only decides.
//!
//! The rules, which keep a backend from ever issuing an id under the wrong definition:
//! - a live slot whose definition is no longer among those read is dropped, and its machine id
//!   given back;
//! - a slot whose generator runs here but is no longer live (a backend dropped it at commit) is
//!   retired: its machine id is given back;
//! - a slot keeps its definition for the life of the shared memory: a dropped slot is only made
//!   live again with the very same definition (a backend may be between its check that the slot
//!   is live and its use of it);
//! - a definition whose name was retired in this round waits for the next one: it may have been
//!   read before the drop committed;
//! - a live slot with a definition read and nothing running it (the process started again) is
//!   taken over as it is.

/// A slot's phase, as shared memory keeps it (the discriminant is the stored word). `Free`
/// slots have no definition yet; a `Live` one generates; a `Dropped` one refuses, and keeps its
/// definition until shared memory is rebuilt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Phase {
    Free = 0,
    Live = 1,
    Dropped = 2,
}

/// What a definition must tell about itself.
pub trait Definition {
    fn name(&self) -> &str;
    /// Whether both would issue exactly the same ids: name, namespace and layout.
    fn same_as(&self, other: &Self) -> bool;
}

/// One slot as the round found it.
#[derive(Clone, Copy, Debug)]
pub struct SlotView<'d, D> {
    pub phase: Phase,
    /// `None` while the slot is free.
    pub definition: Option<&'d D>,
    /// Whether this process runs the slot's generator.
    pub running: bool,
}

/// One decision, on slots and definitions by their index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Make the live slot dropped: its definition is gone or changed.
    Drop(usize),
    /// Stop the slot's generator and give its machine id back.
    Retire(usize),
    /// Run the live slot's generator, as it is.
    TakeOver { slot: usize, definition: usize },
    /// Make the dropped slot live again: the same definition was created again.
    Revive { slot: usize, definition: usize },
    /// Give the free slot this definition and make it live.
    Publish { slot: usize, definition: usize },
    /// No slot for this definition.
    NoRoom(usize),
}

/// The decisions for one round.
pub fn plan<D: Definition>(slots: &[SlotView<'_, D>], definitions: &[D]) -> Vec<Step> {
    let mut steps = Vec::new();
    let defined = |slot: &SlotView<'_, D>| {
        slot.definition
            .is_some_and(|current| definitions.iter().any(|d| d.same_as(current)))
    };
    let mut dropped = vec![false; slots.len()];
    for (index, slot) in slots.iter().enumerate() {
        if slot.phase == Phase::Live && !defined(slot) {
            steps.push(Step::Drop(index));
            dropped[index] = true;
        }
    }
    let mut retired_names = Vec::new();
    for (index, slot) in slots.iter().enumerate() {
        let stopped = slot.phase != Phase::Live || dropped[index];
        if (slot.running && stopped) || (!slot.running && dropped[index]) {
            steps.push(Step::Retire(index));
            if let Some(definition) = slot.definition {
                retired_names.push(definition.name());
            }
        }
    }
    let mut taken = vec![false; slots.len()];
    for (index, definition) in definitions.iter().enumerate() {
        if retired_names.contains(&definition.name()) {
            continue;
        }
        let same = |slot: &SlotView<'_, D>| slot.definition.is_some_and(|d| d.same_as(definition));
        let live = slots
            .iter()
            .position(|slot| slot.phase == Phase::Live && same(slot));
        if let Some(slot) = live.filter(|&slot| !dropped[slot]) {
            taken[slot] = true;
            if !slots[slot].running {
                steps.push(Step::TakeOver {
                    slot,
                    definition: index,
                });
            }
            continue;
        }
        let revivable = slots
            .iter()
            .enumerate()
            .position(|(i, slot)| slot.phase == Phase::Dropped && same(slot) && !taken[i]);
        if let Some(slot) = revivable {
            taken[slot] = true;
            steps.push(Step::Revive {
                slot,
                definition: index,
            });
            continue;
        }
        let free = slots
            .iter()
            .enumerate()
            .position(|(i, slot)| slot.phase == Phase::Free && !taken[i]);
        match free {
            Some(slot) => {
                taken[slot] = true;
                steps.push(Step::Publish {
                    slot,
                    definition: index,
                });
            }
            None => steps.push(Step::NoRoom(index)),
        }
    }
    steps
}

/// The HINT when a new definition finds no room: `defined` definitions and `dropped` slots
/// take the `max_generators` places, and a dropped slot keeps its place until shared memory is
/// rebuilt (a restart), so a drop alone frees nothing. `most` is the highest `max_generators`.
pub fn no_room_hint(defined: usize, dropped: usize, max_generators: usize, most: usize) -> String {
    let mut hint = if defined < max_generators {
        match dropped {
            1 => "Restart the server: that frees the place the dropped generator keeps".to_string(),
            _ => format!(
                "Restart the server: that frees the places the {dropped} dropped generators keep"
            ),
        }
    } else {
        "Drop a generator with cosid_drop_generator() and restart the server: a dropped generator keeps its place until a restart"
            .to_string()
    };
    if max_generators < most {
        hint.push_str(&format!(
            ". Or raise cosid.max_generators (up to {most}) and restart the server"
        ));
    }
    hint.push('.');
    hint
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Def(&'static str, u32);

    impl Definition for Def {
        fn name(&self) -> &str {
            self.0
        }
        fn same_as(&self, other: &Self) -> bool {
            self == other
        }
    }

    #[test]
    fn the_no_room_hint_names_what_frees_a_place() {
        // 5 places, 3 defined and 2 dropped: the restart alone frees them.
        assert_eq!(
            no_room_hint(3, 2, 5, 31),
            "Restart the server: that frees the places the 2 dropped generators keep. Or \
             raise cosid.max_generators (up to 31) and restart the server."
        );
        assert!(no_room_hint(1, 1, 2, 31)
            .starts_with("Restart the server: that frees the place the dropped generator keeps."));
        // Every place defined: a drop, then a restart.
        let hint = no_room_hint(5, 3, 5, 31);
        assert!(hint.starts_with("Drop a generator with cosid_drop_generator() and restart"));
        assert!(hint.contains("keeps its place until a restart"));
        // Never told to raise a setting that is at its highest.
        assert_eq!(
            no_room_hint(31, 0, 31, 31),
            "Drop a generator with cosid_drop_generator() and restart the server: a dropped \
             generator keeps its place until a restart."
        );
    }

    fn free<'d>() -> SlotView<'d, Def> {
        SlotView {
            phase: Phase::Free,
            definition: None,
            running: false,
        }
    }

    fn slot(phase: Phase, definition: &Def, running: bool) -> SlotView<'_, Def> {
        SlotView {
            phase,
            definition: Some(definition),
            running,
        }
    }

    #[test]
    fn a_new_definition_takes_the_first_free_slot() {
        let a = Def("a", 1);
        let steps = plan(
            &[slot(Phase::Live, &a, true), free(), free()],
            &[Def("a", 1), Def("b", 1)],
        );
        assert_eq!(
            steps,
            vec![Step::Publish {
                slot: 1,
                definition: 1
            }]
        );
    }

    #[test]
    fn a_definition_gone_drops_and_retires_its_slot() {
        let a = Def("a", 1);
        let steps = plan(&[slot(Phase::Live, &a, true), free()], &[]);
        assert_eq!(steps, vec![Step::Drop(0), Step::Retire(0)]);
    }

    #[test]
    fn a_slot_dropped_by_a_backend_is_retired_and_not_revived_from_a_stale_read() {
        // The definitions were read before the drop committed: "a" is still among them.
        let a = Def("a", 1);
        let steps = plan(&[slot(Phase::Dropped, &a, true), free()], &[Def("a", 1)]);
        assert_eq!(steps, vec![Step::Retire(0)]);
        // The next round no longer runs it; if "a" was created again as it was, it comes back
        // into its own slot, never into a free one.
        let steps = plan(&[slot(Phase::Dropped, &a, false), free()], &[Def("a", 1)]);
        assert_eq!(
            steps,
            vec![Step::Revive {
                slot: 0,
                definition: 0
            }]
        );
    }

    #[test]
    fn a_changed_definition_waits_a_round_for_a_new_slot() {
        let a = Def("a", 1);
        let steps = plan(&[slot(Phase::Live, &a, true), free()], &[Def("a", 2)]);
        assert_eq!(steps, vec![Step::Drop(0), Step::Retire(0)]);
        let steps = plan(&[slot(Phase::Dropped, &a, false), free()], &[Def("a", 2)]);
        assert_eq!(
            steps,
            vec![Step::Publish {
                slot: 1,
                definition: 0
            }]
        );
    }

    #[test]
    fn a_dropped_slot_never_takes_another_definition() {
        let a = Def("a", 1);
        let steps = plan(
            &[slot(Phase::Dropped, &a, false)],
            &[Def("b", 1), Def("a", 2)],
        );
        assert_eq!(steps, vec![Step::NoRoom(0), Step::NoRoom(1)]);
    }

    #[test]
    fn a_restarted_process_takes_over_live_slots_and_gives_back_orphans() {
        let a = Def("a", 1);
        let b = Def("b", 1);
        let steps = plan(
            &[slot(Phase::Live, &a, false), slot(Phase::Live, &b, false)],
            &[Def("a", 1)],
        );
        assert_eq!(
            steps,
            vec![
                Step::Drop(1),
                Step::Retire(1),
                Step::TakeOver {
                    slot: 0,
                    definition: 0
                }
            ]
        );
    }

    #[test]
    fn nothing_to_do_when_everything_runs() {
        let a = Def("a", 1);
        let b = Def("b", 3);
        let slots = [
            slot(Phase::Live, &a, true),
            slot(Phase::Live, &b, true),
            free(),
        ];
        assert!(plan(&slots, &[Def("b", 3), Def("a", 1)]).is_empty());
    }

    #[test]
    fn the_last_free_slot_goes_to_the_first_definition() {
        let steps = plan(&[free()], &[Def("a", 1), Def("b", 1)]);
        assert_eq!(
            steps,
            vec![
                Step::Publish {
                    slot: 0,
                    definition: 0
                },
                Step::NoRoom(1)
            ]
        );
    }
}

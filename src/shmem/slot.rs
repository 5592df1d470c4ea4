//! A generator's slot in the segment: its [`Definition`], written once, and its state and status,
//! atomics that change while the server runs (see the protocol in the module above).

use crate::settings::{ServerSettings, MAX_GENERATOR_NAME_LEN, MAX_NAMESPACE_LEN};
use cosid_core::distributor::DistributorKind;
use cosid_core::generator::{default_sequence_reset_threshold, GeneratorConfig, GeneratorState};
use cosid_core::layout::Layout;
use cosid_core::lease::GeneratorStatus;
pub use cosid_core::registry::Phase;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, Ordering};

/// The default generator's name, for the functions that take one.
pub const DEFAULT_NAME: &str = "default";

/// What a generator is: written into a slot once, before the slot leaves [`Phase::Free`], and
/// never changed until the segment is rebuilt.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct Definition {
    pub config: GeneratorConfig,
    name_len: u8,
    name: [u8; MAX_GENERATOR_NAME_LEN],
    namespace_len: u8,
    namespace: [u8; MAX_NAMESPACE_LEN],
}

pub(super) fn copy_text<const N: usize>(text: &str, into: &mut [u8; N]) -> u8 {
    // Callers checked the lengths; a longer text is cut at a character boundary, never spilled.
    let mut len = text.len().min(N);
    while !text.is_char_boundary(len) {
        len -= 1;
    }
    into[..len].copy_from_slice(&text.as_bytes()[..len]);
    len as u8
}

impl Definition {
    fn new(name: &str, namespace: &str, config: GeneratorConfig) -> Definition {
        let mut definition = Definition {
            config,
            name_len: 0,
            name: [0; MAX_GENERATOR_NAME_LEN],
            namespace_len: 0,
            namespace: [0; MAX_NAMESPACE_LEN],
        };
        definition.name_len = copy_text(name, &mut definition.name);
        definition.namespace_len = copy_text(namespace, &mut definition.namespace);
        definition
    }

    /// The default generator: the one of the reserved name [`DEFAULT_NAME`], defined by the
    /// server's settings.
    pub fn default_generator(settings: &ServerSettings) -> Definition {
        Definition::new(DEFAULT_NAME, &settings.namespace, settings.config)
    }

    /// A named generator's definition on this server (its machine id comes as the default
    /// one's, from the server's distributor), with its own name, namespace, layout and sequence reset threshold (without one, CosId's for its
    /// layout: half its maximum sequence).
    pub fn named(
        name: &str,
        namespace: &str,
        layout: Layout,
        sequence_reset_threshold: Option<u32>,
    ) -> Definition {
        let config = GeneratorConfig {
            layout,
            sequence_reset_threshold: sequence_reset_threshold
                .unwrap_or_else(|| default_sequence_reset_threshold(&layout)),
        };
        Definition::new(name, namespace, config)
    }

    pub fn name_bytes(&self) -> &[u8] {
        &self.name[..usize::from(self.name_len)]
    }

    pub fn name(&self) -> &str {
        std::str::from_utf8(self.name_bytes()).unwrap_or("?")
    }

    pub fn namespace(&self) -> &str {
        std::str::from_utf8(&self.namespace[..usize::from(self.namespace_len)]).unwrap_or("?")
    }

    /// Whether `other` would generate exactly the same ids: a dropped slot is only reused by the
    /// same definition (see the protocol).
    pub fn same_as(&self, other: &Definition) -> bool {
        self.config == other.config
            && self.name_bytes() == other.name_bytes()
            && self.namespace() == other.namespace()
    }
}

impl cosid_core::registry::Definition for Definition {
    fn name(&self) -> &str {
        Definition::name(self)
    }
    fn same_as(&self, other: &Self) -> bool {
        Definition::same_as(self, other)
    }
}

#[repr(C)]
pub struct GeneratorSlot {
    pub state: GeneratorState,
    pub status: GeneratorStatus,
    phase: AtomicU32,
    definition: UnsafeCell<Definition>,
}

// SAFETY: the definition is written only while the slot is `Free`, by its one writer, and read
// only after a reader saw a phase other than `Free` (`Acquire`, paired with the writer's
// `Release`); everything else is atomic.
unsafe impl Sync for GeneratorSlot {}

impl GeneratorSlot {
    pub(super) fn unused(config: GeneratorConfig) -> GeneratorSlot {
        GeneratorSlot {
            state: GeneratorState::closed(),
            status: GeneratorStatus::new(),
            phase: AtomicU32::new(Phase::Free as u32),
            definition: UnsafeCell::new(Definition::new("", "", config)),
        }
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            1 => Phase::Live,
            2 => Phase::Dropped,
            _ => Phase::Free,
        }
    }

    #[inline]
    pub fn is_live(&self) -> bool {
        self.phase.load(Ordering::Acquire) == Phase::Live as u32
    }

    /// Whether this is the default generator's slot (slot 0, of the reserved name).
    pub fn is_default(&self) -> bool {
        self.definition().name_bytes() == DEFAULT_NAME.as_bytes()
    }

    /// The slot's definition. Only for a slot whose phase was seen not to be `Free`: every slot
    /// handed out by this module is one.
    #[inline]
    pub fn definition(&self) -> &Definition {
        // SAFETY: see `unsafe impl Sync`: the slot left `Free` before it was handed out, so its
        // definition is written and stays as it is.
        unsafe { &*self.definition.get() }
    }

    pub fn config(&self) -> &GeneratorConfig {
        &self.definition().config
    }

    pub fn name(&self) -> &str {
        self.definition().name()
    }

    pub fn namespace(&self) -> &str {
        self.definition().namespace()
    }

    /// Where the generator's machine id comes from: every generator of a server takes it as
    /// the server's settings say. A slot exists only on a server that preloads cosid, which
    /// kept its settings before making the segment.
    pub fn distributor(&self) -> DistributorKind {
        crate::settings::server().map_or(DistributorKind::Manual, |settings| settings.distributor)
    }

    /// Gives a `Free` slot its definition and makes it live, opening only after `floor_ms`
    /// (what its namespace issued before a crash-restart and the segment's making,
    /// `super::floor_ms_for`, and for a named generator what its namespace issued on this server,
    /// `cosid.names`). Only the postmaster (slot 0, before
    /// any backend exists) and the one process that manages named generators call this.
    pub fn publish(&self, definition: Definition, floor_ms: i64) {
        if self.phase() != Phase::Free {
            return;
        }
        let layout = definition.config.layout;
        if floor_ms >= layout.epoch_ms() {
            // Past the layout's last tick, nothing it issues could be above: it never opens.
            let floor = layout.unix_ms_to_ticks(floor_ms).unwrap_or(u64::MAX);
            self.state.set_history_floor(floor);
        }
        // SAFETY: the slot is `Free`, so no reader looks at its definition, and only its one
        // writer writes it; the `Release` store below publishes the write.
        unsafe { *self.definition.get() = definition };
        self.phase.store(Phase::Live as u32, Ordering::Release);
    }

    /// Makes a dropped slot live again, with the definition it had.
    pub fn revive(&self) {
        let _ = self.phase.compare_exchange(
            Phase::Dropped as u32,
            Phase::Live as u32,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Stops a live generator at once: backends refuse it from now on, and the managing process
    /// releases its machine id. True when this call dropped it.
    pub fn drop_generator(&self) -> bool {
        let dropped = self
            .phase
            .compare_exchange(
                Phase::Live as u32,
                Phase::Dropped as u32,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if dropped {
            self.state.close();
        }
        dropped
    }
}

//! Coverage-guided fuzz targets for every parser of rdma-pmd that reads wire or device input.
//!
//! Each target is a plain function over `&[u8]` here, so that the same body runs under
//! libFuzzer (`fuzz_targets/*.rs`, built with the `fuzz` feature and cargo-fuzz's
//! instrumentation, see `README.md`) and, uninstrumented on stable, in the replay test
//! (`tests/replay.rs`) that runs every file of `corpus/<target>/` and
//! `regressions/<target>/`: a crash found becomes a permanent test by adding its input to
//! `regressions/<target>/`.
//!
//! | target | input | driver code reached |
//! |---|---|---|
//! | [`cm`] | datagrams (GRH + MAD, any length), time, the application's calls | `rdma_pmd::cm`: `Cm::poll` and the MAD views |
//! | [`eth`] | Ethernet receive/send CQEs, frames, time | `EthRx`/`EthTx::on_cqe`, ARP (`ArpRepr::parse`, `Arp::on_frame`) |
//! | [`cqe`] | CQEs of every kind on an RC QP's CQs and the GSI QP's | `SendQueue::poll`, `poll_recv`, `GsiPort::recv_mad` under the CM |
//! | [`fw`] | firmware command answers and EQEs | `Hca::bring_up`, `poll_events`, `FwControl` outputs, teardown |
//!
//! Each input is a script ([`input::Script`]) of steps; every target's module documents its
//! opcodes and the invariants it checks beyond "no panic, no hang". [`seeds`] builds the
//! committed seed corpus from real messages (a REQ made by a CM, ARP frames made by the
//! driver's own emitter, CQEs made by the CQ writer of the driver's test fakes).

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

pub mod cm_target;
pub mod cqe_target;
pub mod dma;
pub mod eth_target;
pub mod fw_target;
pub mod input;

/// Milestones an input reached (an event delivered, bring-up done, a reply sent): how the
/// tests check that each seed exercises what it was written for.
pub type Trace = std::collections::BTreeSet<&'static str>;

/// The `cm` target ([`cm_target`]).
pub fn cm(data: &[u8]) {
    cm_target::run(data);
}

/// The `eth` target ([`eth_target`]).
pub fn eth(data: &[u8]) {
    eth_target::run(data);
}

/// The `cqe` target ([`cqe_target`]).
pub fn cqe(data: &[u8]) {
    cqe_target::run(data);
}

/// The `fw` target ([`fw_target`]).
pub fn fw(data: &[u8]) {
    fw_target::run(data);
}

/// A target's body, returning the milestones reached.
pub type Body = fn(&[u8]) -> Trace;

/// Every target: its name and body.
pub const TARGETS: &[(&str, Body)] = &[
    ("cm", cm_target::run),
    ("eth", eth_target::run),
    ("cqe", cqe_target::run),
    ("fw", fw_target::run),
];

/// The seed corpus of `target`: (file name, script).
pub fn seeds(target: &str) -> Vec<(&'static str, Vec<u8>)> {
    match target {
        "cm" => cm_target::seeds(),
        "eth" => eth_target::seeds(),
        "cqe" => cqe_target::seeds(),
        "fw" => fw_target::seeds(),
        _ => Vec::new(),
    }
}

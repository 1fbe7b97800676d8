//! Fault injection on a port: a seeded schedule that drops, duplicates, reorders and
//! corrupts the frames sent through it (smoltcp's `phy::FaultInjector` is the pattern).
//!
//! Each frame sent through a [`FaultPort`] gets independent rolls from a SplitMix64 stream
//! seeded by the caller, in this order: dropped (nothing else happens to it); corrupted (one
//! bit flipped where only the ICRC can notice: in a RoCE v2 frame, a byte after the BTH and
//! before the ICRC — an extension header, the payload or the pad — or the PSN's low byte when
//! nothing follows the BTH; in any other frame, a byte after the Ethernet header);
//! duplicated (sent twice); held back (released once 1..=`max_hold` more frames have been
//! sent into the port: those of them not held themselves overtake it). The same seed and the same frames give the same faults,
//! recorded in [`FaultPort::events`]. Faults apply to what is sent; received frames pass
//! untouched (wrap the other end to fault that direction).

use super::packet::RocePacket;
use super::port::{Port, PortError};
use super::rng::SplitMix;
use super::{bth, ethernet, udp};

/// How often each fault happens, in frames per million (0: never, 1_000_000: always).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Drop the frame.
    pub drop: u32,
    /// Flip one bit so the ICRC fails.
    pub corrupt: u32,
    /// Send the frame twice.
    pub duplicate: u32,
    /// Hold the frame back and release it later.
    pub reorder: u32,
    /// A held frame goes out once 1..=`max_hold` more frames were sent (at least 1).
    pub max_hold: u32,
}

impl FaultPlan {
    /// No faults.
    pub fn none() -> FaultPlan {
        FaultPlan::default()
    }

    /// Every fault at `per_million`, frames held back by up to 4.
    pub fn uniform(per_million: u32) -> FaultPlan {
        FaultPlan {
            drop: per_million,
            corrupt: per_million,
            duplicate: per_million,
            reorder: per_million,
            max_hold: 4,
        }
    }
}

/// What the schedule did, frame by frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Dropped.
    Dropped,
    /// One bit flipped at this frame offset.
    Corrupted {
        /// Byte offset in the frame.
        offset: usize,
    },
    /// Sent twice.
    Duplicated,
    /// Held back for this many later frames.
    Held {
        /// Frames that go out before it.
        frames: u32,
    },
}

/// One fault: the index of the frame (counting every frame sent into the port) and what
/// happened to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    /// Index of the frame.
    pub frame: u64,
    /// The fault.
    pub kind: FaultKind,
}

/// Counts of what a [`FaultPort`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Frames sent into the port.
    pub frames: u64,
    /// Frames dropped.
    pub dropped: u64,
    /// Frames corrupted.
    pub corrupted: u64,
    /// Frames sent twice.
    pub duplicated: u64,
    /// Frames held back.
    pub reordered: u64,
    /// Frames handed to the inner port (duplicates and released frames included).
    pub forwarded: u64,
}

struct Held {
    left: u32,
    frame: Vec<u8>,
}

/// A port wrapper applying a seeded [`FaultPlan`] to what is sent.
pub struct FaultPort<P: Port> {
    inner: P,
    plan: FaultPlan,
    rng: SplitMix,
    held: Vec<Held>,
    counts: FaultCounts,
    events: Vec<FaultEvent>,
}

impl<P: Port> FaultPort<P> {
    /// Wrap `inner` with `plan`, the schedule drawn from `seed`.
    pub fn new(inner: P, plan: FaultPlan, seed: u64) -> FaultPort<P> {
        FaultPort {
            inner,
            plan,
            rng: SplitMix::new(seed),
            held: Vec::new(),
            counts: FaultCounts::default(),
            events: Vec::new(),
        }
    }

    /// What was done so far.
    pub fn counts(&self) -> FaultCounts {
        self.counts
    }

    /// Every fault so far, in order.
    pub fn events(&self) -> &[FaultEvent] {
        &self.events
    }

    /// Change the plan (the random stream continues).
    pub fn set_plan(&mut self, plan: FaultPlan) {
        self.plan = plan;
    }

    /// Frames held back now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Send every held frame now, oldest first.
    pub fn flush(&mut self) -> Result<(), PortError> {
        for h in std::mem::take(&mut self.held) {
            self.forward(&h.frame)?;
        }
        Ok(())
    }

    /// The inner port.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The inner port, mutable.
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }

    fn forward(&mut self, frame: &[u8]) -> Result<(), PortError> {
        self.counts.forwarded += 1;
        self.inner.send(frame)
    }

    fn note(&mut self, frame: u64, kind: FaultKind) {
        self.events.push(FaultEvent { frame, kind });
    }

    /// Count down the held frames after one more frame went out; release those due.
    fn tick(&mut self) -> Result<(), PortError> {
        let mut due = Vec::new();
        self.held.retain_mut(|h| {
            h.left -= 1;
            if h.left == 0 {
                due.push(std::mem::take(&mut h.frame));
                false
            } else {
                true
            }
        });
        for f in due {
            self.forward(&f)?;
        }
        Ok(())
    }
}

/// The offset of a byte only the ICRC covers: after the BTH and before the ICRC in a RoCE
/// v2 frame (the PSN's low byte if nothing is there), else after the Ethernet header.
fn corrupt_offset(frame: &[u8], rng: &mut SplitMix) -> usize {
    if let Ok(p) = RocePacket::parse(frame) {
        let l5 = p.eth.header_len() + p.ip.header_len() + udp::HEADER_LEN;
        let after_bth = l5 + bth::LEN;
        let before_icrc = after_bth + p.ext.shape().len() + p.payload.len() + usize::from(p.pad);
        if before_icrc > after_bth {
            return after_bth + rng.below((before_icrc - after_bth) as u64) as usize;
        }
        return l5 + 11;
    }
    if frame.len() > ethernet::HEADER_LEN {
        let n = frame.len() - ethernet::HEADER_LEN;
        ethernet::HEADER_LEN + rng.below(n as u64) as usize
    } else {
        rng.below(frame.len() as u64) as usize
    }
}

impl<P: Port> Port for FaultPort<P> {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        let idx = self.counts.frames;
        self.counts.frames += 1;
        let plan = self.plan;
        if self.rng.chance(plan.drop) {
            self.counts.dropped += 1;
            self.note(idx, FaultKind::Dropped);
            return self.tick();
        }
        let mut f = frame.to_vec();
        if self.rng.chance(plan.corrupt) && !f.is_empty() {
            let offset = corrupt_offset(&f, &mut self.rng);
            f[offset] ^= 1 << self.rng.below(8);
            self.counts.corrupted += 1;
            self.note(idx, FaultKind::Corrupted { offset });
        }
        let dup = self.rng.chance(plan.duplicate);
        if self.rng.chance(plan.reorder) {
            let frames = 1 + self.rng.below(u64::from(plan.max_hold.max(1))) as u32;
            self.counts.reordered += 1;
            self.note(idx, FaultKind::Held { frames });
            if dup {
                // The copy goes now, the original later.
                self.counts.duplicated += 1;
                self.note(idx, FaultKind::Duplicated);
                self.forward(&f)?;
            }
            // Count down the frames already held before this one joins them.
            self.tick()?;
            self.held.push(Held { left: frames, frame: f });
            return Ok(());
        }
        self.forward(&f)?;
        if dup {
            self.counts.duplicated += 1;
            self.note(idx, FaultKind::Duplicated);
            self.forward(&f)?;
        }
        self.tick()
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        self.inner.recv()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::port::Hub;
    use crate::roce::tests::sample_frames;
    use crate::roce::Malformed;
    use rdma_pmd::Mac;

    const A: Mac = Mac([2, 0, 0, 0, 0, 1]);
    const B: Mac = Mac([2, 0, 0, 0, 0, 2]);

    /// Send `n` numbered frames from A to B through a fault port; what B receives.
    fn run(plan: FaultPlan, seed: u64, n: u8) -> (Vec<u8>, FaultCounts, Vec<FaultEvent>) {
        let hub = Hub::new();
        let mut a = FaultPort::new(hub.port(A), plan, seed);
        let mut b = hub.port(B);
        for i in 0..n {
            let mut f = vec![0u8; 60];
            f[..6].copy_from_slice(&B.0);
            f[6..12].copy_from_slice(&A.0);
            f[12..14].copy_from_slice(&[0x88, 0xb5]);
            f[14..].fill(i);
            a.send(&f).unwrap();
        }
        a.flush().unwrap();
        let mut got = Vec::new();
        while let Some(f) = b.recv().unwrap() {
            got.push(f[59]);
        }
        (got, a.counts(), a.events().to_vec())
    }

    #[test]
    fn no_plan_passes_everything_in_order() {
        let (got, c, ev) = run(FaultPlan::none(), 1, 50);
        assert_eq!(got, (0..50).collect::<Vec<_>>());
        assert_eq!((c.frames, c.forwarded), (50, 50));
        assert!(ev.is_empty());
    }

    #[test]
    fn same_seed_same_faults_other_seed_other_faults() {
        let plan = FaultPlan::uniform(200_000);
        let one = run(plan, 42, 200);
        assert_eq!(one, run(plan, 42, 200));
        assert_ne!(one.2, run(plan, 43, 200).2);
    }

    #[test]
    fn counts_add_up() {
        let (got, c, ev) = run(FaultPlan::uniform(150_000), 7, 255);
        assert!(c.dropped > 10 && c.corrupted > 10 && c.duplicated > 10 && c.reordered > 10);
        assert_eq!(c.frames, 255);
        assert_eq!(c.forwarded, c.frames - c.dropped + c.duplicated);
        assert_eq!(got.len() as u64, c.forwarded);
        let n = |k: fn(&FaultKind) -> bool| ev.iter().filter(|e| k(&e.kind)).count() as u64;
        assert_eq!(n(|k| matches!(k, FaultKind::Dropped)), c.dropped);
        assert_eq!(n(|k| matches!(k, FaultKind::Held { .. })), c.reordered);
        // Reordering shows: some frame arrives after a later one.
        assert!(got.windows(2).any(|w| w[0] > w[1]));
    }

    #[test]
    fn held_frames_are_overtaken_by_exactly_their_count() {
        let plan = FaultPlan { reorder: 1_000_000, max_hold: 1, ..FaultPlan::none() };
        // Every frame is held for one later frame: frame i goes out when i+1 arrives.
        let (got, c, _) = run(plan, 3, 5);
        assert_eq!(got, vec![0, 1, 2, 3, 4]);
        assert_eq!(c.reordered, 5);
        let plan = FaultPlan { reorder: 500_000, max_hold: 3, ..FaultPlan::none() };
        let (got, _, _) = run(plan, 11, 100);
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..100).collect::<Vec<_>>(), "nothing lost or added");
        assert_ne!(got, sorted);
    }

    #[test]
    fn corruption_fails_the_icrc_and_nothing_else() {
        let hub = Hub::with_limits(9000, 1 << 16);
        let plan = FaultPlan { corrupt: 1_000_000, ..FaultPlan::none() };
        let mut a = FaultPort::new(hub.port(A), plan, 99);
        let mut b = hub.port(B);
        let frames = sample_frames(B, A);
        for round in 0..8 {
            for f in &frames {
                a.send(f).unwrap();
            }
            for f in &frames {
                let got = b.recv().unwrap().unwrap();
                assert_ne!(&got, f);
                match RocePacket::parse(&got) {
                    Err(Malformed::Icrc { .. }) => {}
                    other => panic!("round {round}: {other:?} for a corrupted frame"),
                }
            }
        }
        assert_eq!(a.counts().corrupted, 8 * frames.len() as u64);
    }
}

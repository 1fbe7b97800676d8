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
//! recorded in [`FaultPort::events`].
//!
//! Received frames can be faulted too, so one port faults both directions of our side of a
//! wire whose other end cannot be wrapped (the kernel's RoCE stack on a real wire):
//! [`FaultPort::with_recv_plan`] (or [`FaultPort::recv_only`]) gives the frames taken from
//! the inner port the same rolls, from a second stream with its own seed, recorded apart
//! in [`FaultPort::recv_events`] and [`FaultPort::recv_counts`]. A held received frame is
//! handed over once 1..=`max_hold` more frames were received. A corrupted received frame
//! reaches the model, whose ICRC check drops it (its `icrc` frame-drop counter). The
//! constructors without a receive plan leave received frames untouched. Either direction
//! can leave frames that are not RoCE v2 (ARP) alone ([`Exempt::NonRoce`]).

use std::collections::VecDeque;

use super::packet::RocePacket;
use super::port::{Port, PortError};
use super::rng::SplitMix;
use super::{bth, ethernet, udp, Layer, Malformed};

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

/// One fault: the index of the frame (counting every frame of its direction the schedule
/// rolled for) and what happened to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    /// Index of the frame.
    pub frame: u64,
    /// The fault.
    pub kind: FaultKind,
}

/// Counts of what one direction of a [`FaultPort`] did.
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
    /// Frames passed on (to the inner port when sending, to the caller when receiving),
    /// duplicates and released frames included.
    pub forwarded: u64,
    /// Frames the direction's [`Exempt`] let through untouched (not in `frames`).
    pub exempt: u64,
}

struct Held {
    left: u32,
    frame: Vec<u8>,
}

/// The frames of a [`FaultPort`] that a direction's faults leave alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Exempt {
    /// None: every frame is rolled for.
    #[default]
    Nothing,
    /// Frames that are not RoCE v2 (ARP and other EtherTypes, other IP protocols, other UDP
    /// ports) pass untouched, draw nothing from the stream and are counted only in
    /// [`FaultCounts::exempt`]: the schedule over the RoCE frames does not depend on when
    /// ARP happened to run.
    NonRoce,
}

/// One direction's schedule: its plan, its stream, its held frames, its record.
struct Schedule {
    plan: FaultPlan,
    rng: SplitMix,
    exempt: Exempt,
    held: Vec<Held>,
    counts: FaultCounts,
    events: Vec<FaultEvent>,
}

impl Schedule {
    fn new(plan: FaultPlan, seed: u64) -> Schedule {
        Schedule {
            plan,
            rng: SplitMix::new(seed),
            exempt: Exempt::Nothing,
            held: Vec::new(),
            counts: FaultCounts::default(),
            events: Vec::new(),
        }
    }

    fn note(&mut self, frame: u64, kind: FaultKind) {
        self.events.push(FaultEvent { frame, kind });
    }

    /// Put `frame` through the schedule; `out` takes what goes on.
    fn apply<E>(
        &mut self,
        frame: &[u8],
        out: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.exempt == Exempt::NonRoce && !is_roce(frame) {
            self.counts.exempt += 1;
            return out(frame);
        }
        let idx = self.counts.frames;
        self.counts.frames += 1;
        let plan = self.plan;
        if self.rng.chance(plan.drop) {
            self.counts.dropped += 1;
            self.note(idx, FaultKind::Dropped);
            return self.tick(out);
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
                self.forward(&f, out)?;
            }
            // Count down the frames already held before this one joins them.
            self.tick(out)?;
            self.held.push(Held { left: frames, frame: f });
            return Ok(());
        }
        self.forward(&f, out)?;
        if dup {
            self.counts.duplicated += 1;
            self.note(idx, FaultKind::Duplicated);
            self.forward(&f, out)?;
        }
        self.tick(out)
    }

    fn forward<E>(
        &mut self,
        frame: &[u8],
        out: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.counts.forwarded += 1;
        out(frame)
    }

    /// Count down the held frames after one more frame came through; release those due.
    fn tick<E>(&mut self, out: &mut impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
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
            self.forward(&f, out)?;
        }
        Ok(())
    }

    /// Release every held frame now, oldest first.
    fn flush<E>(&mut self, out: &mut impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        for h in std::mem::take(&mut self.held) {
            self.forward(&h.frame, out)?;
        }
        Ok(())
    }
}

/// A port wrapper applying a seeded [`FaultPlan`] to what is sent and, optionally, another
/// to what is received.
pub struct FaultPort<P: Port> {
    inner: P,
    send: Schedule,
    recv: Schedule,
    /// Received frames through the receive schedule, waiting to be handed over.
    ready: VecDeque<Vec<u8>>,
}

impl<P: Port> FaultPort<P> {
    /// Wrap `inner` with `plan` for what is sent, the schedule drawn from `seed`; what is
    /// received passes untouched (see [`FaultPort::with_recv_plan`]).
    pub fn new(inner: P, plan: FaultPlan, seed: u64) -> FaultPort<P> {
        FaultPort {
            inner,
            send: Schedule::new(plan, seed),
            recv: Schedule::new(FaultPlan::none(), 0),
            ready: VecDeque::new(),
        }
    }

    /// Wrap `inner` with faults on received frames only: `plan` drawn from `seed`, what is
    /// sent passes untouched. The same as `FaultPort::new(inner, FaultPlan::none(), 0)`
    /// `.with_recv_plan(plan, seed)`.
    pub fn recv_only(inner: P, plan: FaultPlan, seed: u64) -> FaultPort<P> {
        FaultPort::new(inner, FaultPlan::none(), 0).with_recv_plan(plan, seed)
    }

    /// Fault the frames received through the port too: `plan`, drawn from its own stream
    /// seeded by `seed` (independent of the send stream), recorded apart
    /// ([`FaultPort::recv_counts`], [`FaultPort::recv_events`]). Each frame taken from the
    /// inner port gets the same rolls, in the same order, as a sent frame; a held frame is
    /// handed over once 1..=`max_hold` more frames were taken from the inner port.
    pub fn with_recv_plan(mut self, plan: FaultPlan, seed: u64) -> FaultPort<P> {
        let exempt = self.recv.exempt;
        self.recv = Schedule::new(plan, seed);
        self.recv.exempt = exempt;
        self
    }

    /// Leave the frames `exempt` names alone in the send direction.
    pub fn exempt_sent(mut self, exempt: Exempt) -> FaultPort<P> {
        self.send.exempt = exempt;
        self
    }

    /// Leave the frames `exempt` names alone in the receive direction.
    pub fn exempt_received(mut self, exempt: Exempt) -> FaultPort<P> {
        self.recv.exempt = exempt;
        self
    }

    /// What was done to sent frames so far.
    pub fn counts(&self) -> FaultCounts {
        self.send.counts
    }

    /// Every fault on a sent frame so far, in order (frame indices count sent frames).
    pub fn events(&self) -> &[FaultEvent] {
        &self.send.events
    }

    /// What was done to received frames so far (`frames`: taken from the inner port;
    /// `forwarded`: handed to the caller of `recv`, or ready to be).
    pub fn recv_counts(&self) -> FaultCounts {
        self.recv.counts
    }

    /// Every fault on a received frame so far, in order (frame indices count frames taken
    /// from the inner port).
    pub fn recv_events(&self) -> &[FaultEvent] {
        &self.recv.events
    }

    /// Change the send plan (the random stream continues).
    pub fn set_plan(&mut self, plan: FaultPlan) {
        self.send.plan = plan;
    }

    /// Change the receive plan (its random stream continues).
    pub fn set_recv_plan(&mut self, plan: FaultPlan) {
        self.recv.plan = plan;
    }

    /// Sent frames held back now.
    pub fn held(&self) -> usize {
        self.send.held.len()
    }

    /// Received frames held back now.
    pub fn recv_held(&self) -> usize {
        self.recv.held.len()
    }

    /// Send every held frame now, oldest first.
    pub fn flush(&mut self) -> Result<(), PortError> {
        let inner = &mut self.inner;
        self.send.flush(&mut |f: &[u8]| inner.send(f))
    }

    /// Release every held received frame now, oldest first (after those already due).
    pub fn flush_recv(&mut self) {
        let ready = &mut self.ready;
        let _ = self.recv.flush(&mut |f: &[u8]| {
            ready.push_back(f.to_vec());
            Ok::<(), ()>(())
        });
    }

    /// The inner port.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The inner port, mutable.
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }
}

/// Whether `frame` is RoCE v2 (well formed or not past the UDP port): not ARP, another
/// EtherType, another IP protocol or another UDP port.
fn is_roce(frame: &[u8]) -> bool {
    !matches!(
        RocePacket::parse(frame),
        Err(Malformed::EtherType(_)
            | Malformed::IpProtocol(_)
            | Malformed::UdpPort(_)
            | Malformed::ArpFormat
            | Malformed::Truncated(Layer::Ethernet))
    )
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
        let inner = &mut self.inner;
        self.send.apply(frame, &mut |f: &[u8]| inner.send(f))
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        loop {
            if let Some(f) = self.ready.pop_front() {
                return Ok(Some(f));
            }
            let Some(f) = self.inner.recv()? else { return Ok(None) };
            let ready = &mut self.ready;
            let _ = self.recv.apply(&f, &mut |g: &[u8]| {
                ready.push_back(g.to_vec());
                Ok::<(), ()>(())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roce::port::{Hub, HubPort};
    use crate::roce::tests::sample_frames;
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

    /// Send `n` numbered frames from B to A (plain), receive them through a fault port on A
    /// whose receive plan is `plan`; what A's caller gets.
    fn run_recv(plan: FaultPlan, seed: u64, n: u8) -> (Vec<u8>, FaultPort<HubPort>) {
        let hub = Hub::new();
        let mut a = FaultPort::recv_only(hub.port(A), plan, seed);
        let mut b = hub.port(B);
        let mut got = Vec::new();
        for i in 0..n {
            b.send(&numbered(A, B, i)).unwrap();
            // Interleave: the port sees the frames as they come, as a model polling it.
            while let Some(f) = a.recv().unwrap() {
                got.push(f[59]);
            }
        }
        a.flush_recv();
        while let Some(f) = a.recv().unwrap() {
            got.push(f[59]);
        }
        (got, a)
    }

    fn numbered(to: Mac, from: Mac, i: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&to.0);
        f[6..12].copy_from_slice(&from.0);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f[14..].fill(i);
        f
    }

    #[test]
    fn received_frames_get_their_own_faults_counted_apart_from_the_sent_ones() {
        let (got, a) = run_recv(FaultPlan::uniform(150_000), 7, 255);
        let c = a.recv_counts();
        assert!(c.dropped > 10 && c.corrupted > 10 && c.duplicated > 10 && c.reordered > 10);
        assert_eq!(c.frames, 255);
        assert_eq!(c.forwarded, c.frames - c.dropped + c.duplicated);
        assert_eq!(got.len() as u64, c.forwarded);
        assert!(got.windows(2).any(|w| w[0] > w[1]), "reordering shows");
        let n = |k: fn(&FaultKind) -> bool| {
            a.recv_events().iter().filter(|e| k(&e.kind)).count() as u64
        };
        assert_eq!(n(|k| matches!(k, FaultKind::Dropped)), c.dropped);
        assert_eq!(n(|k| matches!(k, FaultKind::Held { .. })), c.reordered);
        assert_eq!(a.counts(), FaultCounts::default(), "nothing was sent");
        assert!(a.events().is_empty());
        // The receive stream is the send stream's schedule for the same seed and frames.
        let (_, sent_c, sent_ev) = run(FaultPlan::uniform(150_000), 7, 255);
        assert_eq!((a.recv_events(), c), (&sent_ev[..], sent_c));
    }

    #[test]
    fn same_receive_seed_same_faults_and_the_send_direction_is_independent() {
        let plan = FaultPlan::uniform(200_000);
        let (g1, a1) = run_recv(plan, 42, 200);
        let (g2, a2) = run_recv(plan, 42, 200);
        assert_eq!((g1, a1.recv_events()), (g2, a2.recv_events()));
        let (_, a3) = run_recv(plan, 43, 200);
        assert_ne!(a1.recv_events(), a3.recv_events());
        // Both directions on one port: each follows its own stream.
        let hub = Hub::new();
        let mut a = FaultPort::new(hub.port(A), plan, 5).with_recv_plan(plan, 42);
        let mut b = hub.port(B);
        for i in 0..200 {
            a.send(&numbered(B, A, i)).unwrap();
            b.send(&numbered(A, B, i)).unwrap();
            while a.recv().unwrap().is_some() {}
        }
        assert_eq!(a.recv_events(), a1.recv_events());
        assert_eq!(a.events(), run(plan, 5, 200).2);
    }

    #[test]
    fn non_roce_frames_are_exempt_when_asked_and_draw_nothing() {
        let hub = Hub::with_limits(9000, 1 << 16);
        let all = FaultPlan { drop: 1_000_000, ..FaultPlan::none() };
        let mut a = FaultPort::recv_only(hub.port(A), all, 1).exempt_received(Exempt::NonRoce);
        let mut b = hub.port(B);
        let arp = numbered(A, B, 9);
        let mut arp = arp;
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        b.send(&arp).unwrap();
        for f in sample_frames(A, B) {
            b.send(&f).unwrap();
        }
        assert_eq!(a.recv().unwrap(), Some(arp.clone()), "ARP passes");
        assert_eq!(a.recv().unwrap(), None, "every RoCE frame is dropped");
        let c = a.recv_counts();
        assert_eq!(
            (c.exempt, c.frames, c.dropped),
            (1, sample_frames(A, B).len() as u64, c.frames)
        );
        // Without the exemption ARP is dropped as well; the send side mirrors it.
        let mut s = FaultPort::new(hub.port(A), all, 1).exempt_sent(Exempt::NonRoce);
        let mut arp_out = arp.clone();
        arp_out[..6].copy_from_slice(&B.0);
        s.send(&arp_out).unwrap();
        assert_eq!(b.recv().unwrap(), Some(arp_out), "ARP is sent");
        assert_eq!((s.counts().exempt, s.counts().frames), (1, 0));
    }

    #[test]
    fn received_corruption_fails_the_icrc() {
        let hub = Hub::with_limits(9000, 1 << 16);
        let plan = FaultPlan { corrupt: 1_000_000, ..FaultPlan::none() };
        let mut a = FaultPort::recv_only(hub.port(A), plan, 99);
        let mut b = hub.port(B);
        let frames = sample_frames(A, B);
        for f in &frames {
            b.send(f).unwrap();
            let got = a.recv().unwrap().unwrap();
            assert!(matches!(RocePacket::parse(&got), Err(Malformed::Icrc { .. })));
        }
        assert_eq!(a.recv_counts().corrupted, frames.len() as u64);
    }
}

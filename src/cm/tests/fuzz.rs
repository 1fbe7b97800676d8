//! Hostile input: random bytes, mutated valid MADs and valid MADs in the wrong order thrown at
//! two CMs with live connections. Nothing may panic, malformed input is counted, and the
//! connections no input names (the bystanders) stay established with their QPs untouched.
//!
//! `CM_FUZZ_CASES` sets the number of cases (default 1000); the MADs tried are printed.

extern crate std;

use std::cell::RefCell;
use std::println;
use std::rc::Rc;
use std::vec::Vec;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::fake::*;
use crate::cm::mad::*;
use crate::cm::*;
use crate::{Gid, Mac};

type TCm = Cm<Port, 8, 4>;

const PORT: u16 = 7174;

fn params() -> ConnectParams<'static> {
    ConnectParams {
        local: ([10, 0, 0, 1], 40000).into(),
        remote: ([10, 0, 0, 2], PORT).into(),
        local_gid: Gid::from_ipv4([10, 0, 0, 1]),
        remote_gid: Gid::from_ipv4([10, 0, 0, 2]),
        remote_mac: Mac([2, 0, 0, 0, 0, 2]),
        private_data: b"fuzz",
        qp: QpParams::default(),
    }
}

struct World {
    net: Shared,
    a: TCm,
    b: TCm,
    qa: Vec<FakeQp>,
    qb: Vec<FakeQp>,
    /// (A's id, B's id, index into qa/qb) of connections no input names.
    bystanders: Vec<(ConnId, ConnId, usize)>,
    /// Every MAD the target connections exchanged.
    corpus: Vec<[u8; MAD_LEN]>,
    /// Their communication IDs.
    ids: Vec<u32>,
    now: Micros,
}

fn pump(w: &mut World) -> Vec<Event> {
    let mut ev = Vec::new();
    for _ in 0..8 {
        ev.extend(w.a.poll(w.now, &mut w.qa[..]));
        ev.extend(w.b.poll(w.now, &mut w.qb[..]));
    }
    ev
}

/// Establish one connection between fresh QPs; its ids.
fn establish(w: &mut World, qpn: u32) -> (ConnId, ConnId, usize) {
    let i = w.qa.len();
    w.qa.push(FakeQp::new(qpn));
    w.qb.push(FakeQp::new(qpn + 0x1000));
    let ida = w.a.connect(&mut w.qa[i], &params(), w.now).unwrap();
    let ev = pump(w);
    let idb = ev.iter().find(|e| e.kind == EventKind::ConnectRequest).unwrap().id;
    w.b.accept(idb, &mut w.qb[i], &AcceptParams::default(), w.now).unwrap();
    pump(w);
    assert_eq!(w.a.state(ida), Some(ConnState::Established));
    assert_eq!(w.b.state(idb), Some(ConnState::Established));
    (ida, idb, i)
}

fn world() -> World {
    let net: Shared = Rc::new(RefCell::new(Net::default()));
    let a = Cm::new(host(&net, 1), CmConfig::new(0xa1, 5)).unwrap();
    let mut b = Cm::new(host(&net, 2), CmConfig::new(0xb2, 6)).unwrap();
    b.listen(PORT).unwrap();
    let mut w = World {
        net,
        a,
        b,
        qa: Vec::new(),
        qb: Vec::new(),
        bystanders: Vec::new(),
        corpus: Vec::new(),
        ids: Vec::new(),
        now: Micros(0),
    };
    for k in 0..2 {
        let by = establish(&mut w, 0xabcd00 + k);
        w.bystanders.push(by);
    }
    w.net.borrow_mut().log.clear();
    // Targets: one established, one disconnected (timewait), one requested and unanswered.
    let (ida, _, i) = establish(&mut w, 0x200);
    establish(&mut w, 0x201);
    let (a, q) = (&mut w.a, &mut w.qa[i]);
    a.disconnect(ida, q, w.now).unwrap();
    pump(&mut w);
    w.qa.push(FakeQp::new(0x300));
    let last = w.qa.len() - 1;
    w.a.connect(&mut w.qa[last], &params(), w.now).unwrap();
    pump(&mut w);
    w.corpus = w.net.borrow().log.iter().map(|d| d.mad).collect();
    for m in &w.corpus {
        let r = Rtu::new_checked(&m[..]).unwrap();
        w.ids.push(r.local_comm_id());
        w.ids.push(r.remote_comm_id());
    }
    w
}

#[derive(Clone, Debug)]
enum Input {
    /// Any bytes, any length, as the receive hands them over.
    Random(Vec<u8>),
    /// A MAD the targets exchanged, with bytes overwritten.
    Mutated { idx: usize, edits: Vec<(usize, u8)>, to_a: bool },
    /// A MAD the targets exchanged, again, to either side.
    Replay { idx: usize, to_a: bool },
    /// A well-formed MAD of any attribute with communication IDs drawn from the targets'.
    Crafted { attr: u16, local: usize, remote: usize, fill: u8, to_a: bool },
    /// Time passes.
    Tick(u32),
    /// A port's send queue takes only this many more MADs (`None`: any number).
    Room { a: bool, room: Option<u8> },
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..320).prop_map(Input::Random),
        (
            any::<usize>(),
            proptest::collection::vec((0usize..MAD_LEN, any::<u8>()), 1..8),
            any::<bool>()
        )
            .prop_map(|(idx, edits, to_a)| Input::Mutated { idx, edits, to_a }),
        (any::<usize>(), any::<bool>()).prop_map(|(idx, to_a)| Input::Replay { idx, to_a }),
        (0x0fu16..0x1c, any::<usize>(), any::<usize>(), any::<u8>(), any::<bool>()).prop_map(
            |(attr, local, remote, fill, to_a)| Input::Crafted { attr, local, remote, fill, to_a }
        ),
        (0u32..100_000).prop_map(Input::Tick),
        (any::<bool>(), proptest::option::of(0u8..4)).prop_map(|(a, room)| Input::Room { a, room }),
    ]
}

/// Would the CM call this malformed before looking at any connection?
fn malformed(raw: &[u8]) -> bool {
    if raw.len() != GRH_LEN + MAD_LEN {
        return true;
    }
    let grh_ok = grh_source(&raw[..GRH_LEN]).is_ok();
    !grh_ok || MadHdr::new_checked(&raw[GRH_LEN..]).unwrap().check_cm().is_err()
}

fn raw(from: u8, to: u8, mad: &[u8; MAD_LEN]) -> Vec<u8> {
    let mut v = grh(Gid::from_ipv4([10, 0, 0, from]), Gid::from_ipv4([10, 0, 0, to])).to_vec();
    v.extend_from_slice(mad);
    v
}

fn run_case(inputs: &[Input]) -> [u64; 4] {
    let mut w = world();
    let before_a = w.a.stats();
    let before_b = w.b.stats();
    let steps: Vec<(usize, usize)> =
        w.bystanders.iter().map(|&(_, _, i)| (w.qa[i].steps.len(), w.qb[i].steps.len())).collect();
    let mut expect_malformed = [0u64; 2];
    let mut injected = [0u64; 2];
    for inp in inputs {
        let (bytes, to_a) = match inp {
            Input::Random(b) => (b.clone(), b.first().is_some_and(|x| x & 1 == 1)),
            Input::Mutated { idx, edits, to_a } => {
                let mut m = w.corpus[idx % w.corpus.len()];
                for &(p, v) in edits {
                    m[p] = v;
                }
                (raw(if *to_a { 2 } else { 1 }, if *to_a { 1 } else { 2 }, &m), *to_a)
            }
            Input::Replay { idx, to_a } => {
                let m = w.corpus[idx % w.corpus.len()];
                (raw(if *to_a { 2 } else { 1 }, if *to_a { 1 } else { 2 }, &m), *to_a)
            }
            Input::Crafted { attr, local, remote, fill, to_a } => {
                let mut m = [*fill; MAD_LEN];
                let ids = &w.ids;
                let mut r = Rtu::new_checked(&mut m[..]).unwrap();
                r.hdr_mut().emit_cm(AttrId::from(*attr), u64::from(*fill) << 8);
                r.set_local_comm_id(ids[local % ids.len()]);
                r.set_remote_comm_id(if remote % 5 == 0 { 0 } else { ids[remote % ids.len()] });
                (raw(if *to_a { 2 } else { 1 }, if *to_a { 1 } else { 2 }, &m), *to_a)
            }
            Input::Tick(ms) => {
                w.now = w.now.plus_ms(u64::from(*ms));
                pump(&mut w);
                continue;
            }
            Input::Room { a, room } => {
                w.net.borrow_mut().room[if *a { 0 } else { 1 }] = room.map(usize::from);
                continue;
            }
        };
        let side = to_a as usize;
        expect_malformed[side] += malformed(&bytes) as u64;
        injected[side] += 1;
        w.net.borrow_mut().raw[if to_a { 0 } else { 1 }].push_back(bytes);
        pump(&mut w);
    }
    w.net.borrow_mut().room = std::vec![None, None];
    pump(&mut w);
    let (sa, sb) = (w.a.stats(), w.b.stats());
    // A full queue is never a send error.
    assert_eq!((sa.send_errors, sb.send_errors), (0, 0));
    // Every injected datagram was taken and judged; the malformed ones were counted as such.
    assert!(sa.received - before_a.received >= injected[1], "{sa:?}");
    assert!(sb.received - before_b.received >= injected[0], "{sb:?}");
    assert!(
        sa.malformed - before_a.malformed >= expect_malformed[1],
        "{sa:?} {expect_malformed:?}"
    );
    assert!(
        sb.malformed - before_b.malformed >= expect_malformed[0],
        "{sb:?} {expect_malformed:?}"
    );
    for (k, &(ida, idb, i)) in w.bystanders.iter().enumerate() {
        assert_eq!(w.a.state(ida), Some(ConnState::Established), "bystander {k} at A");
        assert_eq!(w.b.state(idb), Some(ConnState::Established), "bystander {k} at B");
        assert_eq!(
            (w.qa[i].steps.len(), w.qb[i].steps.len()),
            steps[k],
            "bystander {k}'s QPs untouched"
        );
    }
    let judged = |s: CmStats, b: CmStats| {
        [s.malformed - b.malformed, s.unexpected - b.unexpected, s.duplicates - b.duplicates]
    };
    let (ja, jb) = (judged(sa, before_a), judged(sb, before_b));
    [injected[0] + injected[1], ja[0] + jb[0], ja[1] + jb[1], ja[2] + jb[2]]
}

/// Not under Miri: the CM is safe code (the core denies `unsafe`), so Miri has no undefined
/// behaviour to find in it, and one case takes it minutes.
#[test]
#[cfg_attr(miri, ignore)]
fn random_mutated_and_reordered_mads_never_panic_and_leave_bystanders_alone() {
    let cases = std::env::var("CM_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let mut runner =
        TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let tried = Rc::new(RefCell::new([0u64; 4]));
    let t = tried.clone();
    runner
        .run(&proptest::collection::vec(input(), 1..96), move |inputs| {
            let n = run_case(&inputs);
            let mut t = t.borrow_mut();
            for (a, b) in t.iter_mut().zip(n) {
                *a += b;
            }
            Ok(())
        })
        .unwrap();
    let [n, malformed, unexpected, duplicates] = *tried.borrow();
    println!(
        "cm fuzz: {cases} cases, {n} MADs tried: {malformed} malformed, {unexpected} unexpected, {duplicates} duplicates"
    );
}

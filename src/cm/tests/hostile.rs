//! A hostile peer against the CM: handles cycled until they would wrap, REQs that cannot be
//! told apart, extreme timer fields, spoofed sources, floods of every message, a full table,
//! a full send queue and an event ring nobody drains. Each case is bounded: time by the fake
//! clock (a slot is freed by a bound computed from [`CmConfig`]'s defaults), memory by the
//! fixed tables; every outcome is counted in [`CmStats`], and `live()` returns to 0.
//!
//! The rig is `machine.rs`'s (two CMs on the fake network of `fake.rs`).

extern crate std;

use std::cell::RefCell;
use std::rc::Rc;
use std::vec::Vec;

use super::fake::*;
use super::machine::{attrs, connected, pair, params, settle, PORT};
use crate::cm::mad::*;
use crate::cm::timing::convert_to_ms;
use crate::cm::*;
use crate::Gid;

const A: Gid = Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]);
const B: Gid = Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2]);
/// A third host, which copies what it sees.
const C: Gid = Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 3]);

/// Port indices on the network.
const AT_A: usize = 0;
const AT_B: usize = 1;

fn none() -> NoQps {
    NoQps
}

/// A REQ as A's CM sends it to B's listening port, with `edit` applied.
fn req(edit: impl FnOnce(&mut Req<&mut [u8]>)) -> [u8; MAD_LEN] {
    let (net, mut a, _b) = pair();
    let mut q = FakeQp::new(0x300);
    a.connect(&mut q, &params(&[]), Micros(0)).unwrap();
    let mut m = net.borrow().log[0].mad;
    edit(&mut Req::new_checked(&mut m[..]).unwrap());
    m
}

/// A REP to the REQ whose local communication ID is `local`: ours 0x4242, QPN 0x200, then
/// `edit`.
fn rep(local: u32, edit: impl FnOnce(&mut Rep<&mut [u8]>)) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    let mut rep = Rep::new_checked(&mut m[..]).unwrap();
    rep.hdr_mut().emit_cm(AttrId::Rep, 3);
    rep.set_local_comm_id(0x4242);
    rep.set_remote_comm_id(local);
    rep.set_local_qpn(0x200);
    edit(&mut rep);
    m
}

/// What `cm_destroy_id` sends for a REQ it gave up: REJ timeout, its CA GUID as ARI.
fn rej_timeout(req_mad: &[u8; MAD_LEN]) -> [u8; MAD_LEN] {
    let r = Req::new_checked(&req_mad[..]).unwrap();
    let mut m = [0u8; MAD_LEN];
    let mut rej = Rej::new_checked(&mut m[..]).unwrap();
    rej.hdr_mut().emit_cm(AttrId::Rej, r.hdr().tid());
    rej.set_local_comm_id(r.local_comm_id());
    rej.set_reason(RejReason::Timeout.raw());
    rej.set_message_rejected(MsgResponse::Other.raw());
    let mut ari = [0u8; 72];
    ari[..8].copy_from_slice(&r.local_ca_guid().to_be_bytes());
    rej.set_ari(&ari);
    rej.set_rejected_info_length(8);
    m
}

fn mra(local: u32, remote: u32, what: MsgResponse, service_timeout: u8) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    let mut x = Mra::new_checked(&mut m[..]).unwrap();
    x.hdr_mut().emit_cm(AttrId::Mra, 1);
    x.set_local_comm_id(local);
    x.set_remote_comm_id(remote);
    x.set_message_mraed(what.raw());
    x.set_service_timeout(service_timeout);
    m
}

fn dreq(local: u32, remote: u32, qpn: u32) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    let mut d = Dreq::new_checked(&mut m[..]).unwrap();
    d.hdr_mut().emit_cm(AttrId::Dreq, 2);
    d.set_local_comm_id(local);
    d.set_remote_comm_id(remote);
    d.set_remote_qpn_eecn(qpn);
    m
}

/// B alone with `N` slots and `E` events, listening; A's host exists (so A resolves).
fn lone_b<const N: usize, const E: usize>(cfg: CmConfig) -> (Shared, Cm<Port, N, E>) {
    let net: Shared = Rc::new(RefCell::new(Net::default()));
    let _a = host(&net, 1);
    let mut b = Cm::new(host(&net, 2), cfg).unwrap();
    b.listen(PORT).unwrap();
    (net, b)
}

/// Poll at each deadline (the fake clock jumps to it) until `until`, collecting events.
fn run_clock<P: MadPort, const N: usize, const E: usize>(
    cm: &mut Cm<P, N, E>,
    from: Micros,
    until: Micros,
) -> Vec<Event> {
    let mut ev = Vec::new();
    let mut t = from;
    for _ in 0..100_000 {
        while let Some(e) = cm.poll(t, &mut none()) {
            ev.push(e);
        }
        if t >= until {
            return ev;
        }
        t = cm.next_deadline().map_or(until, |d| d.min(until)).max(t);
    }
    panic!("the clock never reached {until:?}");
}

fn kinds(e: &[Event]) -> Vec<EventKind> {
    e.iter().map(|e| e.kind).collect()
}

// ---- 1. handles ----

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of MADs: hours under Miri; the same paths run there in the small cases"
)]
fn a_released_handle_never_names_a_later_connection_however_often_a_peer_cycles_the_slot() {
    // One slot; the peer alone cycles it: a REQ, then a REJ "timeout" withdrawing it. More
    // cycles than a 16-bit generation has values.
    let (net, mut b) = lone_b::<1, 4>(CmConfig::new(0xb2, 2));
    let r = req(|_| {});
    let rej = rej_timeout(&r);
    net.borrow_mut().inject(AT_B, A, r);
    let first = b.poll(Micros(0), &mut none()).unwrap();
    assert_eq!(first.kind, EventKind::ConnectRequest);
    for k in 0..(1u32 << 16) + 2 {
        net.borrow_mut().inject(AT_B, A, rej);
        let e = b.poll(Micros(0), &mut none()).unwrap();
        assert_eq!(e.kind, EventKind::Rejected { reason: RejReason::Timeout });
        net.borrow_mut().inject(AT_B, A, r);
        let e = b.poll(Micros(0), &mut none()).unwrap();
        assert_eq!(e.kind, EventKind::ConnectRequest);
        assert_ne!(e.id, first.id, "cycle {k}: the released handle names the new connection");
        assert_eq!(b.state(first.id), None, "cycle {k}");
        assert!(b.get_request(first.id).is_none());
    }
    assert_eq!(b.live(), 1);
}

#[test]
fn a_slot_whose_generation_ends_is_retired_and_its_handles_stay_refused() {
    let (net, mut b) = lone_b::<1, 4>(CmConfig::new(0xb2, 2));
    b.set_generation(0, u64::MAX - 1);
    let r = req(|_| {});
    let rej = rej_timeout(&r);
    let mut ids = Vec::new();
    for _ in 0..2 {
        net.borrow_mut().inject(AT_B, A, r);
        let e = b.poll(Micros(0), &mut none()).unwrap();
        assert_eq!(e.kind, EventKind::ConnectRequest);
        ids.push(e.id);
        net.borrow_mut().inject(AT_B, A, rej);
        b.poll(Micros(0), &mut none()).unwrap();
    }
    assert_ne!(ids[0], ids[1]);
    // The generation is at its end: the slot is retired, never reused.
    assert_eq!(b.stats().retired, 1);
    net.borrow_mut().inject(AT_B, A, r);
    assert_eq!(b.poll(Micros(0), &mut none()), None);
    assert_eq!(b.stats().table_full, 1);
    assert!(ids.iter().all(|&id| b.state(id).is_none()));
    assert_eq!(b.live(), 0);
}

// ---- 2. CA GUID 0 ----

#[test]
fn a_req_with_ca_guid_0_is_dropped_as_malformed_however_often_it_comes() {
    let (net, mut b) = lone_b::<8, 8>(CmConfig::new(0xb2, 2));
    let r = req(|r| r.set_local_ca_guid(0));
    let mut ev = Vec::new();
    for _ in 0..4 {
        net.borrow_mut().inject(AT_B, A, r);
        ev.extend(b.poll(Micros(0), &mut none()));
    }
    assert_eq!(ev, [], "no connection for a CA that names none");
    assert_eq!((b.live(), b.stats().malformed), (0, 4));
    assert!(net.borrow().log.is_empty(), "nothing answered");
}

#[test]
fn a_rep_with_ca_guid_0_is_dropped_as_malformed() {
    let (net, mut a, _b) = pair();
    net.borrow_mut().blackhole.push(B);
    let mut qa = FakeQp::new(0x100);
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let local = Req::new_checked(&net.borrow().log[0].mad[..]).unwrap().local_comm_id();
    net.borrow_mut().inject(AT_A, B, rep(local, |_| {}));
    assert_eq!(a.poll(Micros(0), core::slice::from_mut(&mut qa)), None);
    assert_eq!((a.state(ida), a.stats().malformed), (Some(ConnState::ReqSent), 1));
}

// ---- 3, 4. peer-chosen times ----

#[test]
fn every_peer_timeout_at_31_and_retries_15_still_free_the_slot_within_the_configured_bounds() {
    let cfg = CmConfig::new(0xb2, 2);
    let (net, mut b) = lone_b::<8, 8>(cfg);
    let r = req(|r| {
        r.set_remote_cm_response_timeout(31);
        r.set_local_cm_response_timeout(31);
        r.set_primary_local_ack_timeout(31);
        r.set_alternate_local_ack_timeout(31);
        r.set_max_cm_retries(15);
    });
    net.borrow_mut().inject(AT_B, A, r);
    let id = b.poll(Micros(0), &mut none()).unwrap().id;
    let mut qb = FakeQp::new(0x200);
    net.borrow_mut().blackhole.push(A);
    b.accept(id, &mut qb, &AcceptParams::default(), Micros(0)).unwrap();
    // An MRA for the REP at 31 too.
    let last = net.borrow().log.last().unwrap().mad;
    let rep = Rep::new_checked(&last[..]).unwrap();
    let m = mra(rep.remote_comm_id(), rep.local_comm_id(), MsgResponse::Rep, 31);
    net.borrow_mut().inject(AT_B, A, m);
    assert_eq!(b.poll(Micros(0), core::slice::from_mut(&mut qb)), None);
    // cm_mra_handler's wait, bounded: the service timeout at most 24, av.timeout at most 19.
    let try_ms = convert_to_ms(cfg.max_mra_service_timeout) + convert_to_ms(cfg.max_ack_timeout);
    assert_eq!(b.next_deadline(), Some(Micros(0).plus_ms(try_ms)));
    assert!(b.stats().clamped >= 2, "{:?}", b.stats());
    // The REP is sent again at most 15 times: the slot is free after 16 tries.
    let bound = Micros(0).plus_ms(16 * try_ms);
    let ev = run_clock(&mut b, Micros(0), bound);
    assert_eq!(kinds(&ev), [EventKind::Unreachable]);
    assert_eq!(b.live(), 0);
}

#[test]
fn a_req_asking_for_long_rep_timeouts_gets_its_rep_retries_at_the_bound() {
    let cfg = CmConfig::new(0xb2, 2);
    let (net, mut b) = lone_b::<8, 8>(cfg);
    let r = req(|r| {
        r.set_local_cm_response_timeout(31);
        r.set_max_cm_retries(15);
    });
    net.borrow_mut().inject(AT_B, A, r);
    let id = b.poll(Micros(0), &mut none()).unwrap().id;
    let mut qb = FakeQp::new(0x200);
    net.borrow_mut().blackhole.push(A);
    b.accept(id, &mut qb, &AcceptParams::default(), Micros(0)).unwrap();
    let try_ms = convert_to_ms(cfg.max_peer_response_timeout);
    assert_eq!(b.next_deadline(), Some(Micros(0).plus_ms(try_ms)));
    let ev = run_clock(&mut b, Micros(0), Micros(0).plus_ms(16 * try_ms));
    assert_eq!(kinds(&ev), [EventKind::Unreachable]);
    assert_eq!((b.live(), b.stats().retransmits), (0, 15));
}

#[test]
fn the_peer_cannot_stretch_timewait_beyond_the_bound() {
    let cfg = CmConfig::new(0xb2, 2);
    let (net, mut b) = lone_b::<8, 8>(cfg);
    let r = req(|r| r.set_primary_local_ack_timeout(31));
    net.borrow_mut().inject(AT_B, A, r);
    let id = b.poll(Micros(0), &mut none()).unwrap().id;
    let mut qb = FakeQp::new(0x200);
    b.accept(id, &mut qb, &AcceptParams::default(), Micros(0)).unwrap();
    // The same av.timeout is the data QP's ACK timeout: bounded too (each transport retry
    // would otherwise wait 4.096 µs × 2^31, 2.4 h).
    let rts = qb.steps.iter().find_map(|s| match s {
        QpStep::Rts { timeout, .. } => Some(*timeout),
        _ => None,
    });
    assert_eq!(rts, Some(cfg.max_ack_timeout));
    let rep = net.borrow().log.last().unwrap().mad;
    let rep = Rep::new_checked(&rep[..]).unwrap();
    net.borrow_mut().inject(AT_B, A, dreq(rep.remote_comm_id(), rep.local_comm_id(), 0x200));
    let e = b.poll(Micros(0), core::slice::from_mut(&mut qb)).unwrap();
    assert_eq!(e.kind, EventKind::Disconnected);
    assert_eq!(b.state(id), Some(ConnState::TimeWait));
    let bound = Micros(0).plus_ms(convert_to_ms(cfg.max_ack_timeout));
    assert_eq!(b.next_deadline(), Some(bound), "2048 ms, not 2^23");
    assert_eq!(kinds(&run_clock(&mut b, Micros(0), bound)), [EventKind::TimewaitExit]);
    assert_eq!(b.live(), 0);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of MADs: hours under Miri; the same paths run there in the small cases"
)]
fn one_mra_cannot_stretch_a_connect_beyond_the_bound() {
    let (net, mut a, _b) = pair();
    net.borrow_mut().blackhole.push(B);
    let cfg = CmConfig::new(0xa1, 1);
    let mut qa = FakeQp::new(0x100);
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let local = Req::new_checked(&net.borrow().log[0].mad[..]).unwrap().local_comm_id();
    // MRAs for the REQ, service timeout 31, thousands of times.
    for _ in 0..2000 {
        net.borrow_mut().inject(AT_A, B, mra(0x99, local, MsgResponse::Req, 31));
    }
    let mut ev = Vec::new();
    for _ in 0..200 {
        ev.extend(a.poll(Micros(0), core::slice::from_mut(&mut qa)));
    }
    assert_eq!(ev, []);
    assert_eq!(a.state(ida), Some(ConnState::MraReqRcvd));
    let s = a.stats();
    assert_eq!((s.received, s.duplicates, s.clamped), (2000, 1999, 1));
    // 2^(24-8) + 2^(17-8) ms per try, not 2^23.
    let try_ms = convert_to_ms(cfg.max_mra_service_timeout) + convert_to_ms(17);
    assert_eq!(a.next_deadline(), Some(Micros(0).plus_ms(try_ms)));
    let bound = Micros(0).plus_ms(16 * try_ms);
    let ev = run_clock(&mut a, Micros(0), bound);
    assert_eq!(kinds(&ev), [EventKind::Unreachable]);
    assert_eq!(a.live(), 0);
}

// ---- 5. configuration ----

#[test]
fn configuration_wider_than_its_wire_field_is_refused_at_construction() {
    let net: Shared = Rc::new(RefCell::new(Net::default()));
    let base = CmConfig::new(0xa1, 1);
    let bad = [
        CmConfig { cm_response_timeout: 80, ..base },
        CmConfig { packet_life_time: 255, ..base },
        CmConfig { packet_life_time: 31, ..base },
        CmConfig { ack_delay: 32, ..base },
        CmConfig { max_cm_retries: 16, ..base },
        CmConfig { budget: 0, ..base },
        CmConfig { port: 0, ..base },
        CmConfig { max_mra_service_timeout: 32, ..base },
        CmConfig { max_ack_timeout: 40, ..base },
        CmConfig { max_peer_response_timeout: 99, ..base },
        CmConfig { max_peer_cm_retries: 16, ..base },
    ];
    for cfg in bad {
        let r = Cm::<Port, 2>::new(host(&net, 1), cfg);
        assert!(r.is_err(), "{cfg:?}");
        assert_eq!(r.err().unwrap().errno(), crate::Errno::EINVAL);
    }
    assert_eq!(
        CmConfig { cm_response_timeout: 80, ..base }.check(),
        Err(ConfigError::Timeout { field: "CmConfig::cm_response_timeout over 31", value: 80 })
    );
    // The widest values that fit connect without overflowing anything.
    let wide = CmConfig {
        cm_response_timeout: 31,
        packet_life_time: 30,
        ack_delay: 31,
        max_cm_retries: 15,
        ..base
    };
    let mut a = Cm::<Port, 2>::new(host(&net, 1), wide).unwrap();
    let mut q = FakeQp::new(1);
    a.connect(&mut q, &params(&[]), Micros(u64::MAX - 5)).unwrap();
    assert_eq!(a.next_deadline(), Some(Micros(u64::MAX)), "saturates at the end of time");
    assert_eq!(a.poll(Micros(u64::MAX), &mut none()), None);
}

// ---- 6. spoofed sources ----

#[test]
fn a_req_from_another_gid_copying_an_established_peer_is_refused_and_changes_nothing() {
    let (net, _a, mut b, _qa, mut qb, _ida, idb) = connected();
    let _c = host(&net, 3);
    let steps = qb.steps.len();
    // C repeats A's CA GUID and QPN with a new communication ID.
    let r = req(|r| {
        r.set_local_comm_id(0x5eed_f00d);
        r.set_local_qpn(0x100);
    });
    let n = net.borrow().log.len();
    net.borrow_mut().inject(AT_B, C, r);
    assert_eq!(b.poll(Micros(1), core::slice::from_mut(&mut qb)), None);
    let log = net.borrow().log.clone();
    assert_eq!(log.len(), n + 1, "one REJ, no DREQ");
    assert_eq!(log[n].to.dgid, C);
    let rej = Rej::new_checked(&log[n].mad[..]).unwrap();
    assert_eq!(RejReason::from(rej.reason()), RejReason::StaleConn);
    assert_eq!(b.state(idb), Some(ConnState::Established));
    assert_eq!(qb.steps.len(), steps, "the QP untouched");
    assert_eq!(b.stats().spoofed, 1);
}

#[test]
fn a_rep_from_another_gid_copying_an_established_peer_is_refused_and_changes_nothing() {
    let (net, mut a, _b, mut qa, _qb, ida, _idb) = connected();
    let _c = host(&net, 3);
    net.borrow_mut().blackhole.push(B);
    let mut q2 = FakeQp::new(0x101);
    let id2 = a.connect(&mut q2, &params(&[]), Micros(1)).unwrap();
    let local =
        Req::new_checked(&net.borrow().log.last().unwrap().mad[..]).unwrap().local_comm_id();
    // C answers A's new REQ as if it were B's QP 0x200 (B's CA GUID 0xb2).
    let m = rep(local, |r| {
        r.set_local_comm_id(0x0bad_0bad);
        r.set_local_ca_guid(0xb2);
    });
    let n = net.borrow().log.len();
    net.borrow_mut().inject(AT_A, C, m);
    let mut qs = [&mut qa, &mut q2];
    assert_eq!(a.poll(Micros(1), &mut qs[..]), None);
    assert_eq!(attrs(&net)[n..], [AttrId::Rej], "no DREQ on the established connection");
    assert_eq!(a.state(ida), Some(ConnState::Established));
    assert_eq!(a.state(id2), Some(ConnState::ReqSent));
    assert_eq!(a.stats().spoofed, 1);
}

// ---- 11. a full send queue ----

#[test]
fn a_drep_that_cannot_leave_holds_its_disconnected_event_until_it_does() {
    let (net, mut a, mut b, mut qa, mut qb, ida, idb) = connected();
    net.borrow_mut().room[AT_B] = Some(0);
    a.disconnect(ida, &mut qa, Micros(1)).unwrap();
    assert_eq!(b.poll(Micros(1), core::slice::from_mut(&mut qb)), None, "the DREP did not leave");
    assert_eq!(b.state(idb), Some(ConnState::TimeWait));
    let s = b.stats();
    assert_eq!((s.send_errors, s.send_deferred), (0, 1), "a full queue is no send error");
    assert_eq!(*attrs(&net).last().unwrap(), AttrId::Dreq);
    net.borrow_mut().room[AT_B] = None;
    assert_eq!(
        b.poll(Micros(2), core::slice::from_mut(&mut qb)),
        Some(Event { id: idb, kind: EventKind::Disconnected })
    );
    assert_eq!(*attrs(&net).last().unwrap(), AttrId::Drep);
    let (ea, _) = settle(&mut a, &mut b, Micros(3), core::slice::from_mut(&mut qa), &mut []);
    assert_eq!(kinds(&ea), [EventKind::Disconnected]);
}

#[test]
fn a_req_an_rtu_and_a_rej_that_cannot_leave_go_on_a_later_poll_and_count_no_error() {
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let (mut qa, mut qb) = (FakeQp::new(0x100), FakeQp::new(0x200));
    // The REQ: kept, sent first on the next poll, before its timer.
    net.borrow_mut().room[AT_A] = Some(0);
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    assert!(net.borrow().log.is_empty());
    net.borrow_mut().room[AT_A] = None;
    let (_, eb) = settle(&mut a, &mut b, Micros(1), core::slice::from_mut(&mut qa), &mut []);
    assert_eq!(attrs(&net), [AttrId::Req]);
    assert_eq!(a.stats().retransmits, 0);
    // The RTU: Established waits for it.
    b.accept(eb[0].id, &mut qb, &AcceptParams::default(), Micros(1)).unwrap();
    net.borrow_mut().room[AT_A] = Some(0);
    assert_eq!(a.poll(Micros(1), core::slice::from_mut(&mut qa)), None);
    assert_eq!(a.state(ida), Some(ConnState::Established));
    net.borrow_mut().room[AT_A] = None;
    assert_eq!(
        a.poll(Micros(2), core::slice::from_mut(&mut qa)),
        Some(Event { id: ida, kind: EventKind::Established })
    );
    assert_eq!(attrs(&net), [AttrId::Req, AttrId::Rep, AttrId::Rtu]);
    assert_eq!(a.next_deadline(), None, "no timer left behind");
    assert_eq!(a.stats().send_errors, 0);
    // The REJ of a request rejected while B's queue is full: kept, sent on B's next poll.
    let mut q2 = FakeQp::new(0x101);
    let id2 = a.connect(&mut q2, &params(&[]), Micros(3)).unwrap();
    let mut evs = Vec::new();
    for _ in 0..4 {
        evs.extend(b.poll(Micros(3), &mut none()));
    }
    // B saw the first connection's RTU, then the second REQ.
    assert_eq!(kinds(&evs), [EventKind::Established, EventKind::ConnectRequest]);
    let e = evs[1];
    net.borrow_mut().room[AT_B] = Some(0);
    b.reject(e.id, b"full").unwrap();
    assert_eq!((b.state(e.id), *attrs(&net).last().unwrap()), (None, AttrId::Req));
    net.borrow_mut().room[AT_B] = None;
    assert_eq!(b.poll(Micros(4), &mut none()), None);
    assert_eq!(*attrs(&net).last().unwrap(), AttrId::Rej);
    assert_eq!(
        a.poll(Micros(4), core::slice::from_mut(&mut q2)),
        Some(Event { id: id2, kind: EventKind::Rejected { reason: RejReason::ConsumerDefined } })
    );
    assert_eq!((b.stats().send_errors, b.stats().send_dropped), (0, 0));
}

#[test]
fn a_rep_with_target_ack_delay_31_cannot_stretch_the_requesters_timewait() {
    let (net, mut a, _b) = pair();
    let cfg = CmConfig::new(0xa1, 1);
    net.borrow_mut().blackhole.push(B);
    let mut qa = FakeQp::new(0x100);
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let local = Req::new_checked(&net.borrow().log[0].mad[..]).unwrap().local_comm_id();
    let m = rep(local, |r| {
        r.set_local_ca_guid(0xb2);
        r.set_target_ack_delay(31);
    });
    net.borrow_mut().inject(AT_A, B, m);
    let e = a.poll(Micros(0), core::slice::from_mut(&mut qa)).unwrap();
    assert_eq!(e, Event { id: ida, kind: EventKind::Established });
    net.borrow_mut().inject(AT_A, B, dreq(0x4242, local, 0x100));
    let e = a.poll(Micros(0), core::slice::from_mut(&mut qa)).unwrap();
    assert_eq!(e.kind, EventKind::Disconnected);
    let bound = Micros(0).plus_ms(convert_to_ms(cfg.max_ack_timeout));
    assert_eq!(a.next_deadline(), Some(bound));
    assert_eq!(kinds(&run_clock(&mut a, Micros(0), bound)), [EventKind::TimewaitExit]);
    assert_eq!(a.live(), 0);
}

#[test]
fn a_queue_that_stays_full_ends_a_connect_within_its_retries() {
    let (net, mut a, _b) = pair();
    net.borrow_mut().room[AT_A] = Some(0);
    let mut qa = FakeQp::new(0x100);
    a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let bound = Micros(0).plus_ms(16 * 4608);
    let ev = run_clock(&mut a, Micros(0), bound);
    assert_eq!(kinds(&ev), [EventKind::Unreachable]);
    let s = a.stats();
    assert_eq!((a.live(), s.sent, s.send_errors), (0, 0, 0));
    assert!(s.send_deferred >= 16, "{s:?}");
}

// ---- 13. SIDR ----

#[test]
fn a_sidr_req_is_refused_at_once_with_a_sidr_rep() {
    let (net, mut b) = lone_b::<8, 8>(CmConfig::new(0xb2, 2));
    let mut m = [0u8; MAD_LEN];
    let mut s = SidrReq::new_checked(&mut m[..]).unwrap();
    s.hdr_mut().emit_cm(AttrId::SidrReq, 0x1234_5678_9abc_def0);
    s.set_request_id(0xdead_beef);
    s.set_partition_key(0xffff);
    s.set_service_id(0x0111_1c06);
    net.borrow_mut().inject(AT_B, A, m);
    assert_eq!(b.poll(Micros(0), &mut none()), None);
    let log = net.borrow().log.clone();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].to.dgid, A);
    let rep = SidrRep::new_checked(&log[0].mad[..]).unwrap();
    assert_eq!(rep.hdr().attr(), AttrId::SidrRep);
    assert_eq!(rep.hdr().tid(), 0x1234_5678_9abc_def0);
    assert_eq!(rep.request_id(), 0xdead_beef);
    assert_eq!(SidrStatus::from(rep.status()), SidrStatus::Unsupported);
    assert_eq!(rep.service_id(), 0x0111_1c06);
    let st = b.stats();
    assert_eq!((st.sidr_refused, st.unexpected, b.live()), (1, 0, 0));
}

// ---- destroy ----

#[test]
fn destroy_cancels_a_connect_in_progress_with_rej_timeout_and_our_guid() {
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let mut qa = FakeQp::new(0x100);
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let (_, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    a.destroy(ida, core::slice::from_mut(&mut qa)).unwrap();
    assert_eq!(qa.steps.last(), Some(&QpStep::Error));
    assert_eq!((a.state(ida), a.live()), (None, 0));
    let last = net.borrow().log.last().unwrap().mad;
    let rej = Rej::new_checked(&last[..]).unwrap();
    assert_eq!(RejReason::from(rej.reason()), RejReason::Timeout);
    assert_eq!(rej.ari()[..8], 0xa1u64.to_be_bytes());
    // B's request ends; A hears nothing more about its handle, whatever the time.
    let (ea, eb2) = settle(&mut a, &mut b, Micros(1), core::slice::from_mut(&mut qa), &mut []);
    assert_eq!(ea, []);
    assert_eq!(
        eb2,
        [Event { id: eb[0].id, kind: EventKind::Rejected { reason: RejReason::Timeout } }]
    );
    assert_eq!(run_clock(&mut a, Micros(1), Micros(0).plus_ms(100_000)), []);
    assert!(a.destroy(ida, &mut none()).is_err(), "the handle is refused");
    assert_eq!((a.live(), b.live()), (0, 0));
}

#[test]
fn destroy_in_each_state_sends_what_cm_destroy_id_sends() {
    // Established: a DREQ; the peer goes down; the slot is free at once.
    let (net, mut a, mut b, mut qa, mut qb, ida, idb) = connected();
    a.destroy(ida, core::slice::from_mut(&mut qa)).unwrap();
    assert_eq!(qa.steps.last(), Some(&QpStep::Error));
    assert_eq!(*attrs(&net).last().unwrap(), AttrId::Dreq);
    let (ea, eb) = settle(
        &mut a,
        &mut b,
        Micros(1),
        core::slice::from_mut(&mut qa),
        core::slice::from_mut(&mut qb),
    );
    assert_eq!((ea, eb), (Vec::new(), std::vec![Event { id: idb, kind: EventKind::Disconnected }]));
    assert_eq!(a.live(), 0);
    // Timewait: nothing more.
    let n = net.borrow().log.len();
    b.destroy(idb, core::slice::from_mut(&mut qb)).unwrap();
    assert_eq!(net.borrow().log.len(), n);
    assert_eq!(b.live(), 0);
    // Request received and unanswered: REJ consumer-defined, the requester is refused.
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let mut qa = FakeQp::new(0x100);
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let (_, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    b.destroy(eb[0].id, &mut none()).unwrap();
    let (ea, _) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    assert_eq!(
        ea,
        [Event { id: ida, kind: EventKind::Rejected { reason: RejReason::ConsumerDefined } }]
    );
    assert_eq!(attrs(&net), [AttrId::Req, AttrId::Rej]);
    assert_eq!((a.live(), b.live()), (0, 0));
}

#[test]
fn destroy_withdraws_the_undelivered_events_of_its_handle() {
    let (_net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let mut qs: Vec<FakeQp> = (0..2).map(|i| FakeQp::new(0x100 + i)).collect();
    for q in qs.iter_mut() {
        a.connect(q, &params(&[]), Micros(0)).unwrap();
    }
    let first = b.poll(Micros(0), &mut none()).unwrap();
    // The second request's event waits in the ring.
    let second = ConnId { slot: 1, gen: 0 };
    assert!(b.get_request(second).is_some());
    b.destroy(second, &mut none()).unwrap();
    assert_eq!(b.next_event(), None);
    assert_eq!(b.live(), 1);
    b.destroy(first.id, &mut none()).unwrap();
    assert_eq!(b.live(), 0);
}

// ---- floods, a full table, an undrained event ring ----

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of MADs: hours under Miri; the same paths run there in the small cases"
)]
fn a_req_flood_fills_the_table_and_legitimate_requests_get_in_once_slots_free() {
    let (net, mut b) = lone_b::<8, 8>(CmConfig::new(0xb2, 2));
    let n = 5000u32;
    let mut reqs = Vec::new();
    for k in 0..n {
        net.borrow_mut().inject(
            AT_B,
            A,
            req(|r| {
                r.set_local_comm_id(0x1000_0000 + k);
                r.set_local_qpn(0x10_0000 + k);
            }),
        );
    }
    // The application polls, but answers nobody.
    for _ in 0..n {
        reqs.extend(b.poll(Micros(0), &mut none()));
    }
    let s = b.stats();
    assert_eq!(s.received, n as u64);
    assert_eq!((reqs.len(), s.table_full), (8, n as u64 - 8), "{s:?}");
    assert_eq!(b.live(), 8);
    // It drops what it does not want; a legitimate requester's next try gets in.
    for e in &reqs {
        b.destroy(e.id, &mut none()).unwrap();
    }
    assert_eq!(b.live(), 0);
    let (net2, mut a, _) = pair();
    let mut qa = FakeQp::new(0x100);
    a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let legit = net2.borrow().log[0].mad;
    net.borrow_mut().inject(AT_B, A, legit);
    let e = b.poll(Micros(0), &mut none()).unwrap();
    assert_eq!(e.kind, EventKind::ConnectRequest);
    assert_eq!(b.get_request(e.id).unwrap().peer_qpn, crate::QpNum(0x100));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of MADs: hours under Miri; the same paths run there in the small cases"
)]
fn dreq_and_rej_floods_are_counted_and_a_full_queue_drops_their_answers() {
    let (net, mut a, mut b, mut qa, mut qb, ida, idb) = connected();
    net.borrow_mut().room[AT_B] = Some(10);
    for k in 0..3000u32 {
        // DREQs for connections B never had: each answered (cm_issue_drep) while the queue
        // has room, then dropped and counted.
        net.borrow_mut().inject(AT_B, A, dreq(0x7000_0000 + k, 0x6000_0000 + k, 0x200));
        // REJs naming nothing.
        let mut m = rej_timeout(&req(|r| r.set_local_comm_id(0x5000_0000 + k)));
        Rej::new_checked(&mut m[..]).unwrap().set_reason(RejReason::ConsumerDefined.raw());
        net.borrow_mut().inject(AT_A, B, m);
    }
    for _ in 0..3000 {
        assert_eq!(b.poll(Micros(1), core::slice::from_mut(&mut qb)), None);
        assert_eq!(a.poll(Micros(1), core::slice::from_mut(&mut qa)), None);
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!((sb.duplicates, sb.send_dropped, sb.send_errors), (3000, 2990, 0), "{sb:?}");
    // A counts the REJs, and the ten DREPs that reached it.
    assert_eq!(sa.unexpected, 3000 + 10, "{sa:?}");
    assert_eq!(
        (a.state(ida), b.state(idb)),
        (Some(ConnState::Established), Some(ConnState::Established))
    );
    // Then the connection goes down and both slots are free within timewait's bound.
    net.borrow_mut().room[AT_B] = None;
    a.disconnect(ida, &mut qa, Micros(2)).unwrap();
    settle(
        &mut a,
        &mut b,
        Micros(2),
        core::slice::from_mut(&mut qa),
        core::slice::from_mut(&mut qb),
    );
    let bound = Micros(2).plus_ms(convert_to_ms(CmConfig::new(1, 1).max_ack_timeout));
    settle(&mut a, &mut b, bound, &mut [], &mut []);
    assert_eq!((a.live(), b.live()), (0, 0));
}

#[test]
fn timers_due_while_nobody_drains_the_event_ring_wait_for_room_and_lose_nothing() {
    let net: Shared = Rc::new(RefCell::new(Net::default()));
    let mut a: Cm<Port, 4, 8> = Cm::new(host(&net, 1), CmConfig::new(0xa1, 1)).unwrap();
    let mut b: Cm<Port, 4, 1> = Cm::new(host(&net, 2), CmConfig::new(0xb2, 2)).unwrap();
    b.listen(PORT).unwrap();
    net.borrow_mut().blackhole.push(A);
    let mut qa: Vec<FakeQp> = (0..4).map(|i| FakeQp::new(0x100 + i)).collect();
    for q in qa.iter_mut() {
        a.connect(q, &params(&[]), Micros(0)).unwrap();
    }
    let mut qb: Vec<FakeQp> = (0..4).map(|i| FakeQp::new(0x200 + i)).collect();
    let mut ids = Vec::new();
    for q in qb.iter_mut() {
        let e = b.poll(Micros(0), &mut none()).unwrap();
        b.accept(e.id, q, &AcceptParams::default(), Micros(0)).unwrap();
        ids.push(e.id);
    }
    // All four REPs go unanswered; their timers all end at once, with room for one event.
    let mut ev = Vec::new();
    for step in 1..=16 {
        let t = Micros(0).plus_ms(step * 4096);
        for _ in 0..8 {
            ev.extend(b.poll(t, &mut qb[..]));
        }
    }
    assert_eq!(kinds(&ev), [EventKind::Unreachable; 4]);
    assert_eq!(b.live(), 0);
    let _ = &mut a;
}

#[test]
fn an_event_held_by_a_waiting_rtu_still_comes_before_the_connections_next_one() {
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let (mut qa, mut qb) = (FakeQp::new(0x100), FakeQp::new(0x200));
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let (_, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    let idb = eb[0].id;
    b.accept(idb, &mut qb, &AcceptParams::default(), Micros(0)).unwrap();
    net.borrow_mut().room[AT_A] = Some(0);
    assert_eq!(a.poll(Micros(0), core::slice::from_mut(&mut qa)), None, "the RTU waits");
    // B gives up on the connection (REJ, consumer-defined) before A's RTU could leave: A's
    // Disconnected waits behind the Established its RTU holds.
    b.destroy(idb, core::slice::from_mut(&mut qb)).unwrap();
    assert_eq!(a.poll(Micros(1), core::slice::from_mut(&mut qa)), None);
    assert_eq!(a.state(ida), Some(ConnState::TimeWait));
    net.borrow_mut().room[AT_A] = None;
    let mut ev = Vec::new();
    for _ in 0..3 {
        ev.extend(a.poll(Micros(1), core::slice::from_mut(&mut qa)));
    }
    assert_eq!(
        ev,
        [
            Event { id: ida, kind: EventKind::Established },
            Event { id: ida, kind: EventKind::Disconnected }
        ]
    );
    assert_eq!(*attrs(&net).last().unwrap(), AttrId::Rtu);
    let bound = Micros(1).plus_ms(convert_to_ms(CmConfig::new(1, 1).max_ack_timeout));
    assert_eq!(kinds(&run_clock(&mut a, Micros(1), bound)), [EventKind::TimewaitExit]);
    assert_eq!((a.live(), b.live()), (0, 0));
}

#[test]
fn with_room_for_one_event_held_events_come_one_by_one_and_the_slot_is_still_freed() {
    // A has room for one undelivered event; its queue stays full, so the RTU never leaves.
    let net: Shared = Rc::new(RefCell::new(Net::default()));
    let mut a: Cm<Port, 2, 1> = Cm::new(host(&net, 1), CmConfig::new(0xa1, 1)).unwrap();
    let mut b: Cm<Port, 2, 8> = Cm::new(host(&net, 2), CmConfig::new(0xb2, 2)).unwrap();
    b.listen(PORT).unwrap();
    let (mut qa, mut qb) = (FakeQp::new(0x100), FakeQp::new(0x200));
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let e = b.poll(Micros(0), &mut none()).unwrap();
    b.accept(e.id, &mut qb, &AcceptParams::default(), Micros(0)).unwrap();
    net.borrow_mut().room[AT_A] = Some(0);
    assert_eq!(a.poll(Micros(0), core::slice::from_mut(&mut qa)), None);
    b.destroy(e.id, core::slice::from_mut(&mut qb)).unwrap();
    assert_eq!(a.poll(Micros(0), core::slice::from_mut(&mut qa)), None);
    // The RTU's time (one try, 4608 ms) runs out: Established, then Disconnected; timewait
    // (at most 2048 ms) ends with TimewaitExit, one event per poll.
    let bound = Micros(0).plus_ms(4608 + 2048);
    let ev = run_clock(&mut a, Micros(0), bound);
    assert_eq!(
        kinds(&ev),
        [EventKind::Established, EventKind::Disconnected, EventKind::TimewaitExit]
    );
    assert!(ev.iter().all(|e| e.id == ida));
    let s = a.stats();
    assert_eq!((a.live(), s.send_dropped, s.send_errors), (0, 1, 0));
}

//! The state machine between two CMs on a fake network: connect, accept, reject, refusal,
//! timeouts with cm.c's retries, MRA, duplicates, stale connections, disconnect.

extern crate std;

use std::cell::RefCell;
use std::rc::Rc;
use std::vec::Vec;

use super::fake::*;
use crate::cm::mad::*;
use crate::cm::*;
use crate::{Errno, Gid, Mac, QpNum};

pub(super) type TCm = Cm<Port, 8, 8>;

pub(super) const PORT: u16 = 7174;

pub(super) fn pair() -> (Shared, TCm, TCm) {
    let net: Shared = Rc::new(RefCell::new(Net::default()));
    let a = Cm::new(host(&net, 1), CmConfig::new(0xa1, 1)).unwrap();
    let b = Cm::new(host(&net, 2), CmConfig::new(0xb2, 2)).unwrap();
    (net, a, b)
}

pub(super) fn params(pd: &[u8]) -> ConnectParams<'_> {
    ConnectParams {
        local: ([10, 0, 0, 1], 40000).into(),
        remote: ([10, 0, 0, 2], PORT).into(),
        local_gid: Gid::from_ipv4([10, 0, 0, 1]),
        remote_gid: Gid::from_ipv4([10, 0, 0, 2]),
        remote_mac: Mac([2, 0, 0, 0, 0, 2]),
        private_data: pd,
        qp: QpParams::default(),
    }
}

/// Poll both sides until neither has anything to say; the events of each.
pub(super) fn settle(
    a: &mut TCm,
    b: &mut TCm,
    now: Micros,
    qa: &mut [FakeQp],
    qb: &mut [FakeQp],
) -> (Vec<Event>, Vec<Event>) {
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let x = a.poll(now, qa);
        let y = b.poll(now, qb);
        ea.extend(x);
        eb.extend(y);
        if x.is_none() && y.is_none() {
            let (x, y) = (a.poll(now, qa), b.poll(now, qb));
            if x.is_none() && y.is_none() {
                break;
            }
            ea.extend(x);
            eb.extend(y);
        }
    }
    (ea, eb)
}

pub(super) fn attrs(net: &Shared) -> Vec<AttrId> {
    net.borrow().log.iter().map(|d| MadHdr::new_checked(&d.mad[..]).unwrap().attr()).collect()
}

/// Connect A's QP 0x100 to B's QP 0x200; the two CMs, their QPs and the ids.
pub(super) fn connected() -> (Shared, TCm, TCm, FakeQp, FakeQp, ConnId, ConnId) {
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let (mut qa, mut qb) = (FakeQp::new(0x100), FakeQp::new(0x200));
    let t = Micros(0);
    let ida = a.connect(&mut qa, &params(b"hello"), t).unwrap();
    let (_, eb) = settle(&mut a, &mut b, t, core::slice::from_mut(&mut qa), &mut []);
    assert_eq!(eb.len(), 1);
    assert_eq!(eb[0].kind, EventKind::ConnectRequest);
    let idb = eb[0].id;
    let r = b.get_request(idb).unwrap();
    assert_eq!(r.peer, ([10, 0, 0, 1], 40000).into());
    assert_eq!(r.local, core::net::IpAddr::from([10, 0, 0, 2]));
    assert_eq!(&r.private_data[..5], b"hello");
    assert!(r.private_data[5..].iter().all(|&x| x == 0));
    assert_eq!(r.peer_qpn, QpNum(0x100));
    assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
    b.accept(idb, &mut qb, &AcceptParams { private_data: b"welcome", ..Default::default() }, t)
        .unwrap();
    let (ea, eb) =
        settle(&mut a, &mut b, t, core::slice::from_mut(&mut qa), core::slice::from_mut(&mut qb));
    assert_eq!(ea, [Event { id: ida, kind: EventKind::Established }]);
    assert_eq!(eb, [Event { id: idb, kind: EventKind::Established }]);
    (net, a, b, qa, qb, ida, idb)
}

#[test]
fn connect_accept_moves_both_qps_with_crossed_psns_and_disconnect_enters_timewait() {
    let (net, mut a, mut b, mut qa, mut qb, ida, idb) = connected();
    assert_eq!(attrs(&net), [AttrId::Req, AttrId::Rep, AttrId::Rtu]);
    assert!(qa.rts() && qb.rts());
    let get = |q: &FakeQp| {
        let mut rtr = None;
        let mut rts = None;
        for s in &q.steps {
            match *s {
                QpStep::Rtr { remote_qpn, rq_psn, mtu, path, .. } => {
                    rtr = Some((remote_qpn, rq_psn, mtu, path))
                }
                QpStep::Rts { sq_psn, timeout, .. } => rts = Some((sq_psn, timeout)),
                _ => {}
            }
        }
        (rtr.unwrap(), rts.unwrap())
    };
    let ((ra, rqa, mtua, pa), (sqa, _)) = get(&qa);
    let ((rb, rqb, mtub, pb), (sqb, tb)) = get(&qb);
    assert_eq!((ra, rb), (QpNum(0x200), QpNum(0x100)));
    // Each side sends with the PSN the other expects (cm.c: REQ/REP starting PSN).
    assert_eq!((sqa, sqb), (rqb, rqa));
    assert_ne!(rqa, rqb);
    assert_eq!((mtua, mtub), (3, 3));
    assert_eq!((pa.dgid, pb.dgid), (Gid::from_ipv4([10, 0, 0, 2]), Gid::from_ipv4([10, 0, 0, 1])));
    assert_eq!((pa.dmac, pb.dmac), (Mac([2, 0, 0, 0, 0, 2]), Mac([2, 0, 0, 0, 0, 1])));
    // Passive ACK timeout: the REQ's local ACK timeout (cm_ack_timeout(16, 16) = 18) - 1 + 1.
    assert_eq!(tb, 18);
    // The REQ as rdma_cm sends it.
    let log = net.borrow().log.clone();
    let req = Req::new_checked(&log[0].mad[..]).unwrap();
    assert_eq!(req.service_id(), 0x0106_1c06);
    assert_eq!(req.local_ca_guid(), 0xa1);
    assert_eq!(
        (req.remote_cm_response_timeout(), req.local_cm_response_timeout(), req.max_cm_retries()),
        (20, 20, 15)
    );
    assert_eq!(
        (req.primary_local_lid(), req.primary_remote_lid(), req.partition_key()),
        (0xffff, 0xffff, 0xffff)
    );
    assert_ne!(req.local_comm_id(), 0);
    assert_eq!(req.hdr().tid() as u32, req.local_comm_id(), "cm_form_tid: low half is the comm ID");
    let rep = Rep::new_checked(&log[1].mad[..]).unwrap();
    assert_eq!(rep.remote_comm_id(), req.local_comm_id());
    assert_eq!(rep.hdr().tid(), req.hdr().tid(), "the REP answers in the REQ's transaction");
    assert_eq!(&rep.private_data()[..7], b"welcome");
    assert_eq!(rep.local_ca_guid(), 0xb2);
    // Disconnect from A: QP to ERR, DREQ, DREP, both Disconnected, both in timewait.
    a.disconnect(ida, &mut qa, Micros(10)).unwrap();
    assert_eq!(qa.steps.last(), Some(&QpStep::Error));
    let (ea, eb) = settle(
        &mut a,
        &mut b,
        Micros(10),
        core::slice::from_mut(&mut qa),
        core::slice::from_mut(&mut qb),
    );
    assert_eq!(ea, [Event { id: ida, kind: EventKind::Disconnected }]);
    assert_eq!(eb, [Event { id: idb, kind: EventKind::Disconnected }]);
    assert_eq!(qb.steps.last(), Some(&QpStep::Error));
    assert_eq!(
        (a.state(ida), b.state(idb)),
        (Some(ConnState::TimeWait), Some(ConnState::TimeWait))
    );
    assert_eq!(&attrs(&net)[3..], [AttrId::Dreq, AttrId::Drep]);
    // A second disconnect is a no-op; timewait ends after cm_convert_to_ms(av.timeout).
    a.disconnect(ida, &mut qa, Micros(10)).unwrap();
    let late = Micros(10).plus_ms(1 << 12);
    let (ea, eb) = settle(&mut a, &mut b, late, &mut [], &mut []);
    assert_eq!(ea, [Event { id: ida, kind: EventKind::TimewaitExit }]);
    assert_eq!(eb, [Event { id: idb, kind: EventKind::TimewaitExit }]);
    assert_eq!((a.live(), b.live(), a.state(ida)), (0, 0, None));
}

#[test]
fn disconnect_from_the_passive_side() {
    let (net, mut a, mut b, mut qa, mut qb, ida, idb) = connected();
    b.disconnect(idb, &mut qb, Micros(5)).unwrap();
    let (ea, eb) = settle(
        &mut a,
        &mut b,
        Micros(5),
        core::slice::from_mut(&mut qa),
        core::slice::from_mut(&mut qb),
    );
    assert_eq!(ea, [Event { id: ida, kind: EventKind::Disconnected }]);
    assert_eq!(eb, [Event { id: idb, kind: EventKind::Disconnected }]);
    let log = net.borrow().log.clone();
    let dreq = Dreq::new_checked(&log[3].mad[..]).unwrap();
    assert_eq!(dreq.remote_qpn_eecn(), 0x100, "the DREQ names the receiver's QP");
    assert_eq!(
        MadHdr::new_checked(&log[4].mad[..]).unwrap().tid(),
        dreq.hdr().tid(),
        "DREP in the DREQ's transaction"
    );
}

#[test]
fn nobody_listening_is_refused_with_reason_8() {
    let (net, mut a, mut b) = pair();
    let mut qa = FakeQp::new(0x100);
    let id = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let (ea, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    assert!(eb.is_empty());
    assert_eq!(
        ea,
        [Event { id, kind: EventKind::Rejected { reason: RejReason::InvalidServiceId } }]
    );
    assert_eq!(ea[0].kind.errno(), Some(Errno::ECONNREFUSED));
    assert_eq!(a.live(), 0);
    let rej_mad = net.borrow().log[1].mad;
    let rej = Rej::new_checked(&rej_mad[..]).unwrap();
    assert_eq!((rej.reason(), rej.message_rejected(), rej.local_comm_id()), (8, 0, 0));
}

#[test]
fn a_silent_peer_times_out_after_cm_c_retries() {
    let (net, mut a, _b) = pair();
    net.borrow_mut().blackhole.push(Gid::from_ipv4([10, 0, 0, 2]));
    let mut qa = FakeQp::new(0x100);
    let id = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    // Each try waits 2 × 2^(16-8) + 2^(20-8) ms = 4608 ms; 15 retries.
    let try_ms = 4608;
    let mut t = Micros(0);
    let mut got = None;
    for _ in 0..16 {
        assert_eq!(
            a.poll(Micros(t.0 + try_ms * 1000 - 1), &mut [] as &mut [FakeQp]),
            None,
            "not before its timeout"
        );
        t = t.plus_ms(try_ms);
        got = a.poll(t, &mut [] as &mut [FakeQp]);
    }
    assert_eq!(got, Some(Event { id, kind: EventKind::Unreachable }));
    assert_eq!(got.unwrap().kind.errno(), Some(Errno::ETIMEDOUT));
    assert_eq!(net.borrow().log.len(), 16, "the REQ and 15 retries");
    assert_eq!(a.stats().retransmits, 15);
    assert_eq!(t, Micros(16 * try_ms * 1000));
    assert_eq!(a.live(), 0);
}

#[test]
fn reject_carries_reason_28_and_private_data() {
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let mut qa = FakeQp::new(0x100);
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let (_, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    b.reject(eb[0].id, b"go away").unwrap();
    assert_eq!(b.state(eb[0].id), None);
    let (ea, _) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    assert_eq!(
        ea,
        [Event { id: ida, kind: EventKind::Rejected { reason: RejReason::ConsumerDefined } }]
    );
    let rej_mad = net.borrow().log[1].mad;
    assert_eq!(&Rej::new_checked(&rej_mad[..]).unwrap().private_data()[..7], b"go away");
}

#[test]
fn a_slow_accept_sends_an_mra_on_the_repeated_req_and_the_requester_waits_longer() {
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let mut qa = FakeQp::new(0x100);
    let mut qb = FakeQp::new(0x200);
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let (_, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    let idb = eb[0].id;
    // A retries; B, still unanswered, answers the duplicate with an MRA (service timeout 24).
    let t1 = Micros(0).plus_ms(4608);
    let (ea, eb) = settle(&mut a, &mut b, t1, core::slice::from_mut(&mut qa), &mut []);
    assert!(ea.is_empty() && eb.is_empty(), "{ea:?} {eb:?}");
    assert_eq!(attrs(&net), [AttrId::Req, AttrId::Req, AttrId::Mra]);
    assert_eq!(
        (a.state(ida), b.state(idb)),
        (Some(ConnState::MraReqRcvd), Some(ConnState::MraReqSent))
    );
    assert_eq!(b.stats().duplicates, 1);
    // The REQ now waits 2^(24-8) + 2^(17-8) ms before its next try.
    let wait = (1 << 16) + (1 << 9);
    assert_eq!(a.next_deadline(), Some(t1.plus_ms(wait)));
    assert_eq!(a.poll(t1.plus_ms(wait - 1), &mut [] as &mut [FakeQp]), None);
    assert_eq!(net.borrow().log.len(), 3);
    // The accept still goes through.
    b.accept(idb, &mut qb, &AcceptParams::default(), t1).unwrap();
    let (ea, eb) =
        settle(&mut a, &mut b, t1, core::slice::from_mut(&mut qa), core::slice::from_mut(&mut qb));
    assert_eq!((ea.len(), eb.len()), (1, 1));
    assert_eq!((ea[0].kind, eb[0].kind), (EventKind::Established, EventKind::Established));
}

#[test]
fn a_repeated_rep_gets_the_rtu_again_and_a_repeated_rtu_is_counted() {
    let (net, mut a, mut b, mut qa, mut qb, _ida, _idb) = connected();
    let rep = net.borrow().log[1].clone();
    let rtu = net.borrow().log[2].clone();
    net.borrow_mut().inbox[0].push_back(rep);
    net.borrow_mut().inbox[1].push_back(rtu);
    let (ea, eb) = settle(
        &mut a,
        &mut b,
        Micros(1),
        core::slice::from_mut(&mut qa),
        core::slice::from_mut(&mut qb),
    );
    assert!(ea.is_empty() && eb.is_empty());
    assert_eq!(attrs(&net)[3], AttrId::Rtu, "cm_dup_rep_handler re-sends the RTU");
    assert_eq!(
        (a.stats().duplicates, b.stats().duplicates),
        (1, 2),
        "B saw the RTU twice (once resent)"
    );
    assert_eq!(qa.steps.len(), 3, "the QP moved once");
}

#[test]
fn a_lost_rtu_is_covered_by_rep_retries_and_a_lost_rep_by_req_retries() {
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let (mut qa, mut qb) = (FakeQp::new(0x100), FakeQp::new(0x200));
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let (_, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    // Lose the REP.
    net.borrow_mut().blackhole.push(Gid::from_ipv4([10, 0, 0, 1]));
    b.accept(eb[0].id, &mut qb, &AcceptParams::default(), Micros(0)).unwrap();
    settle(
        &mut a,
        &mut b,
        Micros(0),
        core::slice::from_mut(&mut qa),
        core::slice::from_mut(&mut qb),
    );
    net.borrow_mut().blackhole.clear();
    // B's REP timer: cm_convert_to_ms(REQ local CM response timeout 20) = 4096 ms.
    let t = Micros(0).plus_ms(4096);
    let (ea, eb) =
        settle(&mut a, &mut b, t, core::slice::from_mut(&mut qa), core::slice::from_mut(&mut qb));
    assert_eq!(ea, [Event { id: ida, kind: EventKind::Established }]);
    assert_eq!(eb.len(), 1);
    assert_eq!(b.stats().retransmits, 1);
}

#[test]
fn a_new_req_from_a_connected_qp_is_stale_rejected_and_the_old_connection_torn_down() {
    let (net, mut a, mut b, mut qa, mut qb, _ida, idb) = connected();
    // A second CM on host A with the same CA GUID reuses QP 0x100 (a reboot that forgot).
    let mut a2: TCm = Cm::new(Port { net: net.clone(), me: 0 }, CmConfig::new(0xa1, 99)).unwrap();
    let mut q2 = FakeQp::new(0x100);
    let id2 = a2.connect(&mut q2, &params(&[]), Micros(1)).unwrap();
    let mut evs = Vec::new();
    for _ in 0..6 {
        evs.extend(b.poll(Micros(1), core::slice::from_mut(&mut qb)));
        evs.extend(a2.poll(Micros(1), core::slice::from_mut(&mut q2)));
    }
    // B refuses the REQ and asks the old peer to disconnect; the host answers the DREQ for
    // a connection it no longer knows (cm_issue_drep), and B's old connection goes down.
    assert_eq!(
        evs,
        [
            Event { id: id2, kind: EventKind::Rejected { reason: RejReason::StaleConn } },
            Event { id: idb, kind: EventKind::Disconnected }
        ]
    );
    assert_eq!(b.state(idb), Some(ConnState::TimeWait));
    assert!(attrs(&net).ends_with(&[AttrId::Req, AttrId::Rej, AttrId::Dreq, AttrId::Drep]));
    let _ = (&mut a, &mut qa);
}

#[test]
fn bad_calls_are_refused_with_errnos() {
    let (_net, mut a, mut b) = pair();
    let mut q = FakeQp::new(1);
    assert!(Cm::<Port, 1>::new(host(&_net, 9), CmConfig::new(0, 0)).is_err(), "CA GUID 0");
    let long = [0u8; 57];
    assert_eq!(a.connect(&mut q, &params(&long), Micros(0)).unwrap_err().errno(), Errno::EINVAL);
    b.listen(PORT).unwrap();
    assert!(b.listen(PORT).is_err());
    for p in 0..MAX_LISTENERS as u16 - 1 {
        b.listen(p).unwrap();
    }
    assert_eq!(b.listen(9999).unwrap_err().errno(), Errno::ENOMEM);
    let id = a.connect(&mut q, &params(&[]), Micros(0)).unwrap();
    assert!(a.accept(id, &mut q, &AcceptParams::default(), Micros(0)).is_err(), "not a request");
    assert!(a.disconnect(id, &mut q, Micros(0)).is_err(), "not established");
    // A QP that refuses its transition fails connect before anything is sent.
    let mut bad = FakeQp { fail_at: Some(0), ..FakeQp::new(2) };
    assert!(a.connect(&mut bad, &params(&[]), Micros(0)).is_err());
    assert_eq!(a.live(), 1);
}

#[test]
fn a_qp_failing_rtr_at_the_requester_rejects_and_reports() {
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let mut qa = FakeQp { fail_at: Some(1), ..FakeQp::new(0x100) };
    let mut qb = FakeQp::new(0x200);
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let (_, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    b.accept(eb[0].id, &mut qb, &AcceptParams::default(), Micros(0)).unwrap();
    let (ea, eb) = settle(
        &mut a,
        &mut b,
        Micros(0),
        core::slice::from_mut(&mut qa),
        core::slice::from_mut(&mut qb),
    );
    assert!(
        matches!(ea[..], [Event { id, kind: EventKind::ConnectError(_) }] if id == ida),
        "{ea:?}"
    );
    assert_eq!(eb[0].kind, EventKind::Rejected { reason: RejReason::ConsumerDefined });
    assert_eq!(qb.steps.last(), Some(&QpStep::Error));
    assert_eq!(attrs(&net).last(), Some(&AttrId::Rej));
}

#[test]
fn an_mra_for_the_rep_stretches_the_rep_timer_and_a_repeated_one_is_counted() {
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let (mut qa, mut qb) = (FakeQp::new(0x100), FakeQp::new(0x200));
    a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let (_, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    let idb = eb[0].id;
    // Lose what B sends, so that A never sees the REP; then A's MRA for the REP reaches B.
    net.borrow_mut().blackhole.push(Gid::from_ipv4([10, 0, 0, 1]));
    b.accept(idb, &mut qb, &AcceptParams::default(), Micros(0)).unwrap();
    let rep_mad = net.borrow().log.last().unwrap().mad;
    let rep = Rep::new_checked(&rep_mad[..]).unwrap();
    let mut m = [0u8; MAD_LEN];
    let mut mra = Mra::new_checked(&mut m[..]).unwrap();
    mra.hdr_mut().emit_cm(AttrId::Mra, rep.hdr().tid());
    mra.set_local_comm_id(rep.remote_comm_id());
    mra.set_remote_comm_id(rep.local_comm_id());
    mra.set_message_mraed(MsgResponse::Rep.raw());
    mra.set_service_timeout(20);
    let d = Datagram { to: MadAddr::default(), from: Gid::from_ipv4([10, 0, 0, 1]), mad: m };
    net.borrow_mut().inbox[1].push_back(d.clone());
    assert_eq!(b.poll(Micros(10), core::slice::from_mut(&mut qb)), None);
    assert_eq!(b.state(idb), Some(ConnState::MraRepRcvd));
    // cm_mra_handler: 2^(20-8) + 2^(av.timeout - 8) ms; av.timeout is 18 here.
    assert_eq!(b.next_deadline(), Some(Micros(10).plus_ms(4096 + 1024)));
    net.borrow_mut().inbox[1].push_back(d);
    let dups = b.stats().duplicates;
    assert_eq!(b.poll(Micros(11), core::slice::from_mut(&mut qb)), None);
    assert_eq!(b.stats().duplicates, dups + 1);
    assert_eq!(b.next_deadline(), Some(Micros(10).plus_ms(4096 + 1024)), "unchanged");
}

#[test]
fn a_dreq_repeated_in_timewait_gets_its_drep_again_and_one_for_no_connection_too() {
    let (net, mut a, mut b, mut qa, mut qb, ida, idb) = connected();
    a.disconnect(ida, &mut qa, Micros(1)).unwrap();
    settle(
        &mut a,
        &mut b,
        Micros(1),
        core::slice::from_mut(&mut qa),
        core::slice::from_mut(&mut qb),
    );
    assert_eq!(b.state(idb), Some(ConnState::TimeWait));
    let dreq = net.borrow().log[3].clone();
    assert_eq!(MadHdr::new_checked(&dreq.mad[..]).unwrap().attr(), AttrId::Dreq);
    net.borrow_mut().inbox[1].push_back(dreq.clone());
    let n = net.borrow().log.len();
    assert_eq!(b.poll(Micros(2), core::slice::from_mut(&mut qb)), None, "no second event");
    assert_eq!(attrs(&net)[n..], [AttrId::Drep]);
    // Once the slot is gone, cm_issue_drep still answers.
    settle(&mut a, &mut b, Micros(1).plus_ms(1 << 12), &mut [], &mut []);
    assert_eq!(b.live(), 0);
    net.borrow_mut().inbox[1].push_back(dreq);
    let n = net.borrow().log.len();
    b.poll(Micros(1).plus_ms(1 << 13), &mut [] as &mut [FakeQp]);
    assert_eq!(attrs(&net)[n..], [AttrId::Drep]);
}

#[test]
fn a_requester_giving_up_with_rej_timeout_ends_the_unanswered_request() {
    let (_net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let mut qa = FakeQp::new(0x100);
    let ida = a.connect(&mut qa, &params(&[]), Micros(0)).unwrap();
    let (_, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    let idb = eb[0].id;
    // What ib_destroy_cm_id sends in IB_CM_REQ_SENT: REJ timeout, the CA GUID as ARI.
    let local_id = {
        let log = _net.borrow();
        Req::new_checked(&log.log[0].mad[..]).unwrap().local_comm_id()
    };
    let mut m = [0u8; MAD_LEN];
    let mut rej = Rej::new_checked(&mut m[..]).unwrap();
    rej.hdr_mut().emit_cm(AttrId::Rej, 1);
    rej.set_local_comm_id(local_id);
    rej.set_reason(RejReason::Timeout.raw());
    rej.set_message_rejected(MsgResponse::Other.raw());
    let mut ari = [0u8; 72];
    ari[..8].copy_from_slice(&0xa1u64.to_be_bytes());
    rej.set_ari(&ari);
    rej.set_rejected_info_length(8);
    _net.borrow_mut().inbox[1].push_back(Datagram {
        to: MadAddr::default(),
        from: Gid::from_ipv4([10, 0, 0, 1]),
        mad: m,
    });
    assert_eq!(
        b.poll(Micros(1), &mut [] as &mut [FakeQp]),
        Some(Event { id: idb, kind: EventKind::Rejected { reason: RejReason::Timeout } })
    );
    assert_eq!(b.state(idb), None);
    let _ = ida;
}

#[test]
fn a_full_event_ring_holds_input_back_until_it_is_drained() {
    let net: Shared = Rc::new(RefCell::new(Net::default()));
    let mut a: Cm<Port, 8, 1> = Cm::new(host(&net, 1), CmConfig::new(0xa1, 1)).unwrap();
    let mut b: Cm<Port, 8, 1> = Cm::new(host(&net, 2), CmConfig::new(0xb2, 2)).unwrap();
    b.listen(PORT).unwrap();
    let mut qs: Vec<FakeQp> = (0..3).map(|i| FakeQp::new(0x100 + i)).collect();
    for q in qs.iter_mut() {
        a.connect(q, &params(&[]), Micros(0)).unwrap();
    }
    // Three REQs wait at B; with room for one event, each poll takes one and returns it.
    let mut reqs = 0;
    for _ in 0..3 {
        let e = b.next_event();
        assert_eq!(e, None);
        let e = b.poll(Micros(0), &mut [] as &mut [FakeQp]).unwrap();
        assert_eq!(e.kind, EventKind::ConnectRequest);
        reqs += 1;
    }
    assert_eq!((reqs, b.live(), b.stats().received), (3, 3, 3));
    let _ = &mut a;
}

#[test]
fn private_data_limits_are_those_of_rdma_cm() {
    let (net, mut a, mut b) = pair();
    b.listen(PORT).unwrap();
    let mut qa = FakeQp::new(0x100);
    let mut qb = FakeQp::new(0x200);
    let full = [0x5au8; 56];
    let ida = a.connect(&mut qa, &params(&full), Micros(0)).unwrap();
    let (_, eb) = settle(&mut a, &mut b, Micros(0), core::slice::from_mut(&mut qa), &mut []);
    let idb = eb[0].id;
    assert_eq!(b.get_request(idb).unwrap().private_data, &full[..]);
    assert_eq!(b.private_data(idb), Some(&full[..]));
    let long = [1u8; REP_USER_DATA + 1];
    let p = AcceptParams { private_data: &long, ..Default::default() };
    assert!(b.accept(idb, &mut qb, &p, Micros(0)).is_err());
    assert!(b.reject(idb, &[0u8; REJ_USER_DATA + 1]).is_err());
    assert_eq!(b.state(idb), Some(ConnState::ReqRcvd), "refused calls change nothing");
    assert!(qb.steps.is_empty());
    let rep = [7u8; REP_USER_DATA];
    b.accept(idb, &mut qb, &AcceptParams { private_data: &rep, ..Default::default() }, Micros(0))
        .unwrap();
    settle(
        &mut a,
        &mut b,
        Micros(0),
        core::slice::from_mut(&mut qa),
        core::slice::from_mut(&mut qb),
    );
    assert_eq!(a.private_data(ida), Some(&rep[..]));
    assert_eq!(attrs(&net), [AttrId::Req, AttrId::Rep, AttrId::Rtu]);
}

/// A REQ as A would send it, for B, with `edit` applied.
pub(super) fn req_to_b(net: &Shared, edit: impl FnOnce(&mut Req<&mut [u8]>)) {
    let (_n2, mut a, _b) = pair();
    let mut q = FakeQp::new(0x300);
    a.connect(&mut q, &params(&[]), Micros(0)).unwrap();
    let mut m = _n2.borrow().log[0].mad;
    edit(&mut Req::new_checked(&mut m[..]).unwrap());
    net.borrow_mut().inbox[1].push_back(Datagram {
        to: MadAddr::default(),
        from: Gid::from_ipv4([10, 0, 0, 1]),
        mad: m,
    });
}

#[test]
fn requests_b_cannot_take_are_rejected_with_the_reasons_cm_c_and_cma_c_give() {
    let (net, _a, mut b) = pair();
    b.listen(PORT).unwrap();
    type Edit = fn(&mut Req<&mut [u8]>);
    let cases: [(Edit, RejReason, bool); 3] = [
        // A cma_hdr of another version: cma_req_handler fails it, ib_cm rejects (28).
        (
            |r| {
                let mut pd = [0u8; 92];
                pd.copy_from_slice(r.private_data());
                pd[0] = 1;
                r.set_private_data(&pd)
            },
            RejReason::ConsumerDefined,
            true,
        ),
        // UC: not a transport this CM connects.
        (|r| r.set_transport_service_type(1), RejReason::InvalidTransportType, false),
        // Another port: nobody listens.
        (|r| r.set_service_id(0x0106_0001), RejReason::InvalidServiceId, false),
    ];
    for (edit, reason, malformed) in cases {
        let before = b.stats();
        req_to_b(&net, edit);
        assert_eq!(b.poll(Micros(0), &mut [] as &mut [FakeQp]), None);
        let last = net.borrow().log.last().unwrap().mad;
        let rej = Rej::new_checked(&last[..]).unwrap();
        assert_eq!((RejReason::from(rej.reason()), rej.message_rejected()), (reason, 0));
        assert_eq!(b.stats().malformed - before.malformed, malformed as u64);
        assert_eq!(b.live(), 0);
    }
}

#[test]
fn a_request_whose_path_is_unknown_is_rejected_and_one_from_an_unknown_source_goes_unanswered() {
    let (net, _a, mut b) = pair();
    b.listen(PORT).unwrap();
    let ghost = Gid::from_ipv4([10, 0, 0, 77]);
    // From A (resolvable), for a path to a GID nobody resolves: REJ, invalid GID.
    req_to_b(&net, |r| r.set_primary_local_gid(&ghost.0));
    let sent = net.borrow().log.len();
    assert_eq!(b.poll(Micros(0), &mut [] as &mut [FakeQp]), None);
    assert_eq!(net.borrow().log.len(), sent + 1);
    let last = net.borrow().log.last().unwrap().mad;
    let rej = Rej::new_checked(&last[..]).unwrap();
    assert_eq!(RejReason::from(rej.reason()), RejReason::InvalidGid);
    assert_eq!(b.stats().unresolved, 0, "answered");
    // From a source nobody resolves: no answer can go out (the requester tries again, by
    // when ARP may know it), counted once.
    req_to_b(&net, |r| r.set_primary_local_gid(&ghost.0));
    net.borrow_mut().inbox[1].back_mut().unwrap().from = ghost;
    let sent = net.borrow().log.len();
    assert_eq!(b.poll(Micros(0), &mut [] as &mut [FakeQp]), None);
    assert_eq!(net.borrow().log.len(), sent, "nothing sent");
    assert_eq!(b.stats().unresolved, 1);
    assert_eq!(b.live(), 0);
}

#[test]
fn a_full_table_drops_the_request_for_the_requester_to_retry() {
    let net: Shared = Rc::new(RefCell::new(Net::default()));
    let mut a: Cm<Port, 4, 8> = Cm::new(host(&net, 1), CmConfig::new(0xa1, 1)).unwrap();
    let mut b: Cm<Port, 1, 8> = Cm::new(host(&net, 2), CmConfig::new(0xb2, 2)).unwrap();
    b.listen(PORT).unwrap();
    let mut qs: Vec<FakeQp> = (0..2).map(|i| FakeQp::new(0x100 + i)).collect();
    for q in qs.iter_mut() {
        a.connect(q, &params(&[]), Micros(0)).unwrap();
    }
    let mut evs = Vec::new();
    for _ in 0..4 {
        evs.extend(b.poll(Micros(0), &mut [] as &mut [FakeQp]));
    }
    assert_eq!(kinds_of(&evs), [EventKind::ConnectRequest]);
    assert_eq!(b.stats().table_full, 1);
    assert_eq!(net.borrow().log.len(), 2, "no answer to the second REQ");
}

fn kinds_of(e: &[Event]) -> Vec<EventKind> {
    e.iter().map(|e| e.kind).collect()
}

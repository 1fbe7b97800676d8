use super::*;
use crate::net::arp::{ArpPacket, EthFrame, BROADCAST};
use proptest::prelude::*;

const US: Mac = Mac([0x02, 0x4d, 0, 0, 0, 1]);
const PEER: Mac = Mac([0x02, 0x4d, 0, 0, 0, 2]);
const OTHER: Mac = Mac([0x02, 0x4d, 0, 0, 0, 3]);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SEC: u64 = 1_000_000_000;

fn arp() -> Arp<4, 2> {
    let mut a = Arp::new(US, NeighConfig::default());
    a.add_address(OUR_IP).unwrap();
    a
}

fn frame(r: ArpRepr) -> [u8; 60] {
    let mut f = [0u8; 60];
    r.emit(&mut f).unwrap();
    f
}

fn reply_from_peer() -> [u8; 60] {
    frame(ArpRepr {
        eth_dst: US,
        op: ArpOp::Reply,
        sender_mac: PEER,
        sender_ip: PEER_IP,
        target_mac: US,
        target_ip: OUR_IP,
    })
}

#[test]
fn resolution_sends_a_request_then_takes_the_reply() {
    let mut a = arp();
    let mut out = [0u8; 60];
    assert_eq!(a.poll_resolve(PEER_IP, 0, &mut out), Ok(Resolve::Send(60)));
    // The request on the wire: broadcast, from us, who has 10.0.0.2 tell 10.0.0.1.
    let eth = EthFrame::new_checked(&out[..]).unwrap();
    assert_eq!((eth.dst(), eth.src(), eth.ethertype()), (BROADCAST, US, 0x0806));
    let p = ArpPacket::new_checked(eth.payload()).unwrap();
    assert_eq!(
        (p.oper(), p.sha(), p.spa(), p.tha(), p.tpa()),
        (1, US, OUR_IP, Mac([0; 6]), PEER_IP)
    );
    assert_eq!(a.poll_resolve(PEER_IP, SEC / 2, &mut out), Ok(Resolve::Pending));
    assert_eq!(a.lookup(PEER_IP, SEC / 2), None);
    assert_eq!(a.on_frame(&reply_from_peer(), SEC / 2, &mut out), Ok(Handled::Learned));
    assert_eq!(a.poll_resolve(PEER_IP, SEC / 2, &mut out), Ok(Resolve::Ready(PEER)));
    let s = a.stats();
    assert_eq!((s.requests_sent, s.learned, s.received), (1, 1, 1));
    // Our own addresses resolve to our MAC.
    assert_eq!(a.poll_resolve(OUR_IP, 0, &mut out), Ok(Resolve::Ready(US)));
}

#[test]
fn unanswered_resolution_retries_then_is_unreachable() {
    let mut a = arp();
    let mut out = [0u8; 60];
    let mut sends = 0;
    let mut t = 0;
    let err = loop {
        match a.poll_resolve(PEER_IP, t, &mut out) {
            Ok(Resolve::Send(_)) => sends += 1,
            Ok(Resolve::Pending) => {}
            Ok(Resolve::Ready(m)) => panic!("resolved to {m:?}"),
            Err(e) => break e,
        }
        t += SEC / 10;
        assert!(t < 10 * SEC, "bounded");
    };
    assert_eq!(sends, 3, "the kernel's three solicitations");
    assert!(t >= 3 * SEC, "each given its retransmit time");
    assert_eq!(err, Error::Unreachable(IpAddr::V4(PEER_IP)));
    assert_eq!(err.errno().0, 113, "EHOSTUNREACH");
    assert!(a.neighbours().is_empty(), "a failed entry is dropped");
    assert_eq!(a.stats().unreachable, 1);
    // A later resolution starts over.
    assert_eq!(a.poll_resolve(PEER_IP, t, &mut out), Ok(Resolve::Send(60)));
}

#[test]
fn requests_for_our_address_are_answered_and_the_sender_learned() {
    let mut a = arp();
    let mut out = [0xa5u8; 60];
    let req = frame(ArpRepr::request(PEER, PEER_IP, OUR_IP));
    assert_eq!(a.on_frame(&req, 5, &mut out), Ok(Handled::Reply(60)));
    let r = ArpRepr::parse(&out).unwrap();
    assert_eq!(
        r,
        ArpRepr {
            eth_dst: PEER,
            op: ArpOp::Reply,
            sender_mac: US,
            sender_ip: OUR_IP,
            target_mac: PEER,
            target_ip: PEER_IP,
        }
    );
    assert_eq!(a.lookup(PEER_IP, 5), Some(PEER));
    assert_eq!(a.stats().replied, 1);
}

#[test]
fn frames_not_for_us_are_dropped_but_refresh_what_we_know() {
    let mut a = arp();
    let mut out = [0u8; 60];
    let elsewhere = Ipv4Addr::new(10, 0, 0, 9);
    // A request for someone else from an unknown sender: not learned.
    let req = frame(ArpRepr::request(OTHER, Ipv4Addr::new(10, 0, 0, 3), elsewhere));
    assert_eq!(a.on_frame(&req, 0, &mut out), Err(ArpError::NotForUs));
    assert!(a.neighbours().is_empty());
    // Once known, the same sender moving to a new MAC is merged (RFC 826), still dropped;
    // but not within the lock time of its last confirmation.
    a.on_frame(&reply_from_peer(), 0, &mut out).unwrap();
    let moved = frame(ArpRepr::request(OTHER, PEER_IP, elsewhere));
    assert_eq!(a.on_frame(&moved, 1, &mut out), Err(ArpError::NotForUs));
    assert_eq!((a.lookup(PEER_IP, 1), a.stats().locked), (Some(PEER), 1));
    assert_eq!(a.on_frame(&moved, 2 * SEC, &mut out), Err(ArpError::NotForUs));
    assert_eq!(a.lookup(PEER_IP, 2 * SEC), Some(OTHER));
    // Unicast to another station, and our own broadcast looped back.
    let mut other = reply_from_peer();
    other[..6].copy_from_slice(&OTHER.0);
    assert_eq!(a.on_frame(&other, 2, &mut out), Err(ArpError::NotForUs));
    let own = frame(ArpRepr::request(US, OUR_IP, PEER_IP));
    assert_eq!(a.on_frame(&own, 2, &mut out), Err(ArpError::FromUs));
    assert_eq!(a.on_frame(&[0u8; 20], 2, &mut out), Err(ArpError::NotArp { ethertype: 0 }));
    let s = a.stats();
    assert_eq!((s.not_for_us, s.from_us, s.malformed, s.received), (4, 1, 1, 7));
}

#[test]
fn static_neighbours_win_over_the_wire() {
    let mut a = arp();
    let mut out = [0u8; 60];
    a.set_static(PEER_IP, OTHER).unwrap();
    assert_eq!(a.poll_resolve(PEER_IP, 0, &mut out), Ok(Resolve::Ready(OTHER)));
    assert_eq!(a.on_frame(&reply_from_peer(), 0, &mut out), Ok(Handled::Learned));
    assert_eq!(a.lookup(PEER_IP, u64::MAX), Some(OTHER), "never replaced, never aged");
    assert!(a.set_static(PEER_IP, BROADCAST).is_err());
    assert!(a.set_static(Ipv4Addr::BROADCAST, PEER).is_err());
    a.remove(PEER_IP);
    assert_eq!(a.lookup(PEER_IP, 0), None);
}

#[test]
fn learned_entries_go_stale_and_are_resolved_again() {
    let mut a = arp();
    let mut out = [0u8; 60];
    a.on_frame(&frame(ArpRepr::request(PEER, PEER_IP, OUR_IP)), 0, &mut out).unwrap();
    assert_eq!(a.poll_resolve(PEER_IP, 29 * SEC, &mut out), Ok(Resolve::Ready(PEER)));
    assert_eq!(a.poll_resolve(PEER_IP, 31 * SEC, &mut out), Ok(Resolve::Send(60)));
}

#[test]
fn a_full_table_gives_up_a_stale_entry_to_the_wire_and_its_oldest_to_a_resolution() {
    let mut a = arp();
    let mut out = [0u8; 60];
    for i in 0..4u8 {
        let mac = Mac([0x02, 0, 0, 0, 1, i]);
        let req = frame(ArpRepr::request(mac, Ipv4Addr::new(10, 0, 1, i), OUR_IP));
        a.on_frame(&req, i as u64, &mut out).unwrap();
    }
    // Every entry fresh: a new sender is answered, not learned, and counted.
    let late = frame(ArpRepr::request(PEER, PEER_IP, OUR_IP));
    assert_eq!(a.on_frame(&late, 10, &mut out), Ok(Handled::Reply(60)));
    assert_eq!((a.lookup(PEER_IP, 10), a.stats().table_full), (None, 1));
    assert_eq!(a.lookup(Ipv4Addr::new(10, 0, 1, 0), 10), Some(Mac([0x02, 0, 0, 0, 1, 0])));
    // Once the oldest is stale, the wire may have its place.
    let t = 30 * SEC + 1;
    a.on_frame(&late, t, &mut out).unwrap();
    assert_eq!(a.neighbours().len(), 4);
    assert_eq!(a.lookup(Ipv4Addr::new(10, 0, 1, 0), t), None, "the oldest went");
    assert_eq!(a.lookup(PEER_IP, t), Some(PEER));
    // A resolution the caller asked for pushes out the least recently confirmed, fresh or not.
    let mut b = arp();
    for i in 0..4u8 {
        let mac = Mac([0x02, 0, 0, 0, 1, i]);
        let req = frame(ArpRepr::request(mac, Ipv4Addr::new(10, 0, 1, i), OUR_IP));
        b.on_frame(&req, i as u64, &mut out).unwrap();
    }
    assert_eq!(b.poll_resolve(PEER_IP, 10, &mut out), Ok(Resolve::Send(60)));
    assert_eq!(b.lookup(Ipv4Addr::new(10, 0, 1, 0), 10), None);
    // Full of static entries: the sender is answered, not learned, and counted.
    let mut s = arp();
    for i in 0..4u8 {
        s.set_static(Ipv4Addr::new(10, 0, 2, i), Mac([0x02, 0, 0, 0, 2, i])).unwrap();
    }
    assert!(s.set_static(PEER_IP, PEER).is_err());
    assert_eq!(s.on_frame(&late, 0, &mut out), Ok(Handled::Reply(60)));
    assert_eq!(s.stats().table_full, 1);
    assert!(s.poll_resolve(Ipv4Addr::new(10, 0, 3, 1), 0, &mut out).is_err());
}

#[test]
fn probes_are_answered_not_learned_and_addresses_are_checked() {
    let mut a = arp();
    let mut out = [0u8; 60];
    let probe = frame(ArpRepr::request(PEER, Ipv4Addr::UNSPECIFIED, OUR_IP));
    assert_eq!(a.on_frame(&probe, 0, &mut out), Ok(Handled::Reply(60)));
    assert!(a.neighbours().is_empty());
    // Another station claiming our address (a gratuitous ARP for it): neither learned nor
    // answered.
    let claim = frame(ArpRepr::request(PEER, OUR_IP, OUR_IP));
    assert_eq!(a.on_frame(&claim, 0, &mut out), Err(ArpError::Conflict(OUR_IP)));
    assert!(a.neighbours().is_empty());
    assert_eq!(a.stats().conflicts, 1);
    assert!(a.add_address(Ipv4Addr::new(224, 0, 0, 1)).is_err());
    a.add_address(Ipv4Addr::new(10, 0, 0, 7)).unwrap();
    assert!(a.add_address(Ipv4Addr::new(10, 0, 0, 8)).is_err(), "two addresses at most");
    a.remove_address(OUR_IP);
    assert_eq!(a.addresses(), &[Ipv4Addr::new(10, 0, 0, 7)]);
    let mut none: Arp<4, 2> = Arp::new(US, NeighConfig::default());
    assert!(matches!(none.poll_resolve(PEER_IP, 0, &mut out), Err(Error::InvalidArgument(_))));
    assert!(a.poll_resolve(Ipv4Addr::BROADCAST, 0, &mut out).is_err());
}

/// The flood's frames: `n` ARP requests and replies, to us or broadcast, from senders with
/// spoofed MACs and addresses in 10.0.0.0/16, one in 97 claiming our own address (a conflict),
/// one in `peer_every` (if not 0) claiming the peer's.
fn flood(seed: u64, n: usize, peer_every: usize) -> impl Iterator<Item = [u8; 60]> {
    let mut x = seed | 1;
    (0..n).map(move |k| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        let sender_ip = if peer_every != 0 && k % peer_every == 0 {
            PEER_IP
        } else if k % 97 == 1 {
            OUR_IP
        } else {
            Ipv4Addr::new(10, 0, b[0], b[1])
        };
        let target_ip = if b[2].is_multiple_of(8) { Ipv4Addr::new(10, 0, 9, b[3]) } else { OUR_IP };
        frame(ArpRepr {
            eth_dst: if b[4].is_multiple_of(2) { BROADCAST } else { US },
            op: if b[5].is_multiple_of(2) { ArpOp::Request } else { ArpOp::Reply },
            sender_mac: Mac([0x02, b[6], b[7], b[3], b[1], b[0]]),
            sender_ip,
            target_mac: US,
            target_ip,
        })
    })
}

/// An ARP flood: thousands of requests and replies from many spoofed senders. The table stays
/// within its `N` entries, nothing panics, every frame is counted, the peer the driver resolved
/// and uses is never pushed out, and its MAC is never moved by senders that do not claim its
/// address; a flood that does claim it moves it at most once per lock time (the policy in the
/// module docs).
#[test]
fn an_arp_flood_is_bounded_counted_and_moves_a_peer_in_use_at_most_once_per_lock_time() {
    let mut a: Arp<8, 2> = Arp::new(US, NeighConfig::default());
    a.add_address(OUR_IP).unwrap();
    let mut out = [0u8; 60];
    // The driver resolves its peer and uses it.
    assert_eq!(a.poll_resolve(PEER_IP, 0, &mut out), Ok(Resolve::Send(60)));
    assert_eq!(a.on_frame(&reply_from_peer(), 1, &mut out), Ok(Handled::Learned));
    // 10 000 frames in 10 ms, none claiming the peer's address.
    let mut t = 1;
    for f in flood(7, 10_000, 0) {
        t += 1_000;
        let _ = a.on_frame(&f, t, &mut out);
        assert!(a.neighbours().len() <= 8);
        assert_eq!(a.lookup(PEER_IP, t), Some(PEER), "the peer in use stays where it is");
    }
    let s = a.stats();
    assert_eq!(s.received, 10_001);
    assert!(s.table_full > 5_000, "{s:?}");
    assert!(s.conflicts > 0 && s.not_for_us > 0, "{s:?}");
    // Every frame either taught an entry, was refused for want of room or by the lock, or was
    // dropped and counted; a request for us was answered either way.
    assert!(s.learned + s.table_full + s.not_for_us + s.conflicts + s.locked >= 10_000, "{s:?}");

    // 10 000 more in 10 s, one in ten claiming the peer's address with a spoofed MAC.
    let (start, mut moves, mut last) = (t, 0u64, PEER);
    for f in flood(11, 10_000, 10) {
        t += 1_000_000;
        let _ = a.on_frame(&f, t, &mut out);
        assert!(a.neighbours().len() <= 8);
        let now = a.lookup(PEER_IP, t).expect("the peer's entry is never pushed out");
        if now != last {
            moves += 1;
            last = now;
        }
    }
    let lock = NeighConfig::default().locktime_ns;
    assert!(moves >= 1 && moves <= (t - start) / lock + 1, "{moves} moves in {} ns", t - start);
    let s = a.stats();
    assert_eq!(s.received, 20_001);
    assert!(s.locked > 500, "{s:?}");
}

proptest! {
    /// Random frames and resolutions in any order never panic, the table never outgrows its
    /// capacity, and every frame is either taken or counted once.
    #[test]
    fn random_traffic_never_panics(
        frames in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..40),
        arpish in proptest::collection::vec((any::<u8>(), any::<u8>(), 0u16..4, any::<bool>()), 0..40),
    ) {
        let mut a = arp();
        let mut out = [0u8; 60];
        let mut t = 0u64;
        for f in &frames {
            let _ = a.on_frame(f, t, &mut out);
            t += SEC / 3;
        }
        for (i, (last, mac, op, to_us)) in arpish.iter().enumerate() {
            let mut f = frame(ArpRepr::request(
                Mac([0x02, 0, 0, 0, 9, *mac]),
                Ipv4Addr::new(10, 0, 5, *last),
                if *to_us { OUR_IP } else { PEER_IP },
            ));
            f[21] = *op as u8;
            let _ = a.on_frame(&f, t, &mut out);
            let _ = a.poll_resolve(Ipv4Addr::new(10, 0, 6, (i % 7) as u8 + 1), t, &mut out);
            t += SEC / 3;
        }
        prop_assert!(a.neighbours().len() <= 4);
        let s = a.stats();
        let n = (frames.len() + arpish.len()) as u64;
        prop_assert_eq!(s.received, n);
        prop_assert!(s.malformed + s.not_for_us + s.from_us + s.conflicts <= n);
    }
}

//! Retries of a long READ against a slow responder (IBTA vol 1 §9.7.6.1.3 and rxe
//! `rxe_comp.c`, `rxe_req.c` `req_retry`): the local ACK timer restarts on every response
//! that makes progress, so a READ whose responses take many timeouts in all still
//! completes without a retry; a lost response in the middle is asked for again from its
//! own PSN, the address advanced and the length reduced, never from the READ's start.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdma_pmd::Mac;
use rdma_pmd_mlx5::control::{Access, Path};

use super::harness::*;
use crate::roce::bth::Opcode;
use crate::roce::{Hub, HubPort, Port, PortError, RocePacket};
use crate::wire::{WIRE_MAX_FRAME, WIRE_QUEUE};
use crate::{Gid, Model, ModelConfig};

fn gid(last: u8) -> Gid {
    let gid = Ipv4Addr::new(10, 8, 0, last).to_ipv6_mapped().octets();
    Gid { gid, mac: [0x02, 0x4d, 0x52, 0, 0, last] }
}

fn path_to(g: Gid) -> Path {
    Path::RoceV2 {
        dgid: g.gid,
        dmac: g.mac,
        sgid_index: 0,
        udp_sport: 0xc000,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        sl: 0,
    }
}

/// The requester's port: hands received frames over no faster than one per `gap` (a slow
/// peer), and records every READ REQUEST it sends as (PSN, remote address, length).
struct Slow {
    inner: HubPort,
    gap: Duration,
    last: Instant,
    reads: Arc<Mutex<Vec<(u32, u64, u32)>>>,
}

impl Port for Slow {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        if let Ok(p) = RocePacket::parse(frame) {
            if let (Opcode::RC_READ_REQUEST, Some(r)) = (p.bth.opcode, p.ext.reth) {
                self.reads.lock().unwrap().push((p.bth.psn, r.va, r.dma_len));
            }
        }
        self.inner.send(frame)
    }
    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        if self.last.elapsed() < self.gap {
            return Ok(None);
        }
        let f = self.inner.recv()?;
        if f.is_some() {
            self.last = Instant::now();
        }
        Ok(f)
    }
}

/// Drops the first packet it sends for PSN `lose` (a response, or a request if `requests`),
/// and records the PSN of every request it sends.
struct LoseOnce {
    inner: HubPort,
    lose: Option<u32>,
    requests: bool,
    sent: Arc<Mutex<Vec<u32>>>,
}

impl Port for LoseOnce {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        if let Ok(p) = RocePacket::parse(frame) {
            let request = p.bth.opcode.is_request();
            if request {
                self.sent.lock().unwrap().push(p.bth.psn);
            }
            if self.lose == Some(p.bth.psn) && request == self.requests {
                self.lose = None;
                return Ok(());
            }
        }
        self.inner.send(frame)
    }
    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        self.inner.recv()
    }
}

/// 200 000 bytes at the 1024-byte MTU: 196 response PSNs. (A debug ThreadSanitizer build on
/// a loaded two-core host builds a 1 KiB frame in milliseconds: a longer READ's responses
/// could not all be built within the requester's retries.)
const LEN: usize = 200_000;
const NPKTS: u32 = 196;
const SQ_PSN: u32 = 0x10;
/// The READ's local ACK timeout, 4.096 µs << 16: 268 ms. The responder builds all of a
/// READ's response frames before the first leaves, which a debug ThreadSanitizer build on a
/// loaded host stretched past seven 67 ms timeouts (`RETRY_EXC_ERR` before any response);
/// seven of these leave it almost two seconds.
const READ_TIMEOUT: u8 = 16;

/// READ `LEN` bytes from y to x, x receiving one frame per `gap`, y losing the response
/// for `lose`; the READ REQUESTs x sent.
fn slow_read(gap: Duration, lose: Option<u32>) -> Vec<(u32, u64, u32)> {
    let hub = Hub::with_limits(WIRE_MAX_FRAME, WIRE_QUEUE);
    let (gx, gy) = (gid(1), gid(2));
    let reads = Arc::new(Mutex::new(Vec::new()));
    let px = Slow { inner: hub.port(Mac(gx.mac)), gap, last: Instant::now(), reads: reads.clone() };
    let sent = Arc::new(Mutex::new(Vec::new()));
    let py = LoseOnce { inner: hub.port(Mac(gy.mac)), lose, requests: false, sent };
    let cfg = |g: Gid| ModelConfig { gids: vec![g], ..Default::default() };
    let mut x = Env::with_model(Model::with_config(cfg(gx).with_port(px)).expect("model"));
    let mut y = Env::with_model(Model::with_config(cfg(gy).with_port(py)).expect("model"));
    let mut cq_x = x.cq(7);
    let cq_y = y.cq(4);
    let mut a = x.qp(&cq_x, &cq_x, 7, None);
    let b = y.qp(&cq_y, &cq_y, 4, None);
    let all = RW | Access::REMOTE_READ;
    let t = (7, READ_TIMEOUT);
    rts_timed(&mut x.ctl, a.qpn, b.qpn, path_to(gy), (SQ_PSN, 0x20), t, all);
    rts_timed(&mut y.ctl, b.qpn, a.qpn, path_to(gx), (0x20, SQ_PSN), t, all);
    let back = x.region(LEN, 0x100_0000, RW);
    let src = y.region(LEN, 0x400_0000, RW | Access::REMOTE_READ);
    fill(&src.buf, 0, LEN, 0x5a);
    fill(&back.buf, 0, LEN, 0x00);
    let w = read_wqe(a.pi, a.qpn, src.va, src.key.0, &[(back.va, LEN as u32, back.key.0)]);
    x.ring(&mut a, &w);
    let c = poll(&mut cq_x);
    assert_eq!(
        (c.opcode(), c.wqe_counter()),
        (0, 0),
        "{c:?}\nx: {:?}\ny: {:?}\nREAD REQUESTs: {:?}",
        x.model.counters(),
        y.model.counters(),
        reads.lock().unwrap()
    );
    assert!(bytes(&back.buf, 0, LEN) == bytes(&src.buf, 0, LEN), "the READ's data");
    assert_empty(&x.model, &cq_x);
    let r = reads.lock().unwrap().clone();
    r
}

/// Every re-issue of the READ after the first asks for the rest only: it starts at the first
/// packet `k` not yet received, with the address moved and the length cut by `k` MTUs (rxe
/// `req_retry`), and `k` never goes back. (`k` is 0 only while no response has arrived at
/// all, as when a sanitizer build stalls the first response past a timeout.)
fn assert_resumes(reads: &[(u32, u64, u32)], at_most: u32) {
    assert_eq!(reads[0], (SQ_PSN, 0x400_0000, LEN as u32));
    let (mut last, mut run) = (0, 0);
    for &(psn, addr, len) in &reads[1..] {
        let k = psn.wrapping_sub(SQ_PSN);
        assert!(k >= last && k <= at_most, "re-issued from packet {k}: {reads:?}");
        // Progress resets the retry count; without it, at most retry_cnt (7) re-issues.
        run = if k == last { run + 1 } else { 1 };
        assert!(run <= 7, "more than retry_cnt re-issues without progress: {reads:?}");
        last = k;
        let done = u64::from(k) * 1024;
        assert_eq!((addr, u64::from(len)), (0x400_0000 + done, LEN as u64 - done), "{reads:?}");
    }
}

/// One frame per 5 ms: the 196 responses take more than three local ACK timeouts (268 ms
/// each) in all, but never one without a response, so the READ goes out once where the host keeps
/// up. A host that stalls the engine past a timeout (a sanitizer build on a loaded machine)
/// may see a re-issue; it must then resume, not start over, and the data still arrive whole.
#[test]
fn a_slow_read_response_restarts_the_ack_timer_on_each_packet() {
    let reads = slow_read(Duration::from_millis(5), None);
    assert_resumes(&reads, NPKTS - 1);
}

/// A middle response lost: the READ is asked again from that PSN for the rest only, and
/// the data arrives whole. The responses still streaming after the gap keep the timer from
/// firing (they are responses, if not progress), and the replay (which the responder sends
/// after the rest of the first stream, as rxe does) makes progress from its first packet.
/// Before, the READ was asked whole each time and the replay's first packets were stale:
/// `RETRY_EXC_ERR`. (A stalled host may re-issue earlier, from before the gap; the replay
/// then brings the lost packet again.)
#[test]
fn a_lost_middle_read_response_is_asked_for_from_its_own_psn() {
    let lost = 60;
    assert!(lost < NPKTS);
    let reads = slow_read(Duration::from_micros(100), Some(SQ_PSN + lost));
    assert!(reads.len() >= 2, "the lost response was asked for again: {reads:?}");
    assert_resumes(&reads, lost);
}

/// Go-back-N of a WRITE of 20 packets whose sixth is lost: the responder NAKs the seventh
/// (PSN sequence error), and the requester resends from the sixth, not from the first
/// (rxe `req_retry` from `comp.psn`).
#[test]
fn a_partially_acknowledged_write_goes_back_to_the_lost_psn() {
    const WLEN: usize = 20 * 1024;
    let hub = Hub::with_limits(WIRE_MAX_FRAME, WIRE_QUEUE);
    let (gx, gy) = (gid(3), gid(4));
    let sent = Arc::new(Mutex::new(Vec::new()));
    let lose = SQ_PSN + 5;
    let px = LoseOnce {
        inner: hub.port(Mac(gx.mac)),
        lose: Some(lose),
        requests: true,
        sent: sent.clone(),
    };
    let cfg = |g: Gid| ModelConfig { gids: vec![g], ..Default::default() };
    let mut x = Env::with_model(Model::with_config(cfg(gx).with_port(px)).expect("model"));
    let mut y = Env::with_model(
        Model::with_config(cfg(gy).with_port(hub.port(Mac(gy.mac)))).expect("model"),
    );
    let mut cq_x = x.cq(7);
    let cq_y = y.cq(4);
    let mut a = x.qp(&cq_x, &cq_x, 7, None);
    let b = y.qp(&cq_y, &cq_y, 4, None);
    rts_with(&mut x.ctl, a.qpn, b.qpn, path_to(gy), (SQ_PSN, 0x20), 7, RW);
    rts_with(&mut y.ctl, b.qpn, a.qpn, path_to(gx), (0x20, SQ_PSN), 7, RW);
    let src = x.region(WLEN, 0x100_0000, RW);
    let dst = y.region(WLEN, 0x400_0000, RW);
    fill(&src.buf, 0, WLEN, 0x21);
    fill(&dst.buf, 0, WLEN, 0x00);
    let w = wqe(a.pi, a.qpn, 0x08, 0x08, 0, dst.va, dst.key.0, &[(src.va, WLEN as u32, src.key.0)]);
    x.ring(&mut a, &w);
    let c = poll(&mut cq_x);
    assert_eq!((c.opcode(), c.wqe_counter()), (0, 0), "{c:?} {:?}", x.model.counters());
    assert!(bytes(&dst.buf, 0, WLEN) == bytes(&src.buf, 0, WLEN), "the WRITE's data");
    let sent = sent.lock().unwrap().clone();
    let first: Vec<u32> = (SQ_PSN..SQ_PSN + 20).collect();
    assert_eq!(sent[..20], first[..], "the first pass");
    assert!(sent.len() > 20, "a retransmission: {sent:?}");
    assert!(sent[20..].iter().all(|&p| p >= lose), "nothing before the lost PSN again: {sent:?}");
    assert_eq!(sent[20], lose, "{sent:?}");
}

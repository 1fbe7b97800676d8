//! RoCE v2 frames from the model's builder, through a hub with capture taps, into a pcap
//! under the cargo target directory; then, if `tshark` is installed, Wireshark's dissectors
//! read it back: every frame must dissect as InfiniBand over RoCE v2 with our opcode, QP,
//! PSN and AckReq, with no malformed packet and no expert item at all, and the IPv4 header
//! checksums must verify. Where tshark is missing the dissection is reported NOT RUN on
//! stderr (set `RDMA_PMD_REQUIRE_TSHARK=1` to make that a failure).
//!
//! Wireshark 4.0's InfiniBand dissector shows the ICRC (`infiniband.invariant.crc`) but does
//! not verify it; the test compares the value shown with the one the model stored, and the
//! ICRC itself is checked against scapy's in the crate's unit tests. A UD datagram from QP 1
//! would be dissected as a MAD (which swallows the ICRC), so the UD frame here is not one.

use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::process::Command;

use rdma_pmd::Mac;
use rdma_pmd_mlx5_model::roce::bth::{BthRepr, Opcode};
use rdma_pmd_mlx5_model::roce::ethernet::VlanTag;
use rdma_pmd_mlx5_model::roce::ext::{Aeth, AtomicEth, Deth, ExtRepr, NakCode, Reth, Syndrome};
use rdma_pmd_mlx5_model::roce::packet::{bth, ipv4_gids};
use rdma_pmd_mlx5_model::roce::{FaultPlan, FaultPort, Hub, IpRepr, PcapTap, Port, RoceRepr};
use rdma_pmd_mlx5_model::roce::{RocePacket, ROCE_V2_PORT};

const A: Mac = Mac([0x02, 0x4d, 0, 0, 0, 0x0a]);
const B: Mac = Mac([0x02, 0x4d, 0, 0, 0, 0x0b]);

fn frames() -> Vec<(Vec<u8>, BthRepr)> {
    let (g4a, g4b) = ipv4_gids([192, 168, 7, 1].into(), [192, 168, 7, 2].into());
    let g6a = "fd00:7::1".parse::<Ipv6Addr>().unwrap().octets();
    let g6b = "fd00:7::2".parse::<Ipv6Addr>().unwrap().octets();
    let reth = Some(Reth { va: 0x7f00_0000_1000, rkey: 0x1234, dma_len: 2048 });
    let aeth = |s| Some(Aeth { syndrome: s, msn: 5 });
    let e = ExtRepr::default();
    let mut out = Vec::new();
    for (fam, (s, d)) in [(g4a, g4b), (g6a, g6b)].into_iter().enumerate() {
        for (i, (op, ext, len)) in [
            (Opcode::RC_SEND_ONLY, e, 13usize),
            (Opcode::RC_SEND_FIRST, e, 1024),
            (Opcode::RC_SEND_LAST_IMM, ExtRepr { immdt: Some(0xabcd), ..e }, 7),
            (Opcode::RC_WRITE_FIRST, ExtRepr { reth, ..e }, 1024),
            (Opcode::RC_WRITE_LAST, e, 1024),
            (Opcode::RC_WRITE_ONLY_IMM, ExtRepr { reth, immdt: Some(1), ..e }, 64),
            (Opcode::RC_READ_REQUEST, ExtRepr { reth, ..e }, 0),
            (
                Opcode::RC_READ_RESPONSE_ONLY,
                ExtRepr { aeth: aeth(Syndrome::Ack { credits: 31 }), ..e },
                100,
            ),
            (Opcode::RC_ACKNOWLEDGE, ExtRepr { aeth: aeth(Syndrome::Ack { credits: 31 }), ..e }, 0),
            (
                Opcode::RC_ACKNOWLEDGE,
                ExtRepr { aeth: aeth(Syndrome::RnrNak { timer: 14 }), ..e },
                0,
            ),
            (
                Opcode::RC_ACKNOWLEDGE,
                ExtRepr { aeth: aeth(Syndrome::Nak(NakCode::PsnSequence)), ..e },
                0,
            ),
            (
                Opcode::RC_FETCH_ADD,
                ExtRepr {
                    atomic_eth: Some(AtomicEth { va: 0x1000, rkey: 9, swap_add: 1, compare: 0 }),
                    ..e
                },
                0,
            ),
            (
                Opcode::RC_ATOMIC_ACKNOWLEDGE,
                ExtRepr { aeth: aeth(Syndrome::Ack { credits: 31 }), atomic_ack: Some(41), ..e },
                0,
            ),
            (
                Opcode::UD_SEND_ONLY,
                ExtRepr { deth: Some(Deth { qkey: 0x1111_2222, src_qp: 0x33 }), ..e },
                256,
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let b = BthRepr { ack_req: i % 2 == 0, ..bth(op, 0x100 + i as u32, 1000 + i as u32) };
            let r = RoceRepr {
                dst_mac: B,
                src_mac: A,
                vlan: (i == 3).then_some(VlanTag { pcp: 3, dei: false, vid: 42 }),
                ip: IpRepr::between(s, d, 0x68, 64),
                udp_src_port: 0xc000 | (fam * 100 + i) as u16,
                bth: b,
                ext,
            };
            let payload: Vec<u8> = (0..len).map(|k| (k * 7 + i) as u8).collect();
            out.push((r.to_frame(&payload).unwrap(), b));
        }
    }
    out
}

fn pcap_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Send every frame A → B through taps on both ports; the pcap holds each frame twice.
fn capture(name: &str) -> (PathBuf, Vec<(Vec<u8>, BthRepr)>) {
    let path = pcap_path(name);
    let pcap = PcapTap::<rdma_pmd_mlx5_model::roce::HubPort>::shared(&path).unwrap();
    let hub = Hub::with_limits(9000, 1024);
    let mut a = PcapTap::new(hub.port(A), pcap.clone());
    let mut b = PcapTap::new(hub.port(B), pcap.clone());
    let fs = frames();
    for (f, _) in &fs {
        a.send(f).unwrap();
        let got = b.recv().unwrap().expect("delivered");
        assert_eq!(&got, f);
        RocePacket::parse(&got).unwrap();
    }
    assert_eq!(a.error(), None);
    assert_eq!(pcap.lock().unwrap().frames(), 2 * fs.len() as u64);
    (path, fs)
}

#[test]
fn pcap_file_has_every_frame_sent_and_received() {
    let (path, fs) = capture("roce-frames-raw.pcap");
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
    assert_eq!(u32::from_le_bytes(bytes[20..24].try_into().unwrap()), 1);
    // Walk the records: each frame, sent then received.
    let mut off = 24;
    let mut seen = Vec::new();
    while off < bytes.len() {
        let incl = u32::from_le_bytes(bytes[off + 8..off + 12].try_into().unwrap()) as usize;
        let orig = u32::from_le_bytes(bytes[off + 12..off + 16].try_into().unwrap()) as usize;
        assert_eq!(incl, orig);
        seen.push(bytes[off + 16..off + 16 + incl].to_vec());
        off += 16 + incl;
    }
    assert_eq!(off, bytes.len());
    let want: Vec<Vec<u8>> = fs.iter().flat_map(|(f, _)| [f.clone(), f.clone()]).collect();
    assert_eq!(seen, want);
}

#[test]
fn faulted_frames_are_captured_as_they_left() {
    let path = pcap_path("roce-frames-faulted.pcap");
    let pcap = PcapTap::<rdma_pmd_mlx5_model::roce::HubPort>::shared(&path).unwrap();
    let hub = Hub::with_limits(9000, 1024);
    // The tap sits under the fault port: it records what went on the wire.
    let mut a =
        FaultPort::new(PcapTap::new(hub.port(A), pcap.clone()), FaultPlan::uniform(250_000), 5);
    let mut b = hub.port(B);
    for (f, _) in frames() {
        a.send(&f).unwrap();
    }
    a.flush().unwrap();
    let c = a.counts();
    assert_eq!(pcap.lock().unwrap().frames(), c.forwarded);
    let mut bad_icrc = 0;
    while let Some(f) = b.recv().unwrap() {
        if let Err(rdma_pmd_mlx5_model::roce::Malformed::Icrc { .. }) = RocePacket::parse(&f) {
            bad_icrc += 1;
        }
    }
    assert!(bad_icrc > 0 && bad_icrc as u64 <= c.corrupted + c.duplicated);
}

fn tshark() -> Option<String> {
    let out = Command::new("tshark").arg("--version").output().ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("tshark").to_string()
    })
}

#[test]
fn tshark_dissects_every_frame_cleanly() {
    let Some(version) = tshark() else {
        eprintln!("*** NOT RUN: tshark dissection: tshark not found (apt-get install tshark) ***");
        assert!(
            std::env::var_os("RDMA_PMD_REQUIRE_TSHARK").is_none(),
            "RDMA_PMD_REQUIRE_TSHARK is set but tshark is missing"
        );
        return;
    };
    eprintln!("dissecting with {version}");
    let (path, fs) = capture("roce-frames-tshark.pcap");
    let fields = [
        "frame.number",
        "_ws.malformed",
        "_ws.expert.severity",
        "_ws.expert.message",
        "ip.checksum.status",
        "udp.dstport",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.bth.a",
        "infiniband.invariant.crc",
    ];
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(&path).args(["-n", "-o", "ip.check_checksum:TRUE", "-T", "fields"]);
    // rxe sends UDP checksum 0 over IPv6 too (rxe_net.c prepare_udp_hdr) and its receive
    // socket accepts it (no use_udp6_rx_checksums: RFC 6935 zero checksums for tunnels);
    // Wireshark calls that an error unless told to ignore it.
    cmd.args(["-o", "udp.ignore_ipv6_zero_checksum:TRUE"]);
    cmd.args(["-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=;"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "tshark failed: {}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Vec<&str>> = stdout.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), 2 * fs.len(), "tshark saw {} frames:\n{stdout}", rows.len());
    for (i, row) in rows.iter().enumerate() {
        let (frame, b) = &fs[i / 2];
        let ctx = format!("frame {}: {row:?}", i + 1);
        assert_eq!(row.len(), fields.len(), "{ctx}");
        assert!(row[1].is_empty(), "malformed: {ctx}");
        // No expert item at all (not even a note or a warning).
        assert!(row[2].is_empty() && row[3].is_empty(), "expert item: {ctx}");
        // IPv4: checksum status 1 = PROTO_CHECKSUM_E_GOOD (epan/proto.h); IPv6 has none.
        let p = RocePacket::parse(frame).unwrap();
        let want_status = match p.ip {
            IpRepr::V4(_) => "1",
            IpRepr::V6(_) => "",
        };
        assert_eq!(row[4], want_status, "ip checksum: {ctx}");
        assert_eq!(row[5], ROCE_V2_PORT.to_string(), "{ctx}");
        assert_eq!(row[6], b.opcode.0.to_string(), "opcode: {ctx}");
        assert_eq!(row[7], format!("{:#08x}", b.dest_qp), "destqp: {ctx}");
        assert_eq!(row[8], b.psn.to_string(), "psn: {ctx}");
        assert_eq!(row[9], u8::from(b.ack_req).to_string(), "ackreq: {ctx}");
        // tshark shows the four ICRC bytes read big-endian.
        let icrc_shown = u32::from_be_bytes(p.icrc.to_le_bytes());
        assert_eq!(row[10], format!("{icrc_shown:#010x}"), "icrc: {ctx}");
    }
}

/// The negative control: the same dissection finds a bad IPv4 checksum, so a clean result
/// above means something.
#[test]
fn tshark_flags_a_bad_ipv4_checksum() {
    if tshark().is_none() {
        eprintln!("*** NOT RUN: tshark negative control: tshark not found ***");
        return;
    }
    let path = pcap_path("roce-frames-bad-ipv4-checksum.pcap");
    let mut w = rdma_pmd_mlx5_model::roce::PcapWriter::create(&path).unwrap();
    let mut f = frames().remove(0).0;
    f[14 + 10] ^= 0xff; // the IPv4 header checksum
    w.write_now(&f).unwrap();
    w.flush().unwrap();
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-n", "-o", "ip.check_checksum:TRUE", "-T", "fields", "-e", "ip.checksum.status"])
        .args(["-e", "_ws.expert.severity"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let row: Vec<&str> = s.trim_end().split('\t').collect();
    assert_eq!(row[0], "0", "PROTO_CHECKSUM_E_BAD expected: {s:?}");
    assert!(row[1].split(',').any(|v| v == "8388608"), "an error-level expert item: {s:?}");
}

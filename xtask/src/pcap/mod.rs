//! The wire tier's captures: the guest prints each pcap on the console ([`DUMP_PCAPS`]), the host
//! saves them ([`save_pcaps`]) with the frames a test corrupted on purpose ([`injected`]), then
//! checks every RoCE v2 frame's ICRC itself ([`icrc_ok`], [`icrc`]) and has `tshark` dissect
//! every frame ([`dissect`]).

mod icrc;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util;

/// After the tests: each pcap between markers, gzipped and in base64, with the kernel's console
/// messages off so that none lands inside one.
pub const DUMP_PCAPS: &str = r#"
dmesg -n 1
for f in /t/pcap/*.pcap; do
  [ -f "$f" ] || continue
  echo "XTASK-PCAP-BEGIN ${f##*/}"
  gzip -c "$f" | base64
  echo "XTASK-PCAP-END"
  [ -f "$f.injected" ] && echo "XTASK-PCAP-INJECTED ${f##*/}" $(cat "$f.injected")
done
"#;

/// The capture frame numbers (from 1) a test's fault schedule corrupted on purpose, by pcap
/// name: the guest prints `XTASK-PCAP-INJECTED <name> <n>...` from the `<name>.injected` file
/// the test wrote next to its capture (`drivers/mlx5/tests/wire.rs`, `Marked`).
pub fn injected(out: &str) -> BTreeMap<String, BTreeSet<u64>> {
    let mut m = BTreeMap::new();
    for l in out.lines() {
        let Some(rest) = l.trim().strip_prefix("XTASK-PCAP-INJECTED ") else { continue };
        let mut w = rest.split_whitespace();
        let Some(name) = w.next() else { continue };
        let set: &mut BTreeSet<u64> = m.entry(name.to_string()).or_default();
        set.extend(w.filter_map(|n| n.parse::<u64>().ok()));
    }
    m
}

/// The pcaps the guest printed, written under `dir`; returns their paths.
pub fn save_pcaps(out: &str, dir: &Path) -> Vec<PathBuf> {
    let _ = std::fs::create_dir_all(dir);
    let mut saved = Vec::new();
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        let Some(name) = l.trim().strip_prefix("XTASK-PCAP-BEGIN ") else { continue };
        let b64: String = lines
            .by_ref()
            .take_while(|l| l.trim() != "XTASK-PCAP-END")
            .map(|l| l.trim())
            .collect::<Vec<_>>()
            .join("\n");
        let path = dir.join(name);
        let b64_path = dir.join(format!("{name}.gz.b64"));
        let ok = std::fs::write(&b64_path, b64).is_ok()
            && Command::new("sh")
                .arg("-c")
                .arg("base64 -d \"$1\" | gzip -dc > \"$2\"")
                .arg("sh")
                .arg(&b64_path)
                .arg(&path)
                .status()
                .is_ok_and(|s| s.success());
        let _ = std::fs::remove_file(&b64_path);
        if ok {
            saved.push(path);
        } else {
            eprintln!("xtask: wire: could not decode the pcap {name}");
        }
    }
    saved
}

/// The tier's own ICRC check of one capture ([`icrc`]; `tshark` checks none): true when the
/// RoCE v2 frames with a bad ICRC are exactly the frames listed as corrupted on purpose.
pub fn icrc_ok(pcap: &Path, injected: &BTreeSet<u64>) -> bool {
    let Some((bad, checked)) = std::fs::read(pcap).ok().and_then(|b| icrc::bad_frames(&b)) else {
        eprintln!("xtask: wire: {} is not a pcap", pcap.display());
        return false;
    };
    let bad: BTreeSet<u64> = bad.into_iter().collect();
    let unexpected: Vec<_> = bad.difference(injected).collect();
    let missing: Vec<_> = injected.difference(&bad).collect();
    println!(
        "wire: {}: ICRC of {checked} RoCE frames checked, {} bad, {} of them corrupted on purpose",
        pcap.display(),
        bad.len(),
        bad.len() - unexpected.len()
    );
    if !unexpected.is_empty() {
        eprintln!("xtask: wire: bad ICRC not injected by the test, frames {unexpected:?}");
    }
    if !missing.is_empty() {
        eprintln!("xtask: wire: frames listed as corrupted with a good ICRC: {missing:?}");
    }
    unexpected.is_empty() && missing.is_empty()
}

/// `tshark` ([`crate::tiers::prereq`] installs it for this tier).
pub fn tshark() -> bool {
    util::have("tshark")
}

/// tshark's arguments for our captures: no peer here speaks a protocol over RDMA, but
/// tshark's InfiniBand dissector lets heuristic sub-dissectors claim any SEND payload (and
/// CM private data) they like, and they throw "Malformed Packet" on ours: RPC-over-RDMA on a
/// 1-byte SEND, and `eth_over_ib`, which reads a 1-2 byte payload and its zero pad as an
/// EtherType and a reserved word and hands the rest to VLAN or LAPB. With every heuristic on
/// InfiniBand payloads and CM private data off (the names `tshark -G heuristic-decodes`
/// lists, as Debian 12's tshark 4.0 registers them), a payload is data.
const TSHARK_ARGS: &[&str] = &[
    "--disable-protocol",
    "rpcordma",
    "--disable-heuristic",
    "eth_over_ib",
    "--disable-heuristic",
    "mellanox_eoib",
    "--disable-heuristic",
    "rpcrdma_infiniband",
    "--disable-heuristic",
    "fc_infiniband",
    "--disable-heuristic",
    "iser_infiniband",
    "--disable-heuristic",
    "iser_ib_private",
    "--disable-heuristic",
    "lnet_ib",
    "--disable-heuristic",
    "lnet_ib_cm_private",
    "--disable-heuristic",
    "nvme_rdma_cm_private",
    "--disable-heuristic",
    "sdp_infiniband",
    "--disable-heuristic",
    "sdp_ib_private",
    "--disable-heuristic",
    "smb_direct_infiniband",
    "--disable-heuristic",
    "smcr_infiniband",
];

/// Dissect one capture: true when every frame dissects and none is malformed, except the
/// frames in `injected` (corrupted on purpose by the test's fault schedule), which are
/// tolerated and counted.
pub fn dissect(pcap: &Path, injected: &BTreeSet<u64>) -> bool {
    let all = Command::new("tshark")
        .args(TSHARK_ARGS)
        .arg("-r")
        .arg(pcap)
        .args(["-T", "fields", "-e", "frame.number"])
        .output();
    let bad = Command::new("tshark")
        .args(TSHARK_ARGS)
        .arg("-r")
        .arg(pcap)
        .args(["-Y", "_ws.malformed || _ws.expert.severity >= error"])
        .output();
    match (all, bad) {
        (Ok(all), Ok(bad)) if all.status.success() && bad.status.success() => {
            let frames = String::from_utf8_lossy(&all.stdout).lines().count();
            let bad_text = String::from_utf8_lossy(&bad.stdout).into_owned();
            let (mut n_bad, mut tolerated) = (0, 0);
            // Each summary line starts with the frame number.
            for l in bad_text.lines() {
                let n = l.split_whitespace().next().and_then(|n| n.parse::<u64>().ok());
                if n.is_some_and(|n| injected.contains(&n)) {
                    tolerated += 1;
                } else {
                    n_bad += 1;
                    eprintln!("{l}");
                }
            }
            println!(
                "wire: {}: {frames} frames, {n_bad} malformed; {} corrupted on purpose, {tolerated} of them flagged",
                pcap.display(),
                injected.len()
            );
            frames > 0 && n_bad == 0
        }
        _ => {
            eprintln!("xtask: wire: tshark could not read {}", pcap.display());
            false
        }
    }
}

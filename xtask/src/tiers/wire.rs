//! Tier `wire`: the project's RoCE v2 frames on a real Ethernet wire, judged by the Linux
//! kernel's rdma_rxe and rdma-core's unmodified programs.
//!
//! The guest ([`crate::guests::wire`]: the rxe guest's packages and kernel) has two veth pairs
//! into a network namespace `peer`: the wire, `wm` (ours, in the initial namespace, with no address:
//! what arrives on it belongs to the model's `AF_PACKET` socket, MAC and IPv4 address 10.3.0.1
//! included) to `wp` (10.3.0.2, with the rxe device `rxep`); and a control link `cm` (10.9.0.1)
//! to `cp` (10.9.0.2) for the TCP exchanges the pingpong programs make before they talk RoCE.
//! First the project's C verbs peer (`examples/c/wire_peer.c`) runs its plan between two more
//! rxe devices (namespaces `sa` and `sb`), so that it is known good before it judges us. Then the
//! tests, one at a time, each saving a pcap of the frames on our end: the model's packet layer
//! alone (`tests/mlx5-model/tests/wire_rxe.rs`: ARP with the kernel, `ibv_ud_pingpong`), and the
//! mlx5 driver on the model (`drivers/mlx5/tests/wire.rs`: addresses by the driver's own ARP;
//! `ibv_rc_pingpong` in both roles, the C peer's plan in both directions and under a seeded
//! fault schedule on our side of the wire, both ways, a wrong rkey, a peer cut off until retry
//! exceeded). Their names start with `on_wire_`, which the `model` tier skips. The guest
//! prints the pcaps, gzipped and in base64, on the console, and they land in
//! `target/wire/pcap/`. Where the host has `tshark` (`cargo xtask test` installs it when
//! running as root), every frame must dissect with no malformed packet — except the frames a test's
//! fault schedule corrupted on purpose: the tests tap the wire after the schedule (so a capture
//! holds what really went out, dropped frames absent, duplicates twice, corrupted ones as
//! corrupted) and write the capture numbers of the frames they corrupted next to it
//! (`<name>.pcap.injected`, checked against the model's own ICRCs first); those, and only
//! those, may fail to dissect. `tshark` checks no ICRC, so the tier checks every RoCE v2
//! frame's itself ([`crate::pcap`]): the bad ones must be exactly the listed ones.
//!
//! Not run natively on a host with rxe: the tier needs a namespace and a veth pair it owns.
//!
//! Then the connection manager against the kernel's rdma_cm ([`CM_TESTS`]): the project's
//! librdmacm program `examples/c/cm_writev.c` against itself in `sa`/`sb` first, the CM tests
//! (`rping`, `rdma_server`/`rdma_client`, `ucmatose`, `cm_writev`, REJ, MRA, timeout), and the
//! README's `cm_rping` walkthrough as written.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::Outcome;

use crate::guests::wire::{build_c_peer, NET_SETUP};
use crate::guests::{self, rxe};
use crate::pcap::{self, DUMP_PCAPS};
use crate::util;
use crate::vm::GuestFile;

/// The C peer checked against itself first (rxe to rxe, namespaces `sa` and `sb`): the plan
/// as target and as initiator, and the wrong-rkey case, so that a failure against the driver
/// is the driver's.
const C_PEER_SELF_CHECK: &str = r#"
ga=$(gidx_of rxesa 0000:0000:0000:0000:0000:ffff:0a04:0001)
gb=$(gidx_of rxesb 0000:0000:0000:0000:0000:ffff:0a04:0002)
for mode in plan bad-rkey; do
  extra=; [ $mode = bad-rkey ] && extra=--bad-rkey
  ip netns exec sa timeout 120 /t/wire_peer -d rxesa -g $ga -r target -p 18700 &
  ip netns exec sb timeout 120 /t/wire_peer -d rxesb -g $gb -r initiator -p 18700 $extra 10.4.0.1
  i=$?
  wait $!
  t=$?
  echo "XTASK-WIRE-PEER-SELF $mode initiator=$i target=$t"
done
"#;

/// The tests' view of [`NET_SETUP`].
const TEST_ENV: &str = "export WIRE_IF=wm WIRE_ADDR=10.3.0.1 WIRE_PEER=10.3.0.2 \
                        WIRE_PEER_NETNS=/run/netns/peer WIRE_PEER_DEV=rxep \
                        WIRE_CTL_PEER=10.9.0.2 WIRE_CTL_ADDR=10.9.0.1 WIRE_PCAP_DIR=/t/pcap RUST_BACKTRACE=1";

/// The connection manager against the kernel's rdma_cm and librdmacm's programs
/// (`drivers/mlx5/tests/wire_cm.rs`): its test target.
const CM_TESTS: &str = "wire_cm";

/// `examples/c/cm_writev.c` (librdmacm's `rdma_post_writev`) against itself first, rxe to
/// rxe in namespaces `sa` and `sb`, as the C peer is, before it judges our CM.
const CM_WRITEV_SELF_CHECK: &str = r#"
ip netns exec sa timeout 60 /t/cm_writev -s 10.4.0.1 -p 7472 &
ip netns exec sb timeout 60 /t/cm_writev -c 10.4.0.1 -p 7472
c=$?
wait $!
s=$?
echo "XTASK-WIRE-CM-SELF client=$c server=$s"
"#;

/// Compile `examples/c/cm_writev.c` against the host's librdmacm; returns the binary.
fn build_cm_writev() -> Result<PathBuf, String> {
    let root = util::root();
    let out = root.join("target").join("wire").join("cm_writev");
    let ok = util::run(
        Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&out)
            .arg(root.join("examples/c/cm_writev.c"))
            .args(["-lrdmacm", "-libverbs"]),
    );
    if ok {
        Ok(out)
    } else {
        Err("compiling examples/c/cm_writev.c failed".into())
    }
}

/// The README's walkthrough as written: `rping -s` on rxe, `cm_rping` (rping's client on the
/// mlx5 driver, `examples/src/bin/cm_rping.rs`) on our end of the wire.
const CM_RPING_WALKTHROUGH: &str = r#"
ip -n peer neigh del 10.3.0.1 dev wp 2>/dev/null
ip netns exec peer timeout 60 rping -s -a 10.3.0.2 -v -V -C 10 > /t/rping-s.out 2>&1 &
timeout 60 /t/cm_rping wm 10.3.0.1 10.3.0.2 10 64
c=$?
wait $!
s=$?
cat /t/rping-s.out
# rping's teardown race (rdma-core#1622, fixed after the guest's rping): a failure exit after
# a finished run.
[ $s -ne 0 ] && grep -qx 'rdma_get_cm_event: Bad file descriptor' /t/rping-s.out && s=0
echo "XTASK-WIRE-CM-RPING client=$c server=$s pings=$(grep -c '^server ping data: rdma-ping-' /t/rping-s.out)"
"#;

/// Build the `cm_rping` example; returns the binary.
fn build_cm_rping() -> Result<PathBuf, String> {
    let out = util::cargo()
        .args(["build", "--release", "--message-format=json-render-diagnostics"])
        .args(["-p", "rdma-pmd-examples", "--no-default-features", "--bin", "cm_rping"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo: {e}"))?;
    if !out.status.success() {
        return Err("building cm_rping failed".into());
    }
    util::executable_of(&String::from_utf8_lossy(&out.stdout), "cm_rping")
        .ok_or_else(|| "cargo reported no cm_rping executable".into())
}

/// The walkthrough's verdict: (passed, failed).
fn cm_rping_walkthrough(out: &str) -> (u32, u32) {
    match out.lines().find(|l| l.starts_with("XTASK-WIRE-CM-RPING ")) {
        Some(l) if l.ends_with("client=0 server=0 pings=10") => (1, 0),
        l => {
            eprintln!("xtask: wire: the README's rping walkthrough failed: {l:?}");
            (0, 1)
        }
    }
}

/// The self-check's verdict: (passed, failed).
fn cm_self_check(out: &str) -> (u32, u32) {
    match out.lines().find(|l| l.starts_with("XTASK-WIRE-CM-SELF ")) {
        Some(l) if l.ends_with("client=0 server=0") => (1, 0),
        Some(l) => {
            eprintln!("xtask: wire: cm_writev failed against itself: {l}");
            (0, 1)
        }
        None => {
            eprintln!("xtask: wire: cm_writev's self-check did not run");
            (0, 1)
        }
    }
}

/// `script` with the CM tests run after the driver's, before the pcaps are printed.
fn with_cm_tests(script: String) -> String {
    let cm = format!(
        "{CM_WRITEV_SELF_CHECK}{}{CM_RPING_WALKTHROUGH}",
        guests::per_test_script("/t/wire-cm-tests", "")
    );
    match script.rfind(DUMP_PCAPS) {
        Some(i) => format!("{}{cm}{}", &script[..i], &script[i..]),
        None => format!("{script}{cm}"),
    }
}

fn build_tests() -> Result<Vec<PathBuf>, String> {
    // Release: the model computes an ICRC per frame and moves MiB-sized messages under TCG.
    let out = util::cargo()
        .args(["test", "--release", "--no-run", "--message-format=json-render-diagnostics"])
        .args(["-p", "rdma-pmd-mlx5-model", "--test", "wire_rxe"])
        .args(["-p", "rdma-pmd-mlx5", "--test", "wire"])
        .args(["--test", CM_TESTS])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo: {e}"))?;
    if !out.status.success() {
        return Err("building the wire tests failed".into());
    }
    let json = String::from_utf8_lossy(&out.stdout);
    ["wire_rxe", "wire", CM_TESTS]
        .iter()
        .map(|t| {
            util::executable_of(&json, t)
                .ok_or_else(|| format!("cargo reported no {t} test executable"))
        })
        .collect()
}

pub fn run() -> Outcome {
    let bins = match build_tests() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("xtask: wire: {e}");
            return Outcome::check(false);
        }
    };
    if let Some(why) = rxe::vm_unavailable() {
        eprintln!("\n!!!! xtask: wire tier SKIPPED: {why} !!!!\n");
        return Outcome::skip(why);
    }
    let peer = match build_c_peer() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: wire: {e}");
            return Outcome::check(false);
        }
    };
    let cm_writev = match build_cm_writev() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: wire: {e}");
            return Outcome::check(false);
        }
    };
    let cm_rping = match build_cm_rping() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: wire: {e}");
            return Outcome::check(false);
        }
    };
    let script = format!(
        "{NET_SETUP}\n{C_PEER_SELF_CHECK}\n{TEST_ENV}\n{}{}{DUMP_PCAPS}",
        guests::per_test_script("/t/wire-model-tests", ""),
        guests::per_test_script("/t/wire-driver-tests", "")
    );
    let script = with_cm_tests(script);
    let files = vec![
        GuestFile::dynamic(&bins[0], "/t/wire-model-tests"),
        GuestFile::dynamic(&bins[1], "/t/wire-driver-tests"),
        GuestFile::dynamic(&peer, "/t/wire_peer"),
        GuestFile::dynamic(&bins[2], "/t/wire-cm-tests"),
        GuestFile::dynamic(&cm_writev, "/t/cm_writev"),
        GuestFile::dynamic(&cm_rping, "/t/cm_rping"),
    ];
    let g = rxe::guest_without_net("wire", files, script);
    let serial = match g.boot(Duration::from_secs(900)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("xtask: wire: {e}");
            return Outcome::check(false);
        }
    };
    let out = serial.script_output();
    let (mut passed, mut failed) = guests::count(out);
    let self_checks: Vec<&str> =
        out.lines().filter(|l| l.starts_with("XTASK-WIRE-PEER-SELF ")).collect();
    for l in &self_checks {
        if l.ends_with("initiator=0 target=0") {
            passed += 1;
        } else {
            eprintln!("xtask: wire: the C peer failed against itself: {l}");
            failed += 1;
        }
    }
    for (p, f) in [cm_self_check(out), cm_rping_walkthrough(out)] {
        (passed, failed) = (passed + p, failed + f);
    }
    if self_checks.len() != 2 {
        eprintln!("xtask: wire: the C peer's self-check did not run");
        failed += 1;
    }
    if serial.exit.is_none() || passed + failed == 0 {
        eprintln!("xtask: wire: the guest did not finish (timed out: {})", serial.timed_out);
        failed += 1;
    }
    let pcaps = pcap::save_pcaps(out, &util::root().join("target").join("wire").join("pcap"));
    let injected = pcap::injected(out);
    let none = BTreeSet::new();
    let (mut dissected, mut bad) = (0u32, 0u32);
    let (mut icrc_clean, mut icrc_bad) = (0u32, 0u32);
    for p in &pcaps {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if pcap::icrc_ok(p, injected.get(&name).unwrap_or(&none)) {
            icrc_clean += 1;
        } else {
            icrc_bad += 1;
        }
    }
    if pcaps.is_empty() {
        eprintln!("xtask: wire: the guest returned no capture");
        bad += 1;
    } else if pcap::tshark() {
        for p in &pcaps {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if pcap::dissect(p, injected.get(&name).unwrap_or(&none)) {
                dissected += 1;
            } else {
                bad += 1;
            }
        }
    } else {
        eprintln!("xtask: wire: no tshark here; the captures were NOT dissected");
    }
    println!(
        "wire: {passed} passed, {failed} failed in the {:?} guest ({:.0?}); {} captures, {dissected} dissected clean, {bad} not; ICRCs right in {icrc_clean} (but for the injected), wrong in {icrc_bad}",
        serial.accel,
        serial.elapsed,
        pcaps.len()
    );
    Outcome {
        passed: passed + dissected + icrc_clean,
        failed: failed + bad + icrc_bad,
        skipped: None,
    }
}

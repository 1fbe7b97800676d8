//! Tier `rxe`: the rxe backend against Linux soft-RoCE.
//!
//! Where `rdma link` already shows an rxe device the tests run natively. Otherwise they run in
//! the rxe guest ([`crate::guests::rxe`]): one rxe device on a dummy netdev for the single-host
//! tests, and two network namespaces joined by a veth pair, each end with its own rxe device,
//! for the two-host test.

use std::time::Duration;

use super::Outcome;
use crate::guests::rxe::{guest, native_rxe, test_env, vm_unavailable};
use crate::guests::{count, per_test_script};
use crate::util;
use crate::vm::GuestFile;

/// Build the device test binary on the host (`cargo test --no-run`); returns its path.
fn build_tests() -> Result<std::path::PathBuf, String> {
    let out = util::cargo()
        .args(["test", "-p", "rdma-pmd-rxe", "--test", "rxe", "--no-run"])
        .args(["--message-format=json-render-diagnostics"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo: {e}"))?;
    if !out.status.success() {
        return Err("building the rxe tests failed".into());
    }
    util::executable_of(&String::from_utf8_lossy(&out.stdout), "rxe")
        .ok_or_else(|| "cargo reported no rxe test executable".into())
}

pub fn run() -> Outcome {
    let bin = match build_tests() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("xtask: rxe: {e}");
            return Outcome::check(false);
        }
    };
    if let Some((dev, ip)) = native_rxe() {
        eprintln!("xtask: rxe: running natively on {dev} ({ip})");
        let (_, out) = util::run_capture(
            std::process::Command::new(&bin)
                .args(["--ignored", "--test-threads=1", "--skip", "two_namespaces"])
                .env("RXE_ADDR", &ip),
        );
        let (passed, failed) = count(&out);
        return Outcome { passed, failed: failed.max((passed == 0) as u32), skipped: None };
    }
    if let Some(why) = vm_unavailable() {
        eprintln!("\n!!!! xtask: rxe tier SKIPPED: {why} !!!!\n");
        return Outcome::skip(why);
    }
    let script = format!("{}\n{}{NS_REPORT}", test_env(), per_test_script("/t/rxe-tests", ""));
    let g = guest(vec![GuestFile::dynamic(&bin, "/t/rxe-tests")], script);
    match g.boot(Duration::from_secs(900)) {
        Ok(s) => {
            let (passed, mut failed) = count(s.script_output());
            if s.exit.is_none() || passed + failed == 0 {
                eprintln!("xtask: rxe: the guest did not finish (timed out: {})", s.timed_out);
                failed += 1;
            }
            println!(
                "rxe: {passed} passed, {failed} failed in the {:?} guest ({:.0?})",
                s.accel, s.elapsed
            );
            Outcome { passed, failed, skipped: None }
        }
        Err(e) => {
            eprintln!("xtask: rxe: {e}");
            Outcome::check(false)
        }
    }
}

/// Evidence for the two-namespace case: where rxe's RoCE v2 UDP socket (port 4791 = 0x12B7)
/// exists, and how many UDP datagrams each namespace dropped for want of a socket.
const NS_REPORT: &str = r#"
for ns in root a b; do
  if [ $ns = root ]; then x=""; else x="ip netns exec $ns"; fi
  echo "netns $ns: udp sockets on :12B7: $($x cat /proc/net/udp | grep -c ':12B7 ')" \
       "udp NoPorts: $($x cat /proc/net/snmp | awk '/^Udp:/ {n++; if (n == 2) print $3}')"
done
ip -n a -s link show va | sed -n '3,6p'
ip -n b -s link show vb | sed -n '3,6p'
dmesg | grep -i 'rxe\|no route' | tail -n 5
"#;

//! Tier `kernel`: the device model on a real (emulated) PCI bus, judged by the Linux kernel's
//! own `mlx5_core` and `mlx5_ib`.
//!
//! The model runs in a host process, `mlx5-vfio-user` (built from `tests/mlx5-vfio-user`), which
//! serves it over vfio-user; QEMU 11.1 (provisioned privately, see `crate::vm`) connects with
//! `-device vfio-user-pci` and the guest sees a ConnectX PCI function. Guest RAM is a shared
//! memfd so that the server can map it for DMA. The guest runs Debian trixie's 6.12 kernel (the
//! series is pinned; the exact version is printed) with bookworm's rdma-core userspace, and
//! `/init` checks, one `kernel-check: PASS|FAIL <name>` line each:
//!
//! * `device`: the PCI function (vendor 0x15b3) is on the bus;
//! * `probe`: `mlx5_core` probed it (the driver link) and `mlx5_ib` registered `mlx5_*`;
//! * `port1`: port 1 opened: its sysfs directory, and the kernel's own GSI QP (QP 1) and the CQ
//!   ib_mad made for it, as `rdma resource` lists them (both created on the model);
//! * `devinfo`: `ibv_devinfo -v` (rdma-core's mlx5 provider) lists the device with vendor_id
//!   0x02c9, vendor_part_id 4119 and the model's firmware version;
//! * `verbs`: `tests/kernel/verbs_objects.c` allocates a PD, registers an MR, creates two CQs
//!   and an RC QP through the mlx5 provider (user rings in guest memory, doorbells through the
//!   mapped UAR), then a QP whose buffer a parent domain's allocator places 1 KiB into a page
//!   (the kernel sends `page_offset`), destroys them, each step checked;
//! * `unbind`: unbinding `mlx5_core` removes the IB device and the driver link;
//! * `dmesg`: no mlx5 error or warning, no `WARNING:` and no `BUG` beyond the committed
//!   allow-list `tests/kernel/dmesg-allow.txt` (each regex with its reason above it).
//!
//! and on the host, from the server's summary after QEMU disconnected:
//!
//! * `server`: it exited 0 by itself, with its summary (`mlx5-vfio-user: summary end`);
//! * `pages`: every firmware page the kernel gave came back: the summary line that names pages
//!   (e.g. `mlx5-vfio-user: fw pages given N taken M`; `returned` also read) has N > 0, N == M.
//!
//! The tier fails if any check fails and names it; on failure the guest's mlx5 kernel log is
//! printed in full. Run it alone with `cargo xtask test --tier kernel` (`cargo xtask setup
//! --tier kernel` only provisions); `RDMA_PMD_KERNEL_SERVER=PATH` runs a prebuilt server
//! instead of building `tests/mlx5-vfio-user`.
//!
//! Cost, measured on this project's 2-core machine (TCG, 2 vCPUs): the guest reaches `/init` in
//! about 11 s and powers off 18-25 s after QEMU starts when the probe stops early (the model
//! without QUERY_ADAPTER) or no device is present; the tier then takes about 35 s with
//! everything cached. A full bring-up adds the kernel's commands at TCG speed (not yet
//! measured). The first run also provisions QEMU (about 40 s, 69 packages) and the kernel.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::Outcome;
use crate::util;
use crate::vm::{self, Companion, Emulator, Guest, GuestFile, KernelSource, Serial};

/// What the model advertises and `ibv_devinfo` must show (the model's defaults:
/// `tests/mlx5-model/src/fw/mod.rs` `FwConfig::default`, and the server's PCI device ID
/// 0x1017, ConnectX-5, from the kernel's `mlx5_core_pci_table`).
const VENDOR_ID: &str = "0x02c9";
const VENDOR_PART_ID: &str = "4119";
const FW_VER: &str = "16.35.1012";

/// Loaded in order (with their `modules.dep` dependencies).
const MODULES: &[&str] = &["mlx5_core", "mlx5_ib", "ib_uverbs"];

/// Guest userspace (bookworm): the verbs library, the mlx5 provider, `ibv_devinfo`, `rdma`.
const PACKAGES: &[&str] = &["rdma-core", "ibverbs-providers", "ibverbs-utils", "iproute2"];

/// Every check, in the order they are reported; one missing from the output counts as failed.
const GUEST_CHECKS: &[&str] = &["device", "probe", "port1", "devinfo", "verbs", "unbind", "dmesg"];
const HOST_CHECKS: &[&str] = &["server", "pages"];

const SERVER_BIN: &str = "mlx5-vfio-user";
const SERVER_DIR: &str = "tests/mlx5-vfio-user";
const ALLOW_LIST: &str = "tests/kernel/dmesg-allow.txt";
const GAPS: &str = "tests/kernel/known-gaps.txt";
const VERBS_SRC: &str = "tests/kernel/verbs_objects.c";

/// Guest paths of the shipped files.
const G_VERBS: &str = "/t/verbs_objects";
const G_ALLOW: &str = "/t/dmesg-allow.re";

/// A pattern no kernel line matches: keeps `grep -v -f` meaningful for an empty allow-list.
const NEVER: &str = "^XTASK-KERNEL-TIER-NO-SUCH-LINE$";

/// The `dmesg -r` lines the `dmesg` check looks at (extended regex): mlx5 lines of level 0-4
/// (emergency to warning), and any `WARNING:` (a WARN splat) or `BUG` (`BUG:`, `kernel BUG at`)
/// from anywhere.
const SUSPECT: &str = "^<[0-4]>.*mlx5|WARNING:|(^|[^A-Za-z])BUG([^A-Za-z]|$)";

/// `/init`'s script. Each check runs whatever happened before it and says why it failed.
fn script() -> String {
    format!(
        r#"
pass() {{ echo "kernel-check: PASS $1${{2:+: $2}}"; }}
fail() {{ echo "kernel-check: FAIL $1: $2"; }}
echo "kernel-tier: guest kernel $(uname -r)"
bdf=
for d in /sys/bus/pci/devices/*; do
  [ "$(cat $d/vendor)" = 0x15b3 ] && bdf=${{d##*/}}
done
if [ -n "$bdf" ]; then pass device "$bdf $(cat /sys/bus/pci/devices/$bdf/device)"; else fail device "no PCI function with vendor 0x15b3"; fi
drv=
[ -n "$bdf" ] && drv=$(readlink /sys/bus/pci/devices/$bdf/driver)
ib=$(ls /sys/class/infiniband 2>/dev/null | grep '^mlx5_' | head -n1)
if [ "${{drv##*/}}" = mlx5_core ] && [ -n "$ib" ]; then pass probe "$bdf bound to mlx5_core, $ib registered"
else fail probe "driver '${{drv##*/}}', IB device '$ib'"; fi
port=/sys/class/infiniband/$ib/ports/1
if [ -n "$ib" ] && [ -d $port ]; then
  echo "kernel-tier: port 1: state '$(cat $port/state)', phys_state '$(cat $port/phys_state)', link_layer '$(cat $port/link_layer)'"
  rdma resource show qp link $ib/1 > /tmp/qp 2>&1; cat /tmp/qp
  rdma resource show cq dev $ib > /tmp/cq 2>&1; cat /tmp/cq
  if ! grep -q 'lqpn 1 type GSI' /tmp/qp; then fail port1 "no GSI QP (QP 1) on $ib port 1"
  elif ! grep -q 'comm \[ib_core\]' /tmp/cq; then fail port1 "no kernel (ib_core) CQ on $ib"
  else pass port1 "GSI QP and its CQ on the model"; fi
else fail port1 "no $port"; fi
if [ -n "$ib" ]; then
  ibv_devinfo -v -d $ib > /tmp/devinfo 2>&1; rc=$?
  cat /tmp/devinfo
  bad=
  grep -Eq "vendor_id:[[:space:]]+{VENDOR_ID}\$" /tmp/devinfo || bad="$bad vendor_id"
  grep -Eq "vendor_part_id:[[:space:]]+{VENDOR_PART_ID}\$" /tmp/devinfo || bad="$bad vendor_part_id"
  grep -Eq "fw_ver:[[:space:]]+{FW_VER}\$" /tmp/devinfo || bad="$bad fw_ver"
  if [ $rc = 0 ] && [ -z "$bad" ]; then pass devinfo "{VENDOR_ID} {VENDOR_PART_ID} {FW_VER}"
  else fail devinfo "exit $rc, wrong or missing:$bad"; fi
  {G_VERBS}; rc=$?
  if [ $rc = 0 ]; then pass verbs; else fail verbs "verbs_objects exited $rc"; fi
else
  fail devinfo "no IB device"
  fail verbs "no IB device"
fi
if [ -n "$bdf" ] && [ "${{drv##*/}}" = mlx5_core ]; then
  echo $bdf > /sys/bus/pci/drivers/mlx5_core/unbind; rc=$?
  left=$(ls /sys/class/infiniband 2>/dev/null | grep '^mlx5_')
  if [ $rc = 0 ] && [ -z "$left" ] && [ ! -e /sys/bus/pci/devices/$bdf/driver ]; then pass unbind "$bdf"
  else fail unbind "exit $rc, IB devices left: '$left'"; fi
else fail unbind "mlx5_core is not bound"; fi
echo kernel-dmesg-begin
dmesg | grep -iE 'mlx5|infiniband|ib_core|ib_mad|ib_uverbs|vfio'
echo kernel-dmesg-end
dmesg -r > /tmp/dmesg.raw
grep -E '{SUSPECT}' /tmp/dmesg.raw > /tmp/dmesg.bad
grep -v -E -f {G_ALLOW} /tmp/dmesg.bad > /tmp/dmesg.left
if [ -s /tmp/dmesg.left ]; then
  fail dmesg "$(wc -l < /tmp/dmesg.left) line(s) beyond the allow-list:"
  sed 's/^/kernel-tier: dmesg: /' /tmp/dmesg.left
else pass dmesg "$(wc -l < /tmp/dmesg.bad) line(s), all allowed"; fi
exit 0
"#
    )
}

/// The regexes of the allow-list: one per line, each right below a `#` reason line.
fn allow_patterns(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut reason = false;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') {
            reason = true;
        } else if line.trim().is_empty() {
            reason = false;
        } else {
            if !reason {
                return Err(format!("{ALLOW_LIST}:{}: a regex without a `#` reason above", i + 1));
            }
            out.push(line.to_string());
            reason = false;
        }
    }
    Ok(out)
}

/// One check's result, as the guest or the host reported it.
#[derive(Debug, PartialEq, Eq)]
struct Check {
    name: String,
    ok: bool,
    detail: String,
    /// Failed as [`GAPS`] expects: reported, not counted as a failure.
    gap: bool,
}

/// The `kernel-check:` lines of the guest's output.
fn guest_checks(out: &str) -> Vec<Check> {
    out.lines()
        .filter_map(|l| {
            let rest = l.trim_end().split_once("kernel-check: ")?.1;
            let (verdict, rest) = rest.split_once(' ')?;
            // `name: detail`, or a bare `name`.
            let (name, detail) = rest.split_once(' ').unwrap_or((rest, ""));
            let name = name.trim_end_matches(':');
            let ok = match verdict {
                "PASS" => true,
                "FAIL" => false,
                _ => return None,
            };
            Some(Check { name: name.to_string(), ok, detail: detail.to_string(), gap: false })
        })
        .collect()
}

/// The firmware page accounting of the server's summary: the line that names pages, with the
/// numbers after `given` and after `returned` (or `taken`).
fn pages(summary: &str) -> Option<(u64, u64)> {
    let line = summary
        .lines()
        .filter(|l| l.starts_with("mlx5-vfio-user: "))
        .find(|l| l.contains("pages"))?;
    let words: Vec<&str> =
        line.split(|c: char| c.is_whitespace() || c == ',' || c == '=').collect();
    let after = |keys: &[&str]| -> Option<u64> {
        let i = words.iter().position(|w| keys.contains(w))?;
        words[i + 1..].iter().find_map(|w| w.parse().ok())
    };
    Some((after(&["given"])?, after(&["returned", "taken"])?))
}

/// The host's checks on the server: its status, its summary, its pages.
fn server_checks(run: Option<&vm::CompanionRun>, missing: Option<&str>) -> Vec<Check> {
    let check =
        |name: &str, ok: bool, detail: String| Check { name: name.into(), ok, detail, gap: false };
    let Some(run) = run else {
        let why = missing.unwrap_or("the server did not run").to_string();
        return vec![check("server", false, why.clone()), check("pages", false, why)];
    };
    let ended = run.stdout.lines().any(|l| l.trim_end() == "mlx5-vfio-user: summary end");
    let server = check(
        "server",
        run.exit == Some(0) && !run.killed && ended,
        format!("exit {:?}, killed {}, summary end {}", run.exit, run.killed, ended),
    );
    let pages = match pages(&run.stdout) {
        // None given means the kernel never reached MANAGE_PAGES: nothing was shown.
        Some((given, back)) => {
            check("pages", given > 0 && given == back, format!("{given} given, {back} returned"))
        }
        None => check("pages", false, "the server's summary has no firmware page line".into()),
    };
    vec![server, pages]
}

/// The results, in [`GUEST_CHECKS`] + [`HOST_CHECKS`] order; an unreported check failed.
fn all_checks(guest: Vec<Check>, host: Vec<Check>) -> Vec<Check> {
    let mut got: Vec<Check> = guest.into_iter().chain(host).collect();
    GUEST_CHECKS
        .iter()
        .chain(HOST_CHECKS)
        .map(|name| match got.iter().position(|c| c.name == *name) {
            Some(i) => got.remove(i),
            None => Check {
                name: name.to_string(),
                ok: false,
                detail: "not reported".into(),
                gap: false,
            },
        })
        .collect()
}

/// What the model does not do yet, as the kernel shows it ([`GAPS`]): checks expected to fail
/// (`check NAME`) and kernel log lines the `dmesg` check is expected to report (`dmesg REGEX`,
/// an extended regex), each entry below a `#` line that says what is missing. An expected
/// failure is reported as a gap, never as a pass; an entry that no longer fails is itself a
/// failure, so the list can only shrink.
#[derive(Debug, Default, PartialEq, Eq)]
struct Gaps {
    checks: Vec<String>,
    dmesg: Vec<String>,
}

fn gaps(text: &str) -> Result<Gaps, String> {
    let mut g = Gaps::default();
    let mut reason = false;
    for (i, line) in text.lines().enumerate() {
        let at = || format!("{GAPS}:{}", i + 1);
        if line.starts_with('#') {
            reason = true;
            continue;
        }
        if line.trim().is_empty() {
            reason = false;
            continue;
        }
        if !reason {
            return Err(format!("{}: an entry without a `#` reason above", at()));
        }
        match line.split_once(' ') {
            Some(("check", name)) if GUEST_CHECKS.iter().chain(HOST_CHECKS).any(|c| *c == name) => {
                g.checks.push(name.to_string())
            }
            Some(("dmesg", re)) if !re.trim().is_empty() => g.dmesg.push(re.to_string()),
            _ => return Err(format!("{}: expected `check NAME` or `dmesg REGEX`: {line}", at())),
        }
        reason = false;
    }
    Ok(g)
}

/// Whether `line` matches the extended regex `re` (grep's, as the guest's allow-list uses).
fn grep_matches(re: &str, line: &str) -> bool {
    use std::io::Write;
    let child =
        Command::new("grep").args(["-qE", "--", re]).stdin(std::process::Stdio::piped()).spawn();
    let Ok(mut child) = child else { return false };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "{line}");
    }
    child.wait().is_ok_and(|s| s.success())
}

/// Mark the failures [`GAPS`] expects as gaps; an entry that no longer fails fails its check.
/// `dmesg_lines` are the kernel lines the `dmesg` check reported beyond the allow-list.
fn apply_gaps(checks: &mut [Check], gaps: &Gaps, dmesg_lines: &[&str]) {
    for c in checks.iter_mut() {
        if c.name == "dmesg" {
            let unexplained: Vec<&&str> = dmesg_lines
                .iter()
                .filter(|l| !gaps.dmesg.iter().any(|re| grep_matches(re, l)))
                .collect();
            let stale: Vec<&String> = gaps
                .dmesg
                .iter()
                .filter(|re| !dmesg_lines.iter().any(|l| grep_matches(re, l)))
                .collect();
            if !stale.is_empty() {
                c.ok = false;
                c.detail = format!(
                    "known gaps no kernel line shows now (remove them from {GAPS}): {stale:?}"
                );
            } else if !c.ok && unexplained.is_empty() && !dmesg_lines.is_empty() {
                c.gap = true;
                c.detail = format!("{} line(s), each a known gap", dmesg_lines.len());
            }
        } else if gaps.checks.contains(&c.name) {
            if c.ok {
                c.ok = false;
                c.detail =
                    format!("passes, but {GAPS} lists it as a gap: remove it ({})", c.detail);
            } else {
                c.gap = true;
            }
        }
    }
}

/// Build the verbs program against the host's libibverbs (dynamically linked).
fn build_verbs() -> Result<PathBuf, String> {
    let out_dir = util::root().join("target").join("kernel-tier");
    fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let out = out_dir.join("verbs_objects");
    let mut cc = Command::new("cc");
    cc.args(["-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(&out)
        .arg(util::root().join(VERBS_SRC))
        .args(["-lmlx5", "-libverbs"]);
    if util::run(&mut cc) {
        Ok(out)
    } else {
        Err(format!("building {VERBS_SRC} failed"))
    }
}

/// Names a prebuilt server binary to use instead of building `tests/mlx5-vfio-user`.
const SERVER_ENV: &str = "RDMA_PMD_KERNEL_SERVER";

/// Build the vfio-user server, if the tree has it (or take the one [`SERVER_ENV`] names);
/// `Err` says why there is none.
fn build_server() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os(SERVER_ENV) {
        let bin = PathBuf::from(bin);
        eprintln!("xtask: kernel: the server is {} ({SERVER_ENV})", bin.display());
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("{SERVER_ENV}={}: no such file", bin.display()))
        };
    }
    let manifest = util::root().join(SERVER_DIR).join("Cargo.toml");
    if !manifest.exists() {
        return Err(format!("no {SERVER_DIR} in this tree: the server is not merged yet"));
    }
    let mut cmd = util::cargo();
    cmd.args(["build", "--message-format=json", "--manifest-path"])
        .arg(&manifest)
        .args(["--bin", SERVER_BIN]);
    eprintln!("$ {cmd:?}");
    let out = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building {SERVER_BIN} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    util::executables(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == SERVER_BIN))
        .ok_or_else(|| format!("cargo built no {SERVER_BIN}"))
}

/// The guest, with the server as its companion and device when there is one.
fn guest(verbs: PathBuf, allow: PathBuf, server: Option<(&Path, &Path)>) -> Guest {
    let mut g = Guest {
        name: "kernel".into(),
        packages: PACKAGES.iter().map(|s| s.to_string()).collect(),
        modules: MODULES.iter().map(|s| s.to_string()).collect(),
        files: vec![GuestFile::dynamic(verbs, G_VERBS), GuestFile::plain(allow, G_ALLOW)],
        init_script: script(),
        memory_mib: 1024,
        cpus: 2,
        kernel: KernelSource::Trixie612,
        emulator: Emulator::Private11,
        memfd_ram: true,
        ..Guest::default()
    };
    if let Some((bin, socket)) = server {
        g.companion = Some(Companion {
            program: bin.to_path_buf(),
            args: vec!["--socket".into(), socket.display().to_string()],
            socket: socket.to_path_buf(),
            ready_within: Duration::from_secs(30),
            exit_within: Duration::from_secs(30),
        });
        g.qemu_args = vec!["-device".into(), device_json(socket)];
    }
    g
}

/// The `-device` argument: QEMU 11.1's `socket` property is a SocketAddress object
/// (`socket=PATH` is refused: "Invalid parameter type for 'socket', expected: object"), which
/// only the JSON form of `-device` can give.
fn device_json(socket: &Path) -> String {
    let path = socket.display().to_string().replace('\\', "\\\\").replace('"', "\\\"");
    format!(r#"{{"driver":"vfio-user-pci","socket":{{"type":"unix","path":"{path}"}}}}"#)
}

/// Print the report; true when every check passed.
fn report(s: &Serial, checks: &[Check], qemu: &str) -> bool {
    let out = s.script_output();
    let kernel = out
        .lines()
        .find_map(|l| l.strip_prefix("kernel-tier: guest kernel "))
        .unwrap_or("(unknown: the guest never reached /init)");
    println!("\nkernel tier: QEMU {qemu}, guest kernel {kernel}, {:?}, {:.1?}", s.accel, s.elapsed);
    if s.timed_out {
        println!("kernel tier: the guest timed out");
    }
    if let Some(run) = &s.companion {
        println!(
            "kernel tier: server exit {:?}{}",
            run.exit,
            if run.killed { " (killed)" } else { "" }
        );
        for l in run.stdout.lines() {
            println!("  {l}");
        }
    }
    for l in s.serial.lines().filter(|l| l.starts_with("XTASK-VM-MODULE-FAILED ")) {
        println!("kernel tier: insmod failed: {}", &l["XTASK-VM-MODULE-FAILED ".len()..]);
    }
    for c in checks {
        let v = match (c.ok, c.gap) {
            (true, _) => "PASS",
            (false, true) => "GAP ",
            (false, false) => "FAIL",
        };
        println!("  {v} {:<8} {}", c.name, c.detail);
    }
    let gaps: Vec<&str> = checks.iter().filter(|c| c.gap).map(|c| c.name.as_str()).collect();
    if !gaps.is_empty() {
        println!("kernel tier: known gaps ({GAPS}, issue #34): {}", gaps.join(", "));
    }
    let failed: Vec<&str> =
        checks.iter().filter(|c| !c.ok && !c.gap).map(|c| c.name.as_str()).collect();
    if failed.is_empty() {
        return true;
    }
    println!("kernel tier: FAILED: {}", failed.join(", "));
    let log = out
        .split_once("kernel-dmesg-begin\n")
        .map(|(_, r)| r.split_once("kernel-dmesg-end").map_or(r, |(l, _)| l));
    match log {
        Some(l) => println!("kernel tier: the guest's mlx5 kernel log:\n{l}"),
        None => println!("kernel tier: no guest kernel log; the serial console:\n{}", s.serial),
    }
    if let (Some(_), Some((_, err))) = (log, s.serial.split_once("\n[qemu stderr]\n")) {
        println!("kernel tier: QEMU's stderr:\n{err}");
    }
    if let Some(run) = &s.companion {
        println!("kernel tier: server stderr:\n{}", run.stderr);
    }
    false
}

pub fn run() -> Outcome {
    let root = util::root();
    let text = match fs::read_to_string(root.join(ALLOW_LIST)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("xtask: kernel: {ALLOW_LIST}: {e}");
            return Outcome::check(false);
        }
    };
    let mut patterns = match allow_patterns(&text) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: kernel: {e}");
            return Outcome::check(false);
        }
    };
    patterns.push(NEVER.to_string());
    let known = match fs::read_to_string(root.join(GAPS))
        .map_err(|e| format!("{GAPS}: {e}"))
        .and_then(|t| gaps(&t))
    {
        Ok(g) => g,
        Err(e) => {
            eprintln!("xtask: kernel: {e}");
            return Outcome::check(false);
        }
    };
    let work = vm::cache_dir().join("kernel");
    let allow = work.join("dmesg-allow.re");
    if let Err(e) =
        fs::create_dir_all(&work).and_then(|_| fs::write(&allow, patterns.join("\n") + "\n"))
    {
        eprintln!("xtask: kernel: {}: {e}", allow.display());
        return Outcome::check(false);
    }
    let verbs = match build_verbs() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: kernel: {e}");
            return Outcome::check(false);
        }
    };
    let qemu = match vm::private_qemu() {
        Ok(q) => q,
        Err(e) => {
            eprintln!("xtask: kernel: QEMU 11.1: {e}");
            return Outcome::check(false);
        }
    };
    let server = build_server();
    if let Err(e) = &server {
        eprintln!("xtask: kernel: {e}; booting without the device (its checks fail)");
    }
    // A short path: UNIX socket paths are limited to 108 bytes.
    let socket = std::env::temp_dir().join(format!("rdma-pmd-kernel-{}.sock", std::process::id()));
    let g = guest(verbs, allow, server.as_ref().ok().map(|b| (b.as_path(), socket.as_path())));
    let booted = g.boot(Duration::from_secs(600));
    let _ = fs::remove_file(&socket);
    let s = match booted {
        Ok(s) => s,
        Err(vm::VmError::MissingTools(apt)) => {
            return Outcome::skip(format!("host tools missing; install with: {apt}"))
        }
        Err(e) => {
            eprintln!("xtask: kernel: {e}");
            return Outcome::check(false);
        }
    };
    let host = server_checks(s.companion.as_ref(), server.as_ref().err().map(String::as_str));
    let out = s.script_output();
    let mut checks = all_checks(guest_checks(out), host);
    let dmesg: Vec<&str> =
        out.lines().filter_map(|l| l.strip_prefix("kernel-tier: dmesg: ")).collect();
    apply_gaps(&mut checks, &known, &dmesg);
    report(&s, &checks, &qemu.version);
    let counted: Vec<bool> = checks.iter().filter(|c| !c.gap).map(|c| c.ok).collect();
    Outcome::checks(&counted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_are_parsed_and_unreported_ones_fail() {
        let out = "noise\nkernel-check: PASS device: 0000:00:02.0 0x1017\n\
                   [  3.1] mlx5_core: x\nkernel-check: FAIL probe: driver '', IB device ''\n\
                   kernel-check: PASS verbs\n";
        let g = guest_checks(out);
        assert_eq!(g.len(), 3);
        assert_eq!(
            g[0],
            Check {
                name: "device".into(),
                ok: true,
                detail: "0000:00:02.0 0x1017".into(),
                gap: false
            }
        );
        assert!(!g[1].ok && g[1].detail.starts_with("driver"));
        let all = all_checks(g, server_checks(None, Some("no server")));
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["device", "probe", "port1", "devinfo", "verbs", "unbind", "dmesg", "server", "pages"]
        );
        let oks: Vec<bool> = all.iter().map(|c| c.ok).collect();
        assert_eq!(oks, [true, false, false, false, true, false, false, false, false]);
        assert_eq!(all[2].detail, "not reported");
    }

    /// The guest's filter, run here with the host's `grep -E` on lines of `dmesg -r`'s form.
    #[test]
    fn the_dmesg_filter_catches_mlx5_errors_warns_and_bugs_and_the_allow_list_clears_them() {
        use std::io::Write;
        let raw = "<6>[ 1.0] mlx5_core 0000:00:02.0: firmware version: 16.35.1012\n\
                   <3>[ 2.0] mlx5_core 0000:00:02.0: mlx5_cmd_out_err: CREATE_CQ(0x400) failed\n\
                   <4>[ 3.0] WARNING: CPU: 0 PID: 1 at drivers/x.c:1 f+0x1\n\
                   <6>[ 4.0] DEBUG only\n\
                   <1>[ 5.0] BUG: kernel NULL pointer dereference\n\
                   <4>[ 6.0] ACPI: a warning of another driver\n";
        let grep = |args: &[&str], input: &str| {
            let mut c = Command::new("grep")
                .args(args)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("grep runs");
            c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
            String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap()
        };
        let bad = grep(&["-E", SUSPECT], raw);
        let levels: Vec<&str> = bad.lines().map(|l| &l[..3]).collect();
        assert_eq!(levels, ["<3>", "<4>", "<1>"], "{bad}");
        let dir = std::env::temp_dir().join(format!("xtask-kernel-allow-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let allow = dir.join("allow.re");
        let mut pats = allow_patterns("# a known reason\nCREATE_CQ\\(0x400\\)\n").unwrap();
        pats.push(NEVER.to_string());
        fs::write(&allow, pats.join("\n") + "\n").unwrap();
        let left = grep(&["-v", "-E", "-f", allow.to_str().unwrap()], &bad);
        assert_eq!(left.lines().count(), 2, "{left}");
        fs::write(&allow, format!("{NEVER}\n")).unwrap();
        let left = grep(&["-v", "-E", "-f", allow.to_str().unwrap()], &bad);
        assert_eq!(left.lines().count(), 3, "an empty allow-list lets every line through: {left}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn known_gaps_are_reported_never_passed_and_the_list_only_shrinks() {
        let text =
            "# the model has no SRQ yet\ncheck port1\n\n# no RMP\ndmesg Couldn't create SRQ\n";
        let g = gaps(text).unwrap();
        assert_eq!(g.checks, ["port1"]);
        assert_eq!(g.dmesg, ["Couldn't create SRQ"]);
        assert!(gaps("check port1\n").unwrap_err().contains("without a `#` reason"));
        assert!(gaps("# r\ncheck nosuch\n").unwrap_err().contains("expected `check NAME`"));
        let c = |name: &str, ok| Check { name: name.into(), ok, detail: String::new(), gap: false };
        // A listed failure becomes a gap; an unlisted one stays a failure.
        let mut checks = vec![c("port1", false), c("verbs", false), c("dmesg", false)];
        let srq = "<3>[ 1.0] mlx5_ib: Couldn't create SRQ 0";
        apply_gaps(&mut checks, &g, &[srq]);
        assert!(checks[0].gap && !checks[0].ok);
        assert!(!checks[1].gap && !checks[1].ok);
        assert!(checks[2].gap, "{:?}", checks[2]);
        // A kernel line no gap names keeps the dmesg check failed.
        let mut checks = vec![c("dmesg", false)];
        apply_gaps(&mut checks, &g, &[srq, "<3>[ 2.0] mlx5_core: something new"]);
        assert!(!checks[0].gap && !checks[0].ok);
        // A listed check that passes, or a gap line the kernel no longer prints, fails.
        let mut checks = vec![c("port1", true), c("dmesg", true)];
        apply_gaps(&mut checks, &g, &[]);
        assert!(!checks[0].ok && !checks[0].gap && checks[0].detail.contains("remove it"));
        assert!(!checks[1].ok && !checks[1].gap && checks[1].detail.contains("remove them"));
        // The committed list parses.
        gaps(&std::fs::read_to_string(util::root().join(GAPS)).unwrap()).unwrap();
    }

    #[test]
    fn the_device_is_given_in_json_with_a_unix_socket_address() {
        assert_eq!(
            device_json(Path::new("/tmp/a\"b.sock")),
            r#"{"driver":"vfio-user-pci","socket":{"type":"unix","path":"/tmp/a\"b.sock"}}"#
        );
    }

    #[test]
    fn the_allow_list_needs_a_reason_above_each_regex() {
        let good = "# the guest has no network\nno such device eth0\n\n# a reason\n# on two lines\nfoo.*bar\n";
        assert_eq!(allow_patterns(good).unwrap(), ["no such device eth0", "foo.*bar"]);
        assert!(allow_patterns("# reason\nfirst\nsecond\n").is_err(), "second has no reason");
        assert!(allow_patterns("# reason\n\nlost\n").is_err(), "a blank line parts a reason");
    }

    #[test]
    fn the_server_summary_gives_status_and_pages() {
        let run = |stdout: &str, exit| vm::CompanionRun {
            stdout: stdout.into(),
            exit,
            ..Default::default()
        };
        let good = run(
            "mlx5-vfio-user: 212 commands\nmlx5-vfio-user: fw pages given 4096 returned 4096\n\
             mlx5-vfio-user: summary end\n",
            Some(0),
        );
        let c = server_checks(Some(&good), None);
        assert!(c.iter().all(|c| c.ok), "{c:?}");
        assert_eq!(c[1].detail, "4096 given, 4096 returned");
        let leak =
            run("mlx5-vfio-user: pages: given=10, taken=8\nmlx5-vfio-user: summary end\n", Some(0));
        let c = server_checks(Some(&leak), None);
        assert!(c[0].ok && !c[1].ok, "{c:?}");
        let none =
            run("mlx5-vfio-user: fw pages given 0 taken 0\nmlx5-vfio-user: summary end\n", Some(0));
        assert!(!server_checks(Some(&none), None)[1].ok, "no page given proves nothing");
        let silent = run("mlx5-vfio-user: summary end\n", Some(0));
        let c = server_checks(Some(&silent), None);
        assert!(!c[1].ok && c[1].detail.contains("no firmware page line"));
        let crashed = run("mlx5-vfio-user: fw pages given 1 returned 1\n", Some(101));
        assert!(!server_checks(Some(&crashed), None)[0].ok, "no summary end, exit 101");
    }
}

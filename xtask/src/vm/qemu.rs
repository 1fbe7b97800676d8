//! Running QEMU: accelerator choice, the command line, the serial console and the timeout.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::companion::Running;
use super::{Guest, PrivateQemu, Serial, VmError, EXIT_MARKER, START_MARKER};

/// How the guest's CPUs are run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation through `kvm_intel`/`kvm_amd`.
    Kvm,
    /// QEMU's binary translator, one host thread per vCPU.
    Tcg,
}

impl Accel {
    fn args(self) -> &'static [&'static str] {
        match self {
            Accel::Kvm => &["-accel", "kvm", "-cpu", "host"],
            Accel::Tcg => &["-accel", "tcg,thread=multi", "-cpu", "max"],
        }
    }
}

/// KVM is worth trying only with a real vendor module loaded: other `/dev/kvm` providers (such
/// as `kvm_pvm`) cannot boot a stock Debian kernel.
pub fn kvm_usable() -> bool {
    Path::new("/dev/kvm").exists()
        && (Path::new("/sys/module/kvm_intel").exists()
            || Path::new("/sys/module/kvm_amd").exists())
}

/// How long a KVM guest may take to reach `/init` before TCG is used instead.
const KVM_PROBE: Duration = Duration::from_secs(60);

pub fn boot(
    g: &Guest,
    private: Option<&PrivateQemu>,
    image: &Path,
    initrd: &Path,
    timeout: Duration,
) -> Result<Serial, VmError> {
    if kvm_usable() {
        let s = run(g, private, Accel::Kvm, image, initrd, timeout, Some(KVM_PROBE))?;
        if s.serial.contains(START_MARKER) {
            return Ok(s);
        }
        eprintln!("vm: the KVM guest never reached /init; retrying with TCG");
    }
    run(g, private, Accel::Tcg, image, initrd, timeout, None)
}

/// QEMU's memory arguments: plain `-m`, or a shared memfd backend on q35.
fn memory_args(g: &Guest) -> Vec<String> {
    let mut a = vec!["-m".to_string(), format!("{}M", g.memory_mib)];
    if g.memfd_ram {
        a.extend([
            "-object".to_string(),
            format!("memory-backend-memfd,id=mem,size={}M,share=on", g.memory_mib),
            "-machine".to_string(),
            "q35,memory-backend=mem".to_string(),
        ]);
    }
    a
}

fn run(
    g: &Guest,
    private: Option<&PrivateQemu>,
    accel: Accel,
    image: &Path,
    initrd: &Path,
    timeout: Duration,
    start_within: Option<Duration>,
) -> Result<Serial, VmError> {
    let mut cmd = match private {
        Some(q) => q.command(),
        None => Command::new("qemu-system-x86_64"),
    };
    cmd.args(["-nodefaults", "-nic", "none", "-display", "none", "-serial", "stdio"])
        .arg("-no-reboot")
        .args(accel.args())
        .args(memory_args(g))
        .args(["-smp", &g.cpus.to_string()])
        .arg("-kernel")
        .arg(image)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", &format!("console=ttyS0 panic=-1 loglevel=4 {}", g.cmdline)])
        .args(&g.qemu_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The device process first: QEMU connects to its socket while it builds the machine.
    let mut companion = match &g.companion {
        Some(c) => Some(Running::start(c)?),
        None => None,
    };
    eprintln!("vm: {cmd:?}");
    let shown = format!("{cmd:?}");
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            if let Some(c) = companion.take() {
                c.reap(Duration::ZERO);
            }
            return Err(VmError::Command { cmd: shown, detail: e.to_string() });
        }
    };
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut stderr = child.stderr.take().expect("piped");
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    let start = Instant::now();
    let mut raw = Vec::new();
    let mut timed_out = false;
    loop {
        let mut deadline = start + timeout;
        if let Some(p) = start_within {
            if !contains(&raw, START_MARKER.as_bytes()) {
                deadline = deadline.min(start + p);
            }
        }
        let now = Instant::now();
        if now >= deadline {
            timed_out = true;
            break;
        }
        match rx.recv_timeout(deadline - now) {
            Ok(chunk) => {
                if g.echo {
                    use std::io::Write;
                    let _ = std::io::stderr().write_all(&chunk);
                }
                raw.extend_from_slice(&chunk);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    if timed_out {
        eprintln!("\nvm: guest killed after {:?}", start.elapsed());
        let _ = child.kill();
    }
    let _ = child.wait();
    let _ = reader.join();
    let qemu_err = err_reader.join().unwrap_or_default();
    let mut serial = String::from_utf8_lossy(&raw).replace('\r', "");
    if !qemu_err.trim().is_empty() {
        serial.push_str("\n[qemu stderr]\n");
        serial.push_str(&qemu_err);
    }
    let exit = exit_status(&serial);
    let elapsed = start.elapsed();
    let companion =
        companion.map(|c| c.reap(g.companion.as_ref().map_or(Duration::ZERO, |c| c.exit_within)));
    Ok(Serial { serial, exit, accel, timed_out, elapsed, companion })
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The status in the last `XTASK-VM-EXIT <n>` line.
fn exit_status(serial: &str) -> Option<i32> {
    serial.lines().rev().find_map(|l| l.strip_prefix(EXIT_MARKER)?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_marker_is_parsed_from_the_last_line_that_has_it() {
        let s = "boot\nXTASK-VM-EXIT 3\nXTASK-VM-EXIT 0\n[  1.0] reboot: Power down\n";
        assert_eq!(exit_status(s), Some(0));
        assert_eq!(exit_status("no marker\n"), None);
    }
}

//! The companion process of a guest (a vfio-user device server): started before QEMU, awaited
//! on its socket, reaped after QEMU with its output and exit status kept. It never outlives the
//! boot: a companion that does not exit in time is killed.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Companion, CompanionRun, VmError};

/// How often the socket and the exit status are polled.
const POLL: Duration = Duration::from_millis(20);

/// A started companion.
pub struct Running {
    child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = r.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

impl Running {
    /// Start `c` and wait for its socket; on failure it is reaped and the error says why.
    pub fn start(c: &Companion) -> Result<Running, VmError> {
        let _ = std::fs::remove_file(&c.socket);
        let mut cmd = Command::new(&c.program);
        cmd.args(&c.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let shown = format!("{cmd:?}");
        eprintln!("vm: companion {shown}");
        let mut child = cmd
            .spawn()
            .map_err(|e| VmError::Command { cmd: shown.clone(), detail: e.to_string() })?;
        let stdout = drain(child.stdout.take().expect("piped"));
        let stderr = drain(child.stderr.take().expect("piped"));
        let running = Running { child, stdout, stderr };
        let start = Instant::now();
        let mut running = running;
        loop {
            if c.socket.exists() {
                return Ok(running);
            }
            let exited = matches!(running.child.try_wait(), Ok(Some(_)));
            if exited || start.elapsed() >= c.ready_within {
                let why = if exited { "exited" } else { "timed out" };
                let run = running.reap(Duration::ZERO);
                return Err(VmError::Command {
                    cmd: shown,
                    detail: format!(
                        "{why} before its socket {} appeared (exit {:?}); stderr:\n{}",
                        c.socket.display(),
                        run.exit,
                        run.stderr.trim()
                    ),
                });
            }
            std::thread::sleep(POLL);
        }
    }

    /// Wait up to `within` for the companion to exit, kill it if it has not, and collect what
    /// it printed.
    pub fn reap(mut self, within: Duration) -> CompanionRun {
        let start = Instant::now();
        let mut killed = false;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if start.elapsed() < within => std::thread::sleep(POLL),
                Ok(None) => {
                    eprintln!("vm: the companion did not exit within {within:?}; killing it");
                    killed = true;
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
                Err(_) => {
                    killed = true;
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
            }
        };
        CompanionRun {
            stdout: self.stdout.join().unwrap_or_default(),
            stderr: self.stderr.join().unwrap_or_default(),
            exit: status.and_then(|s| s.code()),
            killed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn companion(script: &str, socket: &Path) -> Companion {
        Companion {
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            socket: socket.to_path_buf(),
            ready_within: Duration::from_secs(5),
            exit_within: Duration::from_secs(5),
        }
    }

    fn socket(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("xtask-companion-{}-{name}", std::process::id()))
    }

    #[test]
    fn output_and_status_are_kept() {
        let s = socket("ok");
        let c = companion(&format!("touch {}; echo out; echo err >&2; exit 3", s.display()), &s);
        let run = Running::start(&c).expect("starts").reap(Duration::from_secs(5));
        assert_eq!((run.stdout.as_str(), run.stderr.as_str()), ("out\n", "err\n"));
        assert_eq!((run.exit, run.killed), (Some(3), false));
        let _ = std::fs::remove_file(&s);
    }

    #[test]
    fn a_companion_that_lingers_is_killed() {
        let s = socket("linger");
        let c = companion(&format!("touch {}; exec sleep 30", s.display()), &s);
        let t = Instant::now();
        let run = Running::start(&c).expect("starts").reap(Duration::from_millis(100));
        assert!(run.killed && run.exit.is_none(), "{run:?}");
        assert!(t.elapsed() < Duration::from_secs(10));
        let _ = std::fs::remove_file(&s);
    }

    #[test]
    fn a_companion_that_dies_before_its_socket_is_an_error() {
        let s = socket("dies");
        let c = companion("echo no-socket >&2; exit 1", &s);
        let e = Running::start(&c).err().expect("an error");
        assert!(e.to_string().contains("no-socket"), "{e}");
    }
}

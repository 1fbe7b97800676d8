//! Small helpers for running commands and reading cargo's test output.

use std::path::PathBuf;
use std::process::Command;

/// The workspace root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().expect("xtask lives in the workspace").to_path_buf()
}

/// `cargo` as invoked for this xtask.
pub fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Run a command with inherited stdio; true when it exits 0.
pub fn run(cmd: &mut Command) -> bool {
    eprintln!("$ {}", show(cmd));
    match cmd.status() {
        Ok(s) => s.success(),
        Err(e) => {
            eprintln!("xtask: cannot run {}: {e}", show(cmd));
            false
        }
    }
}

/// Run a command, echoing its output, and return (success, combined output).
pub fn run_capture(cmd: &mut Command) -> (bool, String) {
    eprintln!("$ {}", show(cmd));
    match cmd.output() {
        Ok(o) => {
            let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&o.stderr));
            print!("{text}");
            (o.status.success(), text)
        }
        Err(e) => {
            eprintln!("xtask: cannot run {}: {e}", show(cmd));
            (false, String::new())
        }
    }
}

/// Add up every `test result: ok. N passed; M failed; ...` line of cargo/libtest output.
pub fn count_libtest(output: &str) -> (u32, u32) {
    let (mut passed, mut failed) = (0, 0);
    for line in output.lines() {
        let Some(rest) = line.trim().strip_prefix("test result: ") else { continue };
        for part in rest.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            if let [.., n, what] = words.as_slice() {
                let n: u32 = n.trim_end_matches('.').parse().unwrap_or(0);
                match *what {
                    "passed" => passed += n,
                    "failed" => failed += n,
                    _ => {}
                }
            }
        }
    }
    (passed, failed)
}

/// The `"executable":"..."` values of cargo's JSON messages.
pub fn executables(json: &str) -> Vec<PathBuf> {
    const KEY: &str = "\"executable\":\"";
    json.lines()
        .filter_map(|l| {
            let rest = &l[l.find(KEY)? + KEY.len()..];
            Some(PathBuf::from(&rest[..rest.find('"')?]))
        })
        .collect()
}

/// The `"executable"` of the artifact whose target is named `name`, from cargo's JSON lines.
pub fn executable_of(json: &str, name: &str) -> Option<PathBuf> {
    let target = format!("\"name\":\"{name}\"");
    json.lines().filter(|l| l.contains(&target)).find_map(|l| {
        let rest = &l[l.find("\"executable\":\"")? + "\"executable\":\"".len()..];
        Some(rest[..rest.find('"')?].into())
    })
}

/// Whether a program is on PATH.
pub fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog} >/dev/null 2>&1")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Whether we run as root (so missing packages may be installed).
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| o.stdout.starts_with(b"0")).unwrap_or(false)
}

fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_libtest_lines() {
        let out = "test result: ok. 21 passed; 0 failed; 0 ignored\n\
                   test result: FAILED. 3 passed; 2 failed; 1 ignored; 0 measured";
        assert_eq!(count_libtest(out), (24, 2));
    }

    #[test]
    fn finds_test_executables_in_cargo_json() {
        let json = r#"{"reason":"compiler-artifact","target":{"name":"rdma_pmd_hal"},"executable":"/t/x86_64-unknown-linux-gnu/debug/deps/rdma_pmd_hal-0123abcd","fresh":true}
{"reason":"compiler-artifact","target":{"name":"libc"},"executable":null}
{"reason":"build-finished","success":true}"#;
        assert_eq!(
            executables(json),
            vec![PathBuf::from("/t/x86_64-unknown-linux-gnu/debug/deps/rdma_pmd_hal-0123abcd")]
        );
    }
}

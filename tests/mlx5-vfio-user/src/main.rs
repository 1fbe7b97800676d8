//! `mlx5-vfio-user --socket PATH [--uar-pages N] [--accept-timeout SECS] [--trace]`: serve
//! the mlx5 device model to one vfio-user client (QEMU's `-device vfio-user-pci`), then print
//! a summary.
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::os::unix::net::UnixListener;
use std::process::ExitCode;

use rdma_pmd_mlx5_vfio_user::device::Device;
use rdma_pmd_mlx5_vfio_user::server;

const USAGE: &str =
    "usage: mlx5-vfio-user --socket PATH [--uar-pages N] [--accept-timeout SECS] [--trace]";

struct Args {
    socket: String,
    uar_pages: u32,
    accept_timeout_s: u32,
    trace: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut socket, mut uar_pages, mut accept_timeout_s, mut trace) = (None, 64, 300, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--socket" => socket = Some(args.next().ok_or("--socket needs a path")?),
            "--uar-pages" => {
                let v = args.next().ok_or("--uar-pages needs a number")?;
                uar_pages = v.parse().map_err(|_| format!("--uar-pages {v}: not a number"))?;
            }
            "--accept-timeout" => {
                let v = args.next().ok_or("--accept-timeout needs seconds")?;
                accept_timeout_s =
                    v.parse().map_err(|_| format!("--accept-timeout {v}: not a number"))?;
            }
            "--trace" => trace = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let socket = socket.ok_or("--socket is required")?;
    Ok(Args { socket, uar_pages, accept_timeout_s, trace })
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mlx5-vfio-user: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut dev = match Device::new(args.uar_pages) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("mlx5-vfio-user: {e}");
            return ExitCode::from(2);
        }
    };
    // A socket file left by an earlier run would make bind fail; anything else at the path
    // is not ours to remove.
    if let Ok(meta) = std::fs::symlink_metadata(&args.socket) {
        use std::os::unix::fs::FileTypeExt;
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(&args.socket);
        }
    }
    let listener = match UnixListener::bind(&args.socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("mlx5-vfio-user: bind {}: {e}", args.socket);
            return ExitCode::from(1);
        }
    };
    eprintln!("mlx5-vfio-user: listening on {}", args.socket);
    // The wait for the client is bounded: a VMM that never starts must not leave the server
    // behind.
    if !client_within(&listener, args.accept_timeout_s) {
        eprintln!("mlx5-vfio-user: no client within {} s", args.accept_timeout_s);
        let _ = std::fs::remove_file(&args.socket);
        return ExitCode::from(1);
    }
    let stream = match listener.accept() {
        Ok((s, _)) => s,
        Err(e) => {
            eprintln!("mlx5-vfio-user: accept: {e}");
            return ExitCode::from(1);
        }
    };
    drop(listener);
    let _ = std::fs::remove_file(&args.socket);
    let outcome = server::serve(&stream, &mut dev, args.trace);
    let s = dev.stats;
    eprintln!(
        "mlx5-vfio-user: errors replied {} unreplied {}, resets {}, dma maps without fd {}",
        s.errors - s.unreplied_errors,
        s.unreplied_errors,
        s.resets,
        s.dma_maps_unmappable
    );
    println!("mlx5-vfio-user: violations {}", dev.violations());
    println!(
        "mlx5-vfio-user: msix raised {} dropped {}",
        dev.msix().raised(),
        dev.msix().dropped()
    );
    println!("mlx5-vfio-user: dma maps {} unmaps {}", s.dma_maps, s.dma_unmaps);
    if let Some(live) = dev.live() {
        for r in live.model.command_log() {
            println!(
                "mlx5-vfio-user: command {:?} op_mod {:#x} count {} status {:?}",
                r.opcode, r.op_mod, r.count, r.status
            );
        }
        let (given, back) = live.model.fw_pages();
        println!("mlx5-vfio-user: fw pages given {given} returned {back}");
    }
    println!("mlx5-vfio-user: summary end");
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mlx5-vfio-user: protocol failure: {e}");
            ExitCode::from(1)
        }
    }
}

/// Whether a client is waiting on `listener` within `secs` seconds.
fn client_within(listener: &UnixListener, secs: u32) -> bool {
    use std::os::fd::AsRawFd;
    let end = std::time::Instant::now() + std::time::Duration::from_secs(u64::from(secs));
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        let mut p = libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one pollfd, valid for the call.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n > 0 {
            return true;
        }
        let interrupted =
            n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
        if !interrupted || left.is_zero() {
            return false;
        }
    }
}

//! `mlx5-vfio-user --socket PATH [--uar-pages N] [--trace]`: serve the mlx5 device model to one
//! vfio-user client (QEMU's `-device vfio-user-pci,socket=PATH`), then print a summary.

use std::os::unix::net::UnixListener;
use std::process::ExitCode;

use rdma_pmd_mlx5_vfio_user::device::Device;
use rdma_pmd_mlx5_vfio_user::server;

const USAGE: &str = "usage: mlx5-vfio-user --socket PATH [--uar-pages N] [--trace]";

struct Args {
    socket: String,
    uar_pages: u32,
    trace: bool,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut socket, mut uar_pages, mut trace) = (None, 64, false);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--socket" => socket = Some(args.next().ok_or("--socket needs a path")?),
            "--uar-pages" => {
                let v = args.next().ok_or("--uar-pages needs a number")?;
                uar_pages = v.parse().map_err(|_| format!("--uar-pages {v}: not a number"))?;
            }
            "--trace" => trace = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(Args { socket: socket.ok_or("--socket is required")?, uar_pages, trace })
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
    println!("mlx5-vfio-user: summary end");
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mlx5-vfio-user: protocol failure: {e}");
            ExitCode::from(1)
        }
    }
}

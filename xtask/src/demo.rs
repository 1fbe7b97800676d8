//! `cargo xtask demo [--backend model|rxe|wire]`: the busy-poll writev demo (one load generator,
//! `examples/`) on the mlx5 device model, over soft-RoCE, or with the driver on the model at our
//! end of the wire tier's Ethernet wire.

use std::time::Duration;

use crate::examples;
use crate::guests::rxe::{guest, guest_without_net, native_rxe, test_env, vm_unavailable};
use crate::guests::wire::{build_c_peer, NET_SETUP};
use crate::util;
use crate::vm::GuestFile;

/// `cargo xtask demo [--backend model|rxe|wire] [ARGS]`.
pub fn run(args: &[String]) -> bool {
    let backend =
        args.windows(2).find(|w| w[0] == "--backend").map(|w| w[1].as_str()).unwrap_or("model");
    match backend {
        "model" => examples::run_example("demo", args),
        "rxe" => rxe(args),
        "wire" => wire(args),
        other => {
            eprintln!("xtask: unknown backend {other:?} (model, rxe, wire)");
            false
        }
    }
}

/// `cargo xtask demo --backend rxe [--writes N] [--batch N]`: the busy-poll writev demo (the
/// same load generator as on the mlx5 model) over soft-RoCE, natively where an rxe device
/// exists, else in the rxe guest.
fn rxe(args: &[String]) -> bool {
    let mut pass: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--backend" {
            it.next();
        } else {
            pass.push(a.clone());
        }
    }
    let bin = match examples::build_examples_bin("demo_rxe") {
        Ok(b) => b,
        Err(e) => {
            eprintln!("xtask: demo rxe: {e}");
            return false;
        }
    };
    if let Some((dev, ip)) = native_rxe() {
        eprintln!("xtask: demo rxe: running natively on {dev} ({ip})");
        return util::run(std::process::Command::new(&bin).arg("--addr").arg(&ip).args(&pass));
    }
    if let Some(why) = vm_unavailable() {
        eprintln!("xtask: demo rxe: {why}");
        return false;
    }
    eprintln!("xtask: demo rxe: no rxe device here; running it in the rxe guest");
    let script = format!(
        "{}\n/t/demo-rxe --addr 10.0.0.1 {}\necho \"XTASK-DEMO-RC=$?\"\n",
        test_env(),
        pass.join(" ")
    );
    let g = guest(vec![GuestFile::dynamic(&bin, "/t/demo-rxe")], script);
    match g.boot(Duration::from_secs(600)) {
        Ok(s) => {
            let out = s.script_output();
            print!("{out}");
            out.lines().any(|l| l.trim() == "XTASK-DEMO-RC=0")
        }
        Err(e) => {
            eprintln!("xtask: demo rxe: {e}");
            false
        }
    }
}
/// `cargo xtask demo --backend wire [--writes N] [--batch N]`: the busy-poll demo (the same load
/// generator as the other backends) with the mlx5 driver on the device model on our end of the
/// tier's wire, the C peer as the target on rxe in namespace `peer` (`examples/src/bin/demo_wire.rs`).
/// Boots the tier's guest; prints the demo's tables.
fn wire(args: &[String]) -> bool {
    let mut pass: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--backend" {
            it.next();
        } else {
            pass.push(a.clone());
        }
    }
    let peer = match build_c_peer() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: demo wire: {e}");
            return false;
        }
    };
    let bin = match examples::build_examples_bin("demo_wire") {
        Ok(b) => b,
        Err(e) => {
            eprintln!("xtask: demo wire: {e}");
            return false;
        }
    };
    if let Some(why) = vm_unavailable() {
        eprintln!("xtask: demo wire: {why}");
        return false;
    }
    let script = format!(
        "{NET_SETUP}\n\
         gp=$(gidx_of rxep 0000:0000:0000:0000:0000:ffff:0a03:0002)\n\
         ip netns exec peer timeout 600 /t/wire_peer -d rxep -g $gp -r target -p 18620 > /t/peer.log 2>&1 &\n\
         /t/demo-wire --if wm --addr 10.3.0.1 --peer 10.3.0.2 --ctl 10.9.0.2:18620 {}\n\
         rc=$?\n\
         wait $!\n\
         prc=$?\n\
         cat /t/peer.log\n\
         echo \"XTASK-DEMO-RC=$rc PEER=$prc\"\n",
        pass.join(" ")
    );
    let files =
        vec![GuestFile::dynamic(&bin, "/t/demo-wire"), GuestFile::dynamic(&peer, "/t/wire_peer")];
    let g = guest_without_net("wire-demo", files, script);
    match g.boot(Duration::from_secs(900)) {
        Ok(s) => {
            let out = s.script_output();
            print!("{out}");
            out.lines().any(|l| l.trim() == "XTASK-DEMO-RC=0 PEER=0")
        }
        Err(e) => {
            eprintln!("xtask: demo wire: {e}");
            false
        }
    }
}

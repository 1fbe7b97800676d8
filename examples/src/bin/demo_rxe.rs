//! The demo's soft-RoCE backend: the same load generator as on the mlx5 model, over
//! `rdma-pmd-rxe`. Both ends run in this process, connected through rdma_cm on an rxe device:
//! a passive thread registers the destination and accepts; the active side posts.
//!
//! Run by `cargo xtask demo --backend rxe` (natively where `rdma link` shows an rxe device,
//! otherwise inside the rxe test VM). `--addr A` names the rxe netdev's address.

use std::process::ExitCode;
use std::sync::mpsc::channel;
use std::time::Duration;

use loadgen::{fill_pattern, Buffers, Host, Plan};
use rdma_pmd::{RemoteBuf, Rkey};
use rdma_pmd_rxe::peer::TargetInfo;
use rdma_pmd_rxe::{Conn, Listener, QpConfig, Region, RxeQp};

const STAMP_CELLS: usize = 64;
const SLOTS: usize = 64;
const MAX_PIECES: usize = 3;
const WAIT: Duration = Duration::from_secs(30);

/// The destination as the passive thread hands it over: its bytes' address in this process.
#[derive(Clone, Copy)]
struct Dest {
    ptr: usize,
    len: usize,
}

struct RxeHost<'a> {
    stamps: &'a Region<'a>,
    dest: Dest,
}

impl Host for RxeHost<'_> {
    fn write_stamp(&mut self, cell: usize, value: u64) {
        self.stamps.write(cell * 8, &value.to_le_bytes()).expect("stamp cell in bounds");
    }
    fn read_dest(&mut self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.dest.len, "destination read in bounds");
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: the passive thread keeps the registered destination alive until this side
            // says it is done (after the last read), and `off + i` is inside it (checked above);
            // the device writes it concurrently, hence volatile byte reads and no reference.
            *b = unsafe { ((self.dest.ptr + off + i) as *const u8).read_volatile() };
        }
    }
}

fn main() -> ExitCode {
    let mut addr = "10.0.0.1".to_string();
    let mut plan =
        Plan { writes: 20_000, batch: 8, signal_every: 8, piece_len: 32, ..Plan::default() };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let v = it.next().unwrap_or_default();
        match a.as_str() {
            "--addr" => addr = v,
            "--writes" => plan.writes = v.parse().unwrap_or(plan.writes),
            "--batch" => plan.batch = v.parse().unwrap_or(plan.batch),
            _ => {
                eprintln!("demo_rxe: unknown option {a}");
                return ExitCode::from(2);
            }
        }
    }
    plan.pieces = vec![1, 2, 3];
    plan.progress_every = (plan.writes / 4).max(1);
    match run(&addr, &plan) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo_rxe: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(addr: &str, plan: &Plan) -> Result<(), String> {
    let slot_len = 8 + MAX_PIECES * plan.piece_len;
    let (ready_tx, ready_rx) = channel::<Result<Dest, String>>();
    let (done_tx, done_rx) = channel::<()>();
    let listen_addr = addr.to_string();
    let passive = std::thread::spawn(move || -> Result<(), String> {
        let e = |what: &'static str| move |err: rdma_pmd::Error| format!("{what}: {err}");
        let l = Listener::bind(&listen_addr, 7700).map_err(e("listen"))?;
        let conn = l.get_request().map_err(e("get request"))?;
        let dst =
            Region::write_target(&conn, SLOTS * slot_len).map_err(e("register destination"))?;
        let mut qp = RxeQp::create(&conn, QpConfig::default()).map_err(e("create QP"))?;
        let r = dst.remote();
        let info = TargetInfo { addr: r.addr, rkey: r.rkey.get(), len: dst.len() as u32 };
        qp.accept(&info.to_bytes()).map_err(e("accept"))?;
        // The region's key-space address is its address in this process (verbs MR).
        ready_tx.send(Ok(Dest { ptr: r.addr as usize, len: dst.len() })).ok();
        done_rx.recv_timeout(WAIT * 20).ok();
        drop(qp);
        drop(dst);
        Ok(())
    });
    std::thread::sleep(Duration::from_millis(200));
    let e = |what: &'static str| move |err: rdma_pmd::Error| format!("{what}: {err}");
    let conn = Conn::resolve(addr, 7700).map_err(e("resolve"))?;
    let stamps = Region::msgs(&conn, STAMP_CELLS * 8).map_err(e("register stamps"))?;
    let pieces = Region::msgs(&conn, MAX_PIECES * plan.piece_len).map_err(e("register pieces"))?;
    let mut tmp = vec![0u8; plan.piece_len];
    for p in 0..MAX_PIECES {
        fill_pattern(p, &mut tmp);
        pieces.write(p * plan.piece_len, &tmp).map_err(e("fill pattern"))?;
    }
    let cfg = QpConfig { max_send_wr: 128, max_sge: 8, max_inline: 64, ..QpConfig::default() };
    let mut qp = RxeQp::create(&conn, cfg).map_err(e("create QP"))?;
    qp.connect(&[]).map_err(e("connect"))?;
    let dest =
        ready_rx.recv_timeout(WAIT).map_err(|_| "passive side never got ready".to_string())??;
    let peer = TargetInfo::from_bytes(&conn.peer_data()).map_err(e("peer data"))?;
    println!("connected over rdma_cm to {addr}:7700 (RC on soft-RoCE)");
    let bufs = Buffers {
        stamps: (0..STAMP_CELLS)
            .map(|c| stamps.buf(c * 8, 8))
            .collect::<Result<_, _>>()
            .map_err(e("slice"))?,
        pieces: (0..MAX_PIECES)
            .map(|p| pieces.buf(p * plan.piece_len, plan.piece_len))
            .collect::<Result<_, _>>()
            .map_err(e("slice"))?,
        remote: RemoteBuf::new(peer.addr, Rkey(peer.rkey)),
        slots: SLOTS as u64,
        slot_len,
    };
    let mut host = RxeHost { stamps: &stamps, dest };
    let rep = loadgen::run(&mut qp, &bufs, &mut host, plan);
    done_tx.send(()).ok();
    let rep = rep.map_err(e("load"))?;
    println!("{}", rep.table("busy-poll writev on soft-RoCE (rxe)"));
    drop(bufs);
    drop(qp);
    passive.join().map_err(|_| "passive thread panicked".to_string())??;
    Ok(())
}

//! `cargo xtask demo`: the busy-poll writev demo, then READs and SENDs.
//!
//! Connects two RC queue pairs, posts scatter-gather RDMA WRITEs (mixed SGE counts, inline and
//! gathered, in batches with selective signalling), busy-polls their completions, verifies every
//! destination byte, and prints messages/s, GB/s and completion-latency percentiles; then the
//! same for RDMA READs into buffers handed back by their completions, and for SENDs into
//! receives that scatter over two buffers.
//!
//! Backends: `model` (default): the mlx5 driver on the software mlx5 device model, two QPs
//! connected in loopback. Other backends are run by their own tiers (see README).
//!
//! Options: `--writes N` `--batch N` `--signal-every N` `--piece-len BYTES` `--no-verify`
//! `--mode write|read|send|all` (default `all`: the READ and SEND runs post a fifth as many).

use std::process::ExitCode;

use loadgen::{fill_pattern, Buffers, Host, Plan};
use rdma_pmd::SendQueue;
use rdma_pmd_hal::mem::MemBar;
use rdma_pmd_hal::StdClock;
use rdma_pmd_mlx5::control::bringup::{bitmap_words, Hca, HcaConfig, PagePool};
use rdma_pmd_mlx5::control::fw::FwControl;
use rdma_pmd_mlx5::control::{Access, Control};
use rdma_pmd_mlx5::{Mlx5, QpConfig, Region, SharedDma};
use rdma_pmd_mlx5_model::fw::{Firmware, FwConfig};
use rdma_pmd_mlx5_model::Model;

const STAMP_CELLS: usize = 256;
const SLOTS: usize = 256;
const MAX_PIECES: usize = 4;
/// Firmware pages the driver can lend (4 KiB each).
const POOL_PAGES: usize = 1024;

/// Which runs the demo makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Write,
    Read,
    Send,
    All,
}

fn parse(args: &[String]) -> Result<(String, Mode, Plan), String> {
    let mut plan = Plan { writes: 1_000_000, progress_every: 200_000, ..Plan::default() };
    let mut backend = "model".to_string();
    let mut mode = Mode::All;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            it.next().and_then(|v| v.parse().ok()).ok_or_else(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--backend" => backend = it.next().cloned().ok_or("--backend needs a name")?,
            "--writes" => plan.writes = num("--writes")?,
            "--batch" => plan.batch = num("--batch")? as u32,
            "--signal-every" => plan.signal_every = num("--signal-every")? as u32,
            "--piece-len" => plan.piece_len = num("--piece-len")? as usize,
            "--no-verify" => plan.verify = false,
            "--mode" => {
                mode = match it.next().map(|s| s.as_str()) {
                    Some("write") => Mode::Write,
                    Some("read") => Mode::Read,
                    Some("send") => Mode::Send,
                    Some("all") => Mode::All,
                    _ => return Err("--mode needs write, read, send or all".into()),
                }
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    plan.progress_every = (plan.writes / 5).max(1);
    Ok((backend, mode, plan))
}

struct RegionHost<'a, C: Control> {
    stamps: &'a Region<'a, MemBar, SharedDma<std::sync::Arc<rdma_pmd_hal::mem::HeapDma>>, C>,
    dst: &'a Region<'a, MemBar, SharedDma<std::sync::Arc<rdma_pmd_hal::mem::HeapDma>>, C>,
}

impl<C: Control> Host for RegionHost<'_, C> {
    fn write_stamp(&mut self, cell: usize, value: u64) {
        self.stamps.write(cell * 8, &value.to_le_bytes()).expect("stamp cell in bounds");
    }
    fn read_dest(&mut self, off: usize, out: &mut [u8]) {
        self.dst.read(off, out).expect("destination in bounds");
    }
}

fn run_model(mode: Mode, plan: &Plan) -> Result<(), String> {
    // The device: a software ConnectX with its firmware. Everything below reaches it only
    // through the BAR and DMA memory, as the driver would reach real hardware over VFIO.
    let model = Model::new();
    let fw =
        Firmware::start(&model, FwConfig::default()).map_err(|e| format!("firmware: {e:?}"))?;
    let (bar, dma, clock) = (fw.bar(), model.dma(), StdClock::default());
    let mut bits = vec![0u64; bitmap_words(POOL_PAGES)];
    let pool = PagePool::new(&mut bits, POOL_PAGES);
    let mut hca = Hca::bring_up(&bar, &*dma, &clock, pool, HcaConfig::default())
        .map_err(|e| format!("bring-up: {e}"))?;
    println!("bring-up over the command interface:\n{}", hca.report());
    traffic(&model, &bar, &dma, &mut hca, mode, plan)?;
    let t = hca.teardown().map_err(|e| format!("teardown: {e}"))?;
    println!(
        "teardown: {} firmware pages reclaimed, {} outstanding",
        t.pages_reclaimed, t.pages_outstanding
    );
    if t.pages_outstanding != 0 {
        return Err("firmware kept pages after teardown".into());
    }
    Ok(())
}

fn traffic(
    model: &Model,
    bar: &MemBar,
    dma: &std::sync::Arc<rdma_pmd_hal::mem::HeapDma>,
    hca: &mut Hca<'_>,
    mode: Mode,
    plan: &Plan,
) -> Result<(), String> {
    let dev = Mlx5::open(bar.clone(), SharedDma(dma.clone()), FwControl::new(hca))
        .map_err(|e| format!("open: {e}"))?;
    let caps = dev.caps();
    println!(
        "device: mlx5 device model; log_max_qp_sz {}, max_wqe_sz_sq {} B, BlueFlame register {} B",
        caps.log_max_qp_sz,
        caps.max_wqe_sz_sq,
        1u32 << caps.log_bf_reg_size
    );
    let e = |what: &'static str| move |err: rdma_pmd::Error| format!("{what}: {err}");
    let slot_len = 8 + MAX_PIECES * plan.piece_len;
    let stamps = dev.reg(STAMP_CELLS * 8, Access::LOCAL_WRITE).map_err(e("register stamps"))?;
    let pieces =
        dev.reg(MAX_PIECES * plan.piece_len, Access::LOCAL_WRITE).map_err(e("register pieces"))?;
    let dst = dev
        .reg(SLOTS * slot_len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .map_err(e("register destination"))?;
    let mut tmp = vec![0u8; plan.piece_len];
    for p in 0..MAX_PIECES {
        fill_pattern(p, &mut tmp);
        pieces.write(p * plan.piece_len, &tmp).map_err(e("fill pattern"))?;
    }
    // READs read from `src` into buffers carved from `rd`; SENDs land in buffers carved from
    // `rx`. Both are lent to the QPs for as long as the QPs live (declared before them).
    const READ_LEN: usize = 256;
    let src = dev
        .reg(SLOTS * READ_LEN, Access::LOCAL_WRITE | Access::REMOTE_READ)
        .map_err(e("register READ source"))?;
    let fill: Vec<u8> = (0..SLOTS * READ_LEN).map(loadgen::read_source_byte).collect();
    src.write(0, &fill).map_err(e("fill READ source"))?;
    let mut rd = dev.reg(64 * READ_LEN, Access::LOCAL_WRITE).map_err(e("register READ dest"))?;
    let mut rx = dev.reg(64 * slot_len, Access::LOCAL_WRITE).map_err(e("register receives"))?;
    let mut a = dev.create_qp::<1024, 64>(&QpConfig::default()).map_err(e("create QP a"))?;
    let mut b = dev.create_qp::<1024, 64>(&QpConfig::default()).map_err(e("create QP b"))?;
    let (na, nb) = (a.qp_num(), b.qp_num());
    let opts = rdma_pmd_mlx5::ConnectOpts {
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        ..Default::default()
    };
    let path = rdma_pmd_mlx5::control::Path::Loopback;
    a.connect(nb, path, &opts).map_err(e("connect a"))?;
    b.connect(na, path, &opts).map_err(e("connect b"))?;
    println!("connected: QP {na} -> QP {nb} (RC, loopback); caps {:?}", a.caps());
    let bufs = Buffers {
        stamps: (0..STAMP_CELLS)
            .map(|c| stamps.slice(c * 8, 8))
            .collect::<Result<_, _>>()
            .map_err(e("slice"))?,
        pieces: (0..MAX_PIECES)
            .map(|p| pieces.slice(p * plan.piece_len, plan.piece_len))
            .collect::<Result<_, _>>()
            .map_err(e("slice"))?,
        remote: dst.remote(0),
        slots: SLOTS as u64,
        slot_len,
    };
    let mut host = RegionHost { stamps: &stamps, dst: &dst };
    println!(
        "posting {} writes: batches of {}, 1 in {} signalled, 1..{} pieces of {} B after an 8 B stamp, every {}th inline",
        plan.writes,
        plan.batch,
        plan.signal_every,
        MAX_PIECES,
        plan.piece_len,
        plan.inline_every
    );
    if matches!(mode, Mode::Write | Mode::All) {
        let rep = loadgen::run(&mut a, &bufs, &mut host, plan).map_err(e("load"))?;
        println!("{}", rep.table("busy-poll writev on the mlx5 device model"));
    }
    let small = Plan {
        writes: if mode == Mode::All { (plan.writes / 5).max(1) } else { plan.writes },
        ..plan.clone()
    };
    if matches!(mode, Mode::Read | Mode::All) {
        let dests = carve(rd.dest().map_err(e("READ buffers"))?, READ_LEN, 64)?;
        println!("posting {} READs of {READ_LEN} B in batches of {}", small.writes, small.batch);
        let rep = loadgen::run_reads(&mut a, dests, src.remote(0), SLOTS as u64, READ_LEN, &small)
            .map_err(e("reads"))?;
        println!(
            "{}",
            rep.table("busy-poll readv on the mlx5 device model").replace("writes  ", "READs   ")
        );
    }
    if matches!(mode, Mode::Send | Mode::All) {
        let bufs_rx = carve(rx.dest().map_err(e("receive buffers"))?, slot_len, 64)?;
        println!("posting {} SENDs into receives scattering over two buffers", small.writes);
        let rep = loadgen::run_sends(&mut a, &mut b, bufs_rx, &bufs, &mut host, &small)
            .map_err(e("sends"))?;
        println!(
            "{}",
            rep.table("busy-poll sendv/recvv on the mlx5 device model")
                .replace("writes  ", "SENDs   ")
        );
    }
    let c = model.counters();
    println!("model: {c:?}");
    if !model.violations().is_empty() {
        return Err(format!("the model saw protocol violations: {:?}", model.violations()));
    }
    drop(b);
    drop(a);
    Ok(())
}

/// `n` buffers of `len` bytes carved from `d`.
fn carve(
    mut d: rdma_pmd::DestBuf<'_>,
    len: usize,
    n: usize,
) -> Result<Vec<rdma_pmd::DestBuf<'_>>, String> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let rest = d.split_off(len).map_err(|e| format!("carve: {e}"))?;
        out.push(d);
        d = rest;
    }
    Ok(out)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (backend, mode, plan) = match parse(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("demo: {e}");
            return ExitCode::from(2);
        }
    };
    let res = match backend.as_str() {
        "model" => run_model(mode, &plan),
        other => Err(format!("backend {other:?} is not available in this binary (see README)")),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::FAILURE
        }
    }
}

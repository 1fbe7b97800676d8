//! `cargo xtask demo`: the busy-poll writev demo.
//!
//! Connects two RC queue pairs, posts scatter-gather RDMA WRITEs (mixed SGE counts, inline and
//! gathered, in batches with selective signalling), busy-polls their completions, verifies every
//! destination byte, and prints messages/s, GB/s and completion-latency percentiles.
//!
//! Backends: `model` (default): the mlx5 driver on the software mlx5 device model, two QPs
//! connected in loopback. Other backends are run by their own tiers (see README).
//!
//! Options: `--writes N` `--batch N` `--signal-every N` `--piece-len BYTES` `--no-verify`.

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

fn parse(args: &[String]) -> Result<(String, Plan), String> {
    let mut plan = Plan { writes: 1_000_000, progress_every: 200_000, ..Plan::default() };
    let mut backend = "model".to_string();
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
            other => return Err(format!("unknown option {other}")),
        }
    }
    plan.progress_every = (plan.writes / 5).max(1);
    Ok((backend, plan))
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

fn run_model(plan: &Plan) -> Result<(), String> {
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
    traffic(&model, &bar, &dma, &mut hca, plan)?;
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
    let mut a = dev.create_qp::<1024, 16>(&QpConfig::default()).map_err(e("create QP a"))?;
    let mut b = dev.create_qp::<1024, 16>(&QpConfig::default()).map_err(e("create QP b"))?;
    let (na, nb) = (a.qp_num(), b.qp_num());
    a.connect_loopback(nb).map_err(e("connect a"))?;
    b.connect_loopback(na).map_err(e("connect b"))?;
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
    let rep = loadgen::run(&mut a, &bufs, &mut host, plan).map_err(e("load"))?;
    println!("{}", rep.table("busy-poll writev on the mlx5 device model"));
    let c = model.counters();
    println!("model: {c:?}");
    if !model.violations().is_empty() {
        return Err(format!("the model saw protocol violations: {:?}", model.violations()));
    }
    drop(b);
    drop(a);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (backend, plan) = match parse(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("demo: {e}");
            return ExitCode::from(2);
        }
    };
    let res = match backend.as_str() {
        "model" => run_model(&plan),
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

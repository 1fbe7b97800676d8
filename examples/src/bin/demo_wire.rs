//! The demo's wire backend: the mlx5 driver on the device model whose port is an `AF_PACKET`
//! socket on a real Ethernet interface, against the kernel's rdma_rxe on the other end, with
//! the project's C verbs peer (`examples/c/wire_peer.c`, role `target`) exposing the region.
//! The same load generator as the other backends posts the WRITEs and then the READs.
//!
//! Run by `cargo xtask demo --backend wire` inside the `wire` tier's guest (see
//! `xtask/src/tiers/wire.rs`): our end `wm` has no address, the C target listens on the
//! control link. The driver resolves the peer's MAC by ARP and answers the kernel's (its
//! `EthPort`, polled whenever the loop waits).
//!
//! Checks: the WRITE run cannot read the remote region while it posts, so every slot is READ
//! back afterwards and must hold the last write into it (its stamp and pattern); the READ run
//! reads a source it first WRITEs and compares every READ. SENDs are not run (the C target
//! posts six receives for its own plan).
//!
//! Options: `--if IF` `--addr A` `--peer A` `--ctl HOST:PORT` `--writes N` `--batch N`.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loadgen::{fill_pattern, pattern_byte, Buffers, Host, Plan};
use rdma_pmd::{Mac, Post, QpNum, RemoteBuf, Rkey, SendFlags, SendQueue, WcStatus};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::{Clock, StdClock};
use rdma_pmd_mlx5::control::bringup::{bitmap_words, Hca, HcaConfig, PagePool};
use rdma_pmd_mlx5::control::fw::FwControl;
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::{ConnectOpts, EthConfig, EthPort, Mlx5, QpConfig, Region, SharedDma};
use rdma_pmd_mlx5_model::fw::{Firmware, FwConfig};
use rdma_pmd_mlx5_model::peers::wire_peer::Dest;
use rdma_pmd_mlx5_model::roce::port::PacketSocket;
use rdma_pmd_mlx5_model::{Gid, Model, ModelConfig};

/// The model's MAC on the wire (locally administered, as the wire tests').
const OUR_MAC: Mac = Mac([0x02, 0x4d, 0x4c, 0x35, 0x00, 0x03]);
const STAMP_CELLS: usize = 256;
const SLOTS: usize = 256;
const MAX_PIECES: usize = 4;
const READ_LEN: usize = 256;
/// Where the READ source lies in the target's region (after the WRITE slots).
const READ_OFF: u64 = 512 * 1024;
const POOL_PAGES: usize = 1024;
const PATIENCE: Duration = Duration::from_secs(60);

type D = SharedDma<Arc<HeapDma>>;
type Dev<'h> = Mlx5<MemBar, D, FwControl<'h, 'h>>;
type Eth<'d, 'h> = EthPort<'d, MemBar, D, FwControl<'h, 'h>>;
type Reg<'d, 'h> = Region<'d, MemBar, D, FwControl<'h, 'h>>;

struct Args {
    ifname: String,
    addr: Ipv4Addr,
    peer: Ipv4Addr,
    ctl: String,
    plan: Plan,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        ifname: "wm".into(),
        addr: Ipv4Addr::new(10, 3, 0, 1),
        peer: Ipv4Addr::new(10, 3, 0, 2),
        ctl: "10.9.0.2:18620".into(),
        plan: Plan { writes: 20_000, batch: 8, signal_every: 8, ..Plan::default() },
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().ok_or(format!("{k} needs a value"))?;
        let bad = |_: std::net::AddrParseError| format!("{k}: {v:?}");
        let num = |_: std::num::ParseIntError| format!("{k}: {v:?}");
        match k.as_str() {
            "--if" => a.ifname = v,
            "--addr" => a.addr = v.parse().map_err(bad)?,
            "--peer" => a.peer = v.parse().map_err(bad)?,
            "--ctl" => a.ctl = v,
            "--writes" => a.plan.writes = v.parse().map_err(num)?,
            "--batch" => a.plan.batch = v.parse().map_err(num)?,
            _ => return Err(format!("unknown option {k}")),
        }
    }
    // The WRITE run is checked by READing back after it, not per completion.
    a.plan.verify = false;
    a.plan.progress_every = (a.plan.writes / 5).max(1);
    Ok(a)
}

/// The Ethernet port and its clock: polled whenever the demo waits.
struct Net<'d, 'h> {
    eth: Eth<'d, 'h>,
    clock: StdClock,
}

impl Net<'_, '_> {
    fn poll(&mut self) {
        if let Err(e) = self.eth.poll_eth(self.clock.now_ns()) {
            eprintln!("demo_wire: Ethernet port: {e}");
        }
    }
}

struct WireHost<'a, 'd, 'h> {
    stamps: &'a Reg<'d, 'h>,
    net: &'a mut Net<'d, 'h>,
}

impl Host for WireHost<'_, '_, '_> {
    fn write_stamp(&mut self, cell: usize, value: u64) {
        self.stamps.write(cell * 8, &value.to_le_bytes()).expect("stamp cell in bounds");
    }
    fn read_dest(&mut self, _off: usize, _out: &mut [u8]) {
        unreachable!("the wire backend checks the WRITEs by READing back after the run")
    }
    fn idle(&mut self) {
        self.net.poll();
    }
}

/// A line from the control stream, polling the port while it waits.
fn read_line(s: &mut TcpStream, net: &mut Net<'_, '_>) -> Result<String, String> {
    s.set_read_timeout(Some(Duration::from_millis(5))).map_err(|e| e.to_string())?;
    let (mut line, start) = (Vec::new(), Instant::now());
    let mut b = [0u8; 1];
    while line.last() != Some(&b'\n') {
        match s.read(&mut b) {
            Ok(0) => return Err("the peer closed the control stream".into()),
            Ok(_) => line.push(b[0]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                net.poll();
                if start.elapsed() > PATIENCE {
                    return Err("nothing from the peer".into());
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

fn connect_ctl(addr: &str) -> Result<TcpStream, String> {
    let start = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return Ok(s),
            Err(e) if start.elapsed() > PATIENCE => return Err(format!("connect {addr}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn main() -> ExitCode {
    let res = parse().and_then(|a| run(&a));
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo_wire: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Result<(), String> {
    let sock = PacketSocket::open(&a.ifname, None).map_err(|e| format!("{}: {e}", a.ifname))?;
    let gids = vec![Gid { gid: a.addr.to_ipv6_mapped().octets(), mac: OUR_MAC.0 }];
    let model = Model::with_config(ModelConfig { gids, ..ModelConfig::default() }.with_port(sock))
        .map_err(|e| format!("model: {e}"))?;
    let fw =
        Firmware::start(&model, FwConfig::default()).map_err(|e| format!("firmware: {e:?}"))?;
    let (bar, dma, clock) = (fw.bar(), model.dma(), StdClock::default());
    let mut bits = vec![0u64; bitmap_words(POOL_PAGES)];
    let pool = PagePool::new(&mut bits, POOL_PAGES);
    let mut hca = Hca::bring_up(&bar, &*dma, &clock, pool, HcaConfig::default())
        .map_err(|e| format!("bring-up: {e}"))?;
    let dev: Dev<'_> = Mlx5::open(bar.clone(), SharedDma(dma.clone()), FwControl::new(&mut hca))
        .map_err(|e| format!("open: {e}"))?;
    traffic(&dev, a)?;
    let v = model.violations();
    println!("model: {:?}", model.counters());
    if !v.is_empty() {
        return Err(format!("the model saw protocol violations: {v:?}"));
    }
    Ok(())
}

fn traffic(dev: &Dev<'_>, a: &Args) -> Result<(), String> {
    let e = |what: &'static str| move |err: rdma_pmd::Error| format!("{what}: {err}");
    dev.set_gid(0, IpAddr::V4(a.addr)).map_err(e("SET_ROCE_ADDRESS"))?;
    let mut eth = dev.eth_port(&EthConfig::default()).map_err(e("Ethernet port"))?;
    eth.add_address(a.addr).map_err(e("address"))?;
    let mut net = Net { eth, clock: StdClock::default() };
    let peer_mac = net.eth.resolve(a.peer, &net.clock).map_err(e("ARP"))?;
    println!(
        "device: mlx5 device model on {} ({}), peer {} at {peer_mac:?} by ARP",
        a.ifname, a.addr, a.peer
    );

    let plan = &a.plan;
    let slot_len = 8 + MAX_PIECES * plan.piece_len;
    let stamps = dev.reg(STAMP_CELLS * 8, Access::LOCAL_WRITE).map_err(e("register stamps"))?;
    let pieces =
        dev.reg(MAX_PIECES * plan.piece_len, Access::LOCAL_WRITE).map_err(e("register pieces"))?;
    let mut tmp = vec![0u8; plan.piece_len];
    for p in 0..MAX_PIECES {
        fill_pattern(p, &mut tmp);
        pieces.write(p * plan.piece_len, &tmp).map_err(e("fill pattern"))?;
    }
    let back_len = SLOTS * slot_len;
    let mut back =
        dev.reg(back_len.max(SLOTS * READ_LEN), Access::LOCAL_WRITE).map_err(e("register"))?;
    let mut rd = dev.reg(64 * READ_LEN, Access::LOCAL_WRITE).map_err(e("register READ dest"))?;
    let fill: Vec<u8> = (0..SLOTS * READ_LEN).map(loadgen::read_source_byte).collect();
    let src = dev.reg(fill.len(), Access::LOCAL_WRITE).map_err(e("register READ source"))?;
    src.write(0, &fill).map_err(e("fill"))?;
    let mut qp = dev.create_qp::<1024, 64>(&QpConfig::default()).map_err(e("create QP"))?;

    let mut ctl = connect_ctl(&a.ctl)?;
    let psn = rdma_pmd::PsnGen::new(clock_seed()).next_psn();
    let ours = Dest {
        qpn: qp.qp_num().0,
        psn,
        gid: a.addr.to_ipv6_mapped().octets(),
        addr: 0,
        rkey: 0,
        len: 0,
    };
    ctl.write_all(ours.line().as_bytes()).map_err(|e| e.to_string())?;
    let theirs = Dest::parse(&read_line(&mut ctl, &mut net)?).ok_or("the target's line")?;
    if (theirs.len as usize) < READ_OFF as usize + SLOTS * READ_LEN || back_len > READ_OFF as usize
    {
        return Err(format!("the target's region ({} B) is too small", theirs.len));
    }
    let opts = ConnectOpts {
        access: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        mtu: 3,
        rq_psn: theirs.psn,
        sq_psn: psn,
        ..ConnectOpts::default()
    };
    let flow = 0xc000 | (theirs.qpn as u16 & 0x3fff);
    qp.connect_roce_v2(QpNum(theirs.qpn), theirs.gid, peer_mac.0, 0, flow, &opts)
        .map_err(e("connect"))?;
    println!(
        "connected: QP {} -> rxe QP {} (RC over RoCE v2, path MTU 1024)",
        qp.qp_num().0,
        theirs.qpn
    );
    let remote = RemoteBuf::new(theirs.addr, Rkey(theirs.rkey));

    let bufs = Buffers {
        stamps: (0..STAMP_CELLS)
            .map(|c| stamps.slice(c * 8, 8))
            .collect::<Result<_, _>>()
            .map_err(e("slice"))?,
        pieces: (0..MAX_PIECES)
            .map(|p| pieces.slice(p * plan.piece_len, plan.piece_len))
            .collect::<Result<_, _>>()
            .map_err(e("slice"))?,
        remote,
        slots: SLOTS as u64,
        slot_len,
    };
    println!(
        "posting {} writes: batches of {}, 1 in {} signalled, 1..{} pieces of {} B after an 8 B stamp, every {}th inline",
        plan.writes, plan.batch, plan.signal_every, MAX_PIECES, plan.piece_len, plan.inline_every
    );
    let rep = {
        let mut host = WireHost { stamps: &stamps, net: &mut net };
        loadgen::run(&mut qp, &bufs, &mut host, plan).map_err(e("load"))?
    };
    // Every slot READ back: it holds the last write into it.
    let dest = back.dest().map_err(e("READ-back buffer"))?;
    let p = qp
        .post_read(1 << 40, dest, SendFlags::SIGNALED, remote)
        .map_err(|r| r.error)
        .map_err(e("READ back"))?;
    wait_one(&mut qp, 1 << 40, &mut net)?;
    let dest = p.reclaim(&qp).map_err(|_| "the READ-back buffer not handed back")?;
    let mut got = vec![0u8; back_len];
    dest.read(0, &mut got).map_err(e("read"))?;
    let mut checked = 0;
    for slot in 0..SLOTS as u64 {
        let Some(i) = (0..plan.writes).rev().find(|i| i % SLOTS as u64 == slot) else { continue };
        let n = plan.pieces[(i % plan.pieces.len() as u64) as usize];
        let at = slot as usize * slot_len;
        let s = &got[at..at + 8 + n * plan.piece_len];
        let ok = s[..8] == i.to_le_bytes()
            && (0..n).all(|p| {
                let piece = &s[8 + p * plan.piece_len..8 + (p + 1) * plan.piece_len];
                piece.iter().enumerate().all(|(k, b)| *b == pattern_byte(p, k))
            });
        if !ok {
            return Err(format!("slot {slot} does not hold write {i}"));
        }
        checked += 1;
    }
    println!("{}", rep.table("busy-poll writev across the wire to rxe"));
    println!("  every slot READ back after the run: {checked} slots hold their last write");

    // The READ source: written first, then READ piece by piece and compared.
    let whole = src.slice(0, fill.len()).map_err(e("slice"))?;
    qp.post_writev(1 << 41, &[whole], SendFlags::SIGNALED, remote.offset(READ_OFF))
        .map_err(e("WRITE the READ source"))?;
    wait_one(&mut qp, 1 << 41, &mut net)?;
    let small = Plan { writes: (plan.writes / 5).max(1), verify: true, ..plan.clone() };
    let mut d = rd.dest().map_err(e("READ buffers"))?;
    let mut dests = Vec::with_capacity(64);
    for _ in 0..63 {
        let rest = d.split_off(READ_LEN).map_err(e("carve"))?;
        dests.push(d);
        d = rest;
    }
    dests.push(d);
    println!("posting {} READs of {READ_LEN} B in batches of {}", small.writes, small.batch);
    let rep = loadgen::run_reads_idle(
        &mut qp,
        dests,
        remote.offset(READ_OFF),
        SLOTS as u64,
        READ_LEN,
        &small,
        &mut || net.poll(),
    )
    .map_err(e("reads"))?;
    println!(
        "{}",
        rep.table("busy-poll readv across the wire to rxe").replace("writes  ", "READs   ")
    );
    println!(
        "SENDs: not run on the wire backend (the C target posts receives for its own plan only)"
    );

    ctl.write_all(b"bye\n").map_err(|e| e.to_string())?;
    let verdict = read_line(&mut ctl, &mut net)?;
    if verdict.trim() != "ok" {
        return Err(format!("the target says {verdict:?}"));
    }
    let s = net.eth.arp_stats();
    println!(
        "ARP: {} requests sent, {} answered, {} learned",
        s.requests_sent, s.replied, s.learned
    );
    drop(qp);
    let _ = back;
    Ok(())
}

/// Wait for the one signalled request `wr_id`, polling the port.
fn wait_one<'r, Q: SendQueue<'r>>(
    q: &mut Q,
    wr_id: u64,
    net: &mut Net<'_, '_>,
) -> Result<(), String> {
    let mut wc = [rdma_pmd::Completion::default(); 1];
    let start = Instant::now();
    loop {
        if q.poll(&mut wc).map_err(|e| e.to_string())? == 1 {
            let c = wc[0];
            if (c.wr_id, c.status) != (wr_id, WcStatus::Success) {
                return Err(format!("completion {c:?}"));
            }
            return Ok(());
        }
        net.poll();
        if start.elapsed() > PATIENCE {
            return Err(format!("no completion for {wr_id}"));
        }
    }
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

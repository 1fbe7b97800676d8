//! `cm_rping IF OUR_IP PEER_IP [COUNT [SIZE]]`: rping's client on the mlx5 driver, connecting
//! through the connection manager to a Linux host's `rping -s -a PEER_IP -V`.
//!
//! The driver runs on the device model, whose port is an `AF_PACKET` socket on interface `IF`
//! (root, or `CAP_NET_RAW`): the model owns `OUR_IP` with MAC 02:4d:4c:35:00:02. Neighbours
//! by ARP both ways: the driver's Ethernet port answers the host's requests for `OUR_IP` and
//! resolves `PEER_IP` (`ArpGsiPort`). The protocol is rping's
//! (`librdmacm/examples/rping.c`): per ping, SEND {be64 addr, be32 rkey, be32 size} of the
//! start buffer (the server READs it), wait for the go-ahead, SEND the sink's (the server
//! WRITEs the data back), wait, compare; then disconnect. See the README's walkthrough; the
//! `wire` tier runs the same exchange (`drivers/mlx5/tests/wire_cm.rs`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_pmd::cm::mad::RejReason;
use rdma_pmd::cm::{Cm, CmConfig, ConnectParams, Event, EventKind, Micros, QpParams};
use rdma_pmd::{Completion, Gid, Mac, Post, RecvQueue, SendFlags, SendQueue, WcStatus};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::StdClock;
use rdma_pmd_mlx5::cm::{ArpGsiPort, GsiPort, GSI_RQ, RX_SLOT};
use rdma_pmd_mlx5::control::bringup::{bitmap_words, Hca, HcaConfig, PagePool};
use rdma_pmd_mlx5::control::fw::FwControl;
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::{EthConfig, Mlx5, QpConfig, SharedDma};
use rdma_pmd_mlx5_model::fw::{Firmware, FwConfig};
use rdma_pmd_mlx5_model::roce::port::PacketSocket;
use rdma_pmd_mlx5_model::{Gid as ModelGid, Model, ModelConfig};

type Dev = Mlx5<MemBar, SharedDma<Arc<HeapDma>>, FwControl<'static, 'static>>;

const OUR_MAC: Mac = Mac([0x02, 0x4d, 0x4c, 0x35, 0x00, 0x02]);
const RPING_PORT: u16 = 7174;
const POOL_PAGES: usize = 256;
/// The longest any step may take: the server starting, a ping.
const LIMIT: Duration = Duration::from_secs(30);

/// Bring the model's HCA up over the command interface and open the driver on it.
fn open(model: &Model) -> Result<Dev, String> {
    let fw: &'static Firmware = Box::leak(Box::new(
        Firmware::start(model, FwConfig::default()).map_err(|e| format!("firmware: {e:?}"))?,
    ));
    let bar: &'static MemBar = Box::leak(Box::new(fw.bar()));
    let dma: &'static Arc<HeapDma> = Box::leak(Box::new(model.dma()));
    let clock: &'static StdClock = Box::leak(Box::new(StdClock::default()));
    let bits: &'static mut [u64] =
        Box::leak(vec![0u64; bitmap_words(POOL_PAGES)].into_boxed_slice());
    let hca =
        Hca::bring_up(bar, &**dma, clock, PagePool::new(bits, POOL_PAGES), HcaConfig::default())
            .map_err(|e| format!("bring-up: {e}"))?;
    let hca: &'static mut Hca<'static> = Box::leak(Box::new(hca));
    Mlx5::open(bar.clone(), SharedDma(model.dma()), FwControl::new(hca))
        .map_err(|e| format!("open: {e}"))
}

/// rping's ping `n` of `size` bytes: `"rdma-ping-<n>: "`, letters cycling from 'A' + n mod 58
/// through 'A'..='z', a NUL last.
fn rping_msg(n: u32, size: usize) -> Vec<u8> {
    let mut v = format!("rdma-ping-{n}: ").into_bytes();
    v.truncate(size - 1);
    let mut c = 65 + (n % 58) as u8;
    while v.len() < size {
        v.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    v[size - 1] = 0;
    v
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: cm_rping IF OUR_IP PEER_IP [COUNT [SIZE]]";
    let parsed = (|| {
        let ip = |s: &String| s.parse::<Ipv4Addr>().ok();
        Some((
            args.first()?.clone(),
            ip(args.get(1)?)?,
            ip(args.get(2)?)?,
            args.get(3).map_or(Some(10), |s| s.parse().ok())?,
            args.get(4).map_or(Some(64), |s| s.parse().ok()).filter(|&n: &usize| n >= 26)?,
        ))
    })();
    let Some((ifname, ours, theirs, count, size)) = parsed else {
        eprintln!("{usage}");
        return ExitCode::FAILURE;
    };
    match run(&ifname, ours, theirs, count, size) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cm_rping: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(
    ifname: &str,
    ours: Ipv4Addr,
    theirs: Ipv4Addr,
    count: u32,
    size: usize,
) -> Result<(), String> {
    let e = |e: rdma_pmd::Error| e.to_string();
    let sock = PacketSocket::open(ifname, None).map_err(|e| format!("{ifname}: {e:?}"))?;
    let gids = vec![ModelGid { gid: Gid::from_ipv4(ours.octets()).0, mac: OUR_MAC.0 }];
    let model = Model::with_config(ModelConfig { gids, ..ModelConfig::default() }.with_port(sock))
        .map_err(|e| format!("model: {e:?}"))?;
    let dev = open(&model)?;
    dev.set_gid(0, IpAddr::V4(ours)).map_err(e)?;
    let (our_gid, peer_gid) = (Gid::from_ipv4(ours.octets()), Gid::from_ipv4(theirs.octets()));

    // QP1 for the MADs, the Ethernet port for ARP, the CM; the peer's MAC by ARP.
    let mut rx = dev.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).map_err(e)?;
    let gsi: GsiPort<_, _, _> = GsiPort::new(&dev, &mut rx, 1).map_err(e)?;
    let mut eth = dev.eth_port(&EthConfig::default()).map_err(e)?;
    eth.add_address(ours).map_err(e)?;
    let mut port = ArpGsiPort::new(gsi, eth, StdClock::default());
    let peer_mac = port.resolve_ipv4(theirs).map_err(e)?;
    println!("cm_rping: {theirs} is at {peer_mac:?}");
    let mut cm: Cm<_, 2> = Cm::new(port, CmConfig::new(0x024d_4cff_fe35_0002, 1)).map_err(e)?;

    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let start_buf = dev.reg(size, all).map_err(e)?;
    let sink = dev.reg(size, all).map_err(e)?;
    let adv = dev.reg(16, Access::LOCAL_WRITE).map_err(e)?;
    let mut go = dev.reg(16, Access::LOCAL_WRITE).map_err(e)?;

    let t0 = Instant::now();
    let now = || Micros(t0.elapsed().as_micros() as u64);
    let params = ConnectParams {
        local: SocketAddr::new(IpAddr::V4(ours), 40000),
        remote: SocketAddr::new(IpAddr::V4(theirs), RPING_PORT),
        local_gid: our_gid,
        remote_gid: peer_gid,
        remote_mac: peer_mac,
        private_data: &[],
        qp: QpParams::default(),
    };
    // Connect, again while the server is not listening yet (REJ, invalid service ID).
    let (id, mut qp) = loop {
        let mut qp = dev.create_qp::<64, 16>(&QpConfig::default()).map_err(e)?;
        let id = cm.connect(&mut qp, &params, now()).map_err(e)?;
        let kind = loop {
            if let Some(ev) = cm.poll(now(), std::slice::from_mut(&mut qp)) {
                break ev.kind;
            }
            if t0.elapsed() > LIMIT {
                return Err("no answer from the server".into());
            }
        };
        match kind {
            EventKind::Established => break (id, qp),
            EventKind::Rejected { reason: RejReason::InvalidServiceId } if t0.elapsed() < LIMIT => {
                std::thread::sleep(Duration::from_millis(200));
            }
            k => {
                return Err(format!("connect to {}: {k:?} (errno {:?})", params.remote, k.errno()))
            }
        }
    };
    println!("cm_rping: connected to {}", params.remote);

    let wait = |what: &str, done: &mut dyn FnMut() -> Result<bool, String>| {
        let t = Instant::now();
        while !done()? {
            if t.elapsed() > LIMIT {
                return Err(format!("no {what}"));
            }
        }
        Ok::<(), String>(())
    };
    let mut pending = qp.post_recv(0, go.dest().map_err(e)?).map_err(|r| r.error.to_string())?;
    for n in 0..count {
        let msg = rping_msg(n, size);
        start_buf.write(0, &msg).map_err(e)?;
        sink.write(0, &vec![0u8; size]).map_err(e)?;
        for region in [&start_buf, &sink] {
            let at = region.remote(0);
            let mut a = [0u8; 16];
            a[..8].copy_from_slice(&at.addr.to_be_bytes());
            a[8..12].copy_from_slice(&at.rkey.0.to_be_bytes());
            a[12..].copy_from_slice(&(size as u32).to_be_bytes());
            adv.write(0, &a).map_err(e)?;
            qp.post_send(1, adv.slice(0, 16).map_err(e)?, SendFlags::SIGNALED).map_err(e)?;
            let mut wc = [Completion::default(); 1];
            wait("send completion", &mut || Ok(qp.poll(&mut wc).map_err(e)? == 1))?;
            if wc[0].status != WcStatus::Success {
                return Err(format!("ping {n}: {:?}", wc[0]));
            }
            wait("go-ahead", &mut || Ok(qp.poll_recv(&mut wc).map_err(e)? == 1))?;
            if wc[0].status != WcStatus::Success || wc[0].byte_len != 16 {
                return Err(format!("ping {n}: go-ahead {:?}", wc[0]));
            }
            let buf = pending.reclaim(&qp).map_err(|_| "receive not retired")?;
            pending = qp.post_recv(0, buf).map_err(|r| r.error.to_string())?;
        }
        let mut back = vec![0u8; size];
        sink.read(0, &mut back).map_err(e)?;
        if back != msg {
            return Err(format!("ping {n}: the server wrote back other bytes"));
        }
        println!("ping data: {}", String::from_utf8_lossy(&msg[..size - 1]));
    }
    cm.disconnect(id, &mut qp, now()).map_err(e)?;
    loop {
        match cm.poll(now(), std::slice::from_mut(&mut qp)) {
            Some(Event { kind: EventKind::Disconnected, .. }) => break,
            Some(ev) => return Err(format!("{:?} while disconnecting", ev.kind)),
            None if t0.elapsed() > LIMIT * 2 => return Err("no DREP".into()),
            None => {}
        }
    }
    println!("cm_rping: {count} pings of {size} bytes verified; disconnected");
    drop(pending);
    Ok(())
}

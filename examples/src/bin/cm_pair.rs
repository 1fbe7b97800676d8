//! `cargo run -p rdma-pmd-examples --no-default-features --bin cm_pair`: a connection-manager
//! server and client on the mlx5 driver, each on its own device model, joined by the model's
//! wire.
//!
//! The server listens on rping's port (7174) and answers each request with its buffer's
//! address, key and length in the REP's private data, as `rping -s` advertises its buffer; the
//! client connects, RDMA-WRITEs a message there, SENDs the server a note, and disconnects.
//! Both sides run in one busy loop here; on hardware each would be its own program, with the
//! same calls, polled the same way, and the peer's MAC in the port's neighbour table.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_pmd::cm::{AcceptParams, Cm, CmConfig, ConnectParams, Event, EventKind, Micros, QpParams};
use rdma_pmd::{Completion, Gid, Mac, Post, RecvQueue, RemoteBuf, Rkey, SendFlags, SendQueue};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::StdClock;
use rdma_pmd_mlx5::cm::{GsiPort, GSI_RQ, RX_SLOT};
use rdma_pmd_mlx5::control::bringup::{bitmap_words, Hca, HcaConfig, PagePool};
use rdma_pmd_mlx5::control::fw::FwControl;
use rdma_pmd_mlx5::control::Access;
use rdma_pmd_mlx5::{Mlx5, QpConfig, SharedDma};
use rdma_pmd_mlx5_model::fw::{Firmware, FwConfig};
use rdma_pmd_mlx5_model::{Model, ModelConfig, Wire};

type Dev = Mlx5<MemBar, SharedDma<Arc<HeapDma>>, FwControl<'static, 'static>>;

const PORT: u16 = 7174;
const POOL_PAGES: usize = 256;
const LIMIT: Duration = Duration::from_secs(20);

/// Bring a model's HCA up over the command interface and open the driver on it (the HCA and
/// what it borrows live as long as the program).
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

fn addr(m: &Model) -> (Gid, Mac, IpAddr) {
    let g = m.gids()[0];
    let gid = Gid(g.gid);
    (gid, Mac(g.mac), gid.ipv4().map(IpAddr::from).unwrap_or(IpAddr::from(g.gid)))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cm_pair: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let e = |e: rdma_pmd::Error| e.to_string();
    let wire = Wire::new();
    let cfg = || ModelConfig { wire: Some(wire.clone()), ..ModelConfig::default() };
    let (ms, mc) = (
        Model::with_config(cfg()).map_err(|e| format!("{e:?}"))?,
        Model::with_config(cfg()).map_err(|e| format!("{e:?}"))?,
    );
    let (ds, dc) = (open(&ms)?, open(&mc)?);
    let ((sgid, smac, sip), (cgid, cmac, cip)) = (addr(&ms), addr(&mc));
    println!("server {sip} ({smac:?}), client {cip} ({cmac:?})");

    // Each side: QP1 for its MADs, the peer in its neighbour table, a CM.
    let (mut srx, mut crx) = (
        ds.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).map_err(e)?,
        dc.reg(GSI_RQ * RX_SLOT, Access::LOCAL_WRITE).map_err(e)?,
    );
    let mut sport: GsiPort<_, _, _> = GsiPort::new(&ds, &mut srx, 1).map_err(e)?;
    let mut cport: GsiPort<_, _, _> = GsiPort::new(&dc, &mut crx, 1).map_err(e)?;
    sport.add_neighbour(cgid, cmac).map_err(e)?;
    cport.add_neighbour(sgid, smac).map_err(e)?;
    let mut server: Cm<_, 4> =
        Cm::new(sport, CmConfig::new(0x0002_c903_0000_5e01, 0x5eed_0001)).map_err(e)?;
    let mut client: Cm<_, 4> =
        Cm::new(cport, CmConfig::new(0x0002_c903_0000_c101, 0x5eed_0002)).map_err(e)?;
    server.listen(PORT).map_err(e)?;

    let target = ds.reg(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE).map_err(e)?;
    let mut inbox = ds.reg(4096, Access::LOCAL_WRITE).map_err(e)?;
    let msg = dc.reg(4096, Access::LOCAL_WRITE).map_err(e)?;
    let mut sqp = ds.create_qp::<64, 16>(&QpConfig::default()).map_err(e)?;
    let mut cqp = dc.create_qp::<64, 16>(&QpConfig::default()).map_err(e)?;

    let start = Instant::now();
    let now = || Micros(start.elapsed().as_micros() as u64);
    let params = ConnectParams {
        local: SocketAddr::new(cip, 51000),
        remote: SocketAddr::new(sip, PORT),
        local_gid: cgid,
        remote_gid: sgid,
        remote_mac: smac,
        private_data: b"hello from the client",
        qp: QpParams::default(),
    };
    let cid = client.connect(&mut cqp, &params, now()).map_err(e)?;
    println!("client: REQ to {}", params.remote);

    let (mut up_c, mut up_s) = (false, false);
    while !(up_c && up_s) {
        if start.elapsed() > LIMIT {
            return Err("no connection".into());
        }
        if let Some(Event { id, kind }) = server.poll(now(), std::slice::from_mut(&mut sqp)) {
            println!("server: {kind:?}");
            match kind {
                EventKind::ConnectRequest => {
                    let r = server.get_request(id).ok_or("request gone")?;
                    let text = r.private_data.split(|&b| b == 0).next().unwrap_or(&[]);
                    println!(
                        "server: request from {} (QPN {}): {:?}",
                        r.peer,
                        r.peer_qpn,
                        String::from_utf8_lossy(text)
                    );
                    // rping's advertisement: {be64 addr, be32 rkey, be32 len}.
                    let mut adv = [0u8; 16];
                    adv[..8].copy_from_slice(&target.remote(0).addr.to_be_bytes());
                    adv[8..12].copy_from_slice(&target.rkey().0.to_be_bytes());
                    adv[12..].copy_from_slice(&4096u32.to_be_bytes());
                    server
                        .accept(
                            id,
                            &mut sqp,
                            &AcceptParams { private_data: &adv, ..Default::default() },
                            now(),
                        )
                        .map_err(e)?;
                }
                EventKind::Established => up_s = true,
                other => return Err(format!("server: {other:?}")),
            }
        }
        if let Some(ev) = client.poll(now(), std::slice::from_mut(&mut cqp)) {
            println!("client: {:?}", ev.kind);
            match ev.kind {
                EventKind::Established => up_c = true,
                other => return Err(format!("client: {other:?} (errno {:?})", other.errno())),
            }
        }
    }

    // The server's receive for the client's note (a QP takes receives from INIT on).
    let pending = sqp.post_recv(1, inbox.dest().map_err(e)?).map_err(|r| r.error.to_string())?;
    // The client writes into the advertised buffer, then sends a note.
    let pd = client.private_data(cid).ok_or("no REP data")?;
    let remote = RemoteBuf::new(
        u64::from_be_bytes(pd[..8].try_into().unwrap()),
        Rkey(u32::from_be_bytes(pd[8..12].try_into().unwrap())),
    );
    let text = b"written by RDMA WRITE over a CM connection";
    msg.write(0, text).map_err(e)?;
    msg.write(1024, b"and a SEND").map_err(e)?;
    cqp.post_write(1, msg.slice(0, text.len()).map_err(e)?, SendFlags::SIGNALED, remote)
        .map_err(e)?;
    cqp.post_send(2, msg.slice(1024, 10).map_err(e)?, SendFlags::SIGNALED).map_err(e)?;
    let mut wc = [Completion::default(); 2];
    let mut got = 0;
    while got < 2 {
        got += cqp.poll(&mut wc[got..]).map_err(e)?;
        if start.elapsed() > LIMIT {
            return Err("no completions".into());
        }
    }
    if wc.iter().any(|c| !c.status.is_ok()) {
        return Err(format!("completions: {wc:?}"));
    }
    let mut rc = [Completion::default(); 1];
    while sqp.poll_recv(&mut rc).map_err(e)? == 0 {
        if start.elapsed() > LIMIT {
            return Err("no receive".into());
        }
    }
    let mut seen = vec![0u8; text.len()];
    target.read(0, &mut seen).map_err(e)?;
    let note = pending.reclaim(&sqp).map_err(|_| "receive not retired")?;
    let mut sent = [0u8; 10];
    note.read(0, &mut sent).map_err(e)?;
    println!(
        "server: buffer holds {:?}; received {:?}",
        String::from_utf8_lossy(&seen),
        String::from_utf8_lossy(&sent)
    );
    if seen != text || &sent != b"and a SEND" {
        return Err("bytes differ".into());
    }

    // The client disconnects: DREQ, DREP, both sides down.
    client.disconnect(cid, &mut cqp, now()).map_err(e)?;
    let (mut down_c, mut down_s) = (false, false);
    while !(down_c && down_s) {
        if start.elapsed() > LIMIT {
            return Err("no disconnect".into());
        }
        down_s |= server
            .poll(now(), std::slice::from_mut(&mut sqp))
            .is_some_and(|ev| ev.kind == EventKind::Disconnected);
        down_c |= client
            .poll(now(), std::slice::from_mut(&mut cqp))
            .is_some_and(|ev| ev.kind == EventKind::Disconnected);
    }
    println!("both sides disconnected; server {:?}, client {:?}", server.stats(), client.stats());
    Ok(())
}

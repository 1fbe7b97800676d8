//! Our side of the `wire` tier's Ethernet wire (xtask's `tiers/wire.rs` sets up the guest and
//! the environment read here): the model on our end of the veth pair with its frames recorded,
//! the driver opened on it with our address, its Ethernet port answering ARP for us, the peer
//! kernel's neighbour entry for us, and the peer programs run in the peer's namespace.
//! Shared by `wire.rs` (verbs) and `wire_cm.rs` (the connection manager, whose rig,
//! [`super::wire_cm`], builds on this one).
//!
//! The verbs tests' rig is [`on_wire`]: our side, optionally under a seeded fault schedule
//! ([`Faults`], its frames marked for the tier's dissection check), the driver, and its
//! Ethernet port ([`Net`]), which every wait of those tests polls.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdma_pmd::{Completion, DestBuf, Gid, Mac, RecvQueue};
use rdma_pmd_hal::mem::MemBar;
use rdma_pmd_hal::{Clock, StdClock};
use rdma_pmd_mlx5::{EthConfig, EthPort};
use rdma_pmd_mlx5_model::peers::guest::{env, ip, netns, peer_mac, spawn_in_peer};
use rdma_pmd_mlx5_model::roce::pcap::SharedPcap;
use rdma_pmd_mlx5_model::roce::port::PacketSocket;
use rdma_pmd_mlx5_model::roce::{
    Exempt, FaultPlan, FaultPort, Malformed, PcapTap, Port, PortError, RocePacket,
};
use rdma_pmd_mlx5_model::{Gid as ModelGid, Model, ModelConfig};

use super::{open, Dev};

/// The model's MAC on the wire (locally administered; the tier's value).
pub const OUR_MAC: Mac = Mac([0x02, 0x4d, 0x4c, 0x35, 0x00, 0x02]);

/// The driver's Ethernet port on the test device.
pub type Eth<'d> = EthPort<'d, MemBar, D, C>;
/// The test device's DMA.
pub type D = rdma_pmd_mlx5::SharedDma<std::sync::Arc<rdma_pmd_hal::mem::HeapDma>>;
/// The test device's control path: firmware commands.
pub type C = rdma_pmd_mlx5::control::fw::FwControl<'static, 'static>;

/// Our IPv4 address on the wire.
pub fn ours() -> Ipv4Addr {
    ip("WIRE_ADDR")
}

/// The peer's IPv4 address on the wire (its rxe device's).
pub fn theirs() -> Ipv4Addr {
    ip("WIRE_PEER")
}

/// An IPv4 address as a RoCE v2 GID (IPv4-mapped IPv6).
pub fn mapped(a: Ipv4Addr) -> [u8; 16] {
    Gid::from_ipv4(a.octets()).0
}

/// The socket on our end of the wire, the capture `<WIRE_PCAP_DIR>/<name>.pcap` and its path.
pub fn wire_port(name: &str) -> (PacketSocket, SharedPcap, PathBuf) {
    let sock = PacketSocket::open(&env("WIRE_IF"), None).expect("AF_PACKET socket");
    let dir = PathBuf::from(env("WIRE_PCAP_DIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.pcap"));
    let pcap = PcapTap::<PacketSocket>::shared(&path).unwrap();
    (sock, pcap, path)
}

/// The model on our end of the wire through `port`: `base` with our address as GID 0.
pub fn model_with_port(base: ModelConfig, port: impl Port + 'static) -> Model {
    let gids = vec![ModelGid { gid: mapped(ours()), mac: OUR_MAC.0 }];
    Model::with_config(ModelConfig { gids, ..base }.with_port(port)).expect("model")
}

/// The model on our end of the wire (`base` for all but the GIDs and the port), its frames
/// recorded to `<WIRE_PCAP_DIR>/<name>.pcap`.
pub fn model_on_wire(name: &str, base: ModelConfig) -> Model {
    let (sock, pcap, _) = wire_port(name);
    model_with_port(base, PcapTap::new(sock, pcap))
}

/// Open the driver on `model` and give the port our address (GID 0).
pub fn driver(model: &Model) -> Dev {
    let dev = open(model);
    dev.set_gid(0, IpAddr::V4(ours())).expect("SET_ROCE_ADDRESS");
    assert_eq!(dev.mac().expect("the port's MAC"), OUR_MAC);
    dev
}

/// The driver's Ethernet port answering ARP for our address. Each test is a new station with
/// our address: the peer's kernel forgets what it knew of us (earlier tests may have left a
/// permanent entry, or learned another MAC), so that it learns our MAC by ARP again.
pub fn our_eth_port(dev: &Dev) -> Eth<'_> {
    let _ = neigh(&["del", &ours().to_string(), "dev", "wp"], true);
    let mut eth = dev.eth_port(&EthConfig::default()).expect("the Ethernet port");
    assert_eq!(eth.mac(), OUR_MAC);
    eth.add_address(ours()).unwrap();
    eth
}

/// `ip neigh ARGS` in the peer's namespace; whether it succeeded.
fn neigh(args: &[&str], quiet: bool) -> bool {
    let mut c = Command::new("ip");
    c.args(["-n", &netns(), "neigh"]).args(args);
    if quiet {
        c.stderr(std::process::Stdio::null());
    }
    c.status().expect("ip neigh").success()
}

/// A MAC as `ip` writes it.
pub fn mac_text(m: Mac) -> String {
    let b: Vec<String> = m.0.iter().map(|b| format!("{b:02x}")).collect();
    b.join(":")
}

/// Our MAC as the peer's permanent neighbour entry for our address (a user-given neighbour:
/// its kernel sends no ARP for us).
pub fn peer_knows_us() {
    let args = ["replace", &ours().to_string(), "lladdr", &mac_text(OUR_MAC), "dev", "wp"];
    assert!(neigh(&[&args[..], &["nud", "permanent"]].concat(), false), "ip neigh replace");
}

/// Remove the peer's entry for our address, which must exist.
pub fn peer_forgets_us() {
    assert!(neigh(&["del", &ours().to_string(), "dev", "wp"], false), "ip neigh del");
}

/// The peer kernel's neighbour entry for our address: `(lladdr, states)` from `ip neigh`.
pub fn kernel_neighbour() -> Option<(String, Vec<String>)> {
    let out = Command::new("ip")
        .args(["-n", &netns(), "neigh", "show", &ours().to_string(), "dev", "wp"])
        .output()
        .expect("ip neigh show");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let w: Vec<&str> = text.split_whitespace().collect();
    let mac = w.iter().position(|x| *x == "lladdr").and_then(|i| w.get(i + 1))?.to_string();
    let states =
        w.iter().filter(|x| x.chars().all(|c| c.is_ascii_uppercase())).map(|x| x.to_string());
    Some((mac, states.collect()))
}

/// Run `cmd` (a program and its arguments, separated by spaces) in the peer's namespace.
pub fn peer_runs(cmd: &str) -> Child {
    spawn_in_peer(&cmd.split_whitespace().collect::<Vec<_>>())
}

/// Wait up to `bound` for a peer program, calling `tick` between looks (the tests poll their
/// ports while a peer runs); kill it if it runs longer. Its success and its output (shown).
pub fn await_exit(
    mut child: Child,
    what: &str,
    bound: Duration,
    mut tick: impl FnMut(),
) -> (bool, String) {
    let t0 = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if t0.elapsed() > bound {
            eprintln!("{what} still running after {bound:?}: killed");
            let _ = child.kill();
            break;
        }
        tick();
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = child.wait_with_output().expect("wait for the peer");
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("{what}: {}\n{text}", out.status);
    (out.status.success(), text)
}

/// Poll `q` until a receive completion comes, failing after `bound`; `tick` between polls.
pub fn recv_one<'r, R: RecvQueue<'r>>(
    q: &mut R,
    bound: Duration,
    mut tick: impl FnMut(),
) -> Completion {
    let mut out = [Completion::default(); 1];
    let t0 = Instant::now();
    while q.poll_recv(&mut out).expect("poll_recv") == 0 {
        tick();
        assert!(t0.elapsed() < bound, "no receive completion");
    }
    out[0]
}

/// The first `n` bytes of a buffer the device wrote.
pub fn contents(d: &DestBuf<'_>, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    d.read(0, &mut v).unwrap();
    v
}

/// The driver's Ethernet port on the wire, answering ARP for our address, and the clock its
/// timers run on. Every wait of the tests polls it.
pub struct Net<'d> {
    /// The port.
    pub eth: Eth<'d>,
    /// The clock of its neighbour timers.
    pub clock: StdClock,
}

impl<'d> Net<'d> {
    /// The port on `dev`, answering for our address ([`our_eth_port`]).
    pub fn new(dev: &'d Dev) -> Net<'d> {
        Net { eth: our_eth_port(dev), clock: StdClock::default() }
    }

    /// One pass: answer ARP, learn, retire sends.
    pub fn poll(&mut self) {
        self.eth.poll_eth(self.clock.now_ns()).expect("poll_eth");
    }

    /// The peer's MAC, by ARP (or from the table, if the peer asked for ours first).
    pub fn peer_mac(&mut self) -> Mac {
        self.eth.resolve(theirs(), &self.clock).expect("ARP for the peer")
    }

    /// The kernel learned our MAC for our address by ARP (not a permanent entry), and we
    /// learned the peer's real MAC; `reachable`: the kernel's entry is confirmed (REACHABLE),
    /// as after it resolved us itself and we answered.
    pub fn check_learned(&mut self, reachable: bool) {
        let (mac, states) = kernel_neighbour().expect("the kernel has a neighbour entry for us");
        assert_eq!(mac, mac_text(OUR_MAC), "the kernel's entry for us: {states:?}");
        assert!(!states.iter().any(|s| s == "PERMANENT" || s == "NOARP"), "{states:?}");
        assert!(!states.iter().any(|s| s == "FAILED" || s == "INCOMPLETE"), "{states:?}");
        let s = self.eth.arp_stats();
        if reachable {
            assert!(states.iter().any(|s| s == "REACHABLE"), "{states:?}");
            assert!(s.replied >= 1, "we answered the kernel's ARP: {s:?}");
        } else {
            // Learned from our request (STALE, then confirmed if rxe sent long enough for
            // the kernel to probe us: we answer those too), or from its own request.
            assert!(s.requests_sent + s.replied >= 1, "{s:?}");
        }
        assert_eq!((s.malformed, s.conflicts, s.unreachable), (0, 0, 0), "{s:?}");
        assert_eq!(self.peer_mac(), peer_mac("wp"), "the MAC ARP gave is the peer's interface's");
        let e = self.eth.stats();
        assert_eq!((e.rx_errors, e.tx_errors, e.tx_dropped), (0, 0, 0), "{e:?}");
    }
}

/// A RoCE v2 frame (UDP port 4791, parsed to its ICRC) and whether its ICRC is right.
pub fn roce_icrc(frame: &[u8]) -> Option<bool> {
    match RocePacket::parse(frame) {
        Ok(_) => Some(true),
        Err(Malformed::Icrc { .. }) => Some(false),
        Err(_) => None,
    }
}

/// Between the fault schedule and the capture, so that the capture holds what is really on
/// the wire: each RoCE frame that goes out with a bad ICRC gets its capture frame number (as
/// tshark counts, from 1) appended to `<pcap>.injected`. Every frame the model hands to the
/// schedule is checked first ([`Faults::bad_from_model`] must stay 0), so the frames noted
/// here are exactly those the schedule corrupted; the `wire` tier tolerates those numbers,
/// and only those, failing to dissect.
pub struct Marked {
    inner: PcapTap<PacketSocket>,
    pcap: SharedPcap,
    injected: PathBuf,
}

impl Port for Marked {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        if roce_icrc(frame) == Some(false) {
            let n = self.pcap.lock().unwrap_or_else(|e| e.into_inner()).frames() + 1;
            let mut f = OpenOptions::new().create(true).append(true).open(&self.injected).unwrap();
            writeln!(f, "{n}").unwrap();
        }
        self.inner.send(frame)
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        self.inner.recv()
    }
}

/// Our port under a seeded fault schedule ([`FaultPort`]: drops, duplicates, reordering,
/// ICRC corruption) on what we send and, with its own plan and stream, on what we receive
/// (taken from the socket after the capture: the capture shows the wire, the model sees the
/// faults). The schedule applies to RoCE v2 frames only: ARP passes untouched both ways (a
/// corrupted ARP reply would teach the kernel a wrong MAC, which tests the kernel, not our
/// transport). The test keeps a handle to read and change the schedule.
#[derive(Clone)]
pub struct Faults {
    /// The faulty port, shared with the model.
    pub port: Arc<Mutex<FaultPort<Marked>>>,
    /// RoCE frames the model itself handed over with a bad ICRC (must stay 0).
    pub bad_from_model: Arc<AtomicU64>,
    /// The schedule it started with.
    pub sched: Schedule,
}

impl Faults {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, FaultPort<Marked>> {
        self.port.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Port for Faults {
    fn send(&mut self, frame: &[u8]) -> Result<(), PortError> {
        let mut p = self.lock();
        match roce_icrc(frame) {
            None => p.inner_mut().send(frame),
            Some(good) => {
                if !good {
                    self.bad_from_model.fetch_add(1, Ordering::Relaxed);
                }
                p.send(frame)
            }
        }
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, PortError> {
        self.lock().recv()
    }
}

/// A fault schedule for our side of the wire: what we send, what we receive, the seed (the
/// receive stream is drawn from the seed's successor, so the two differ).
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// On what we send.
    pub send: FaultPlan,
    /// On what we receive.
    pub recv: FaultPlan,
    /// The seed of the send stream.
    pub seed: u64,
}

impl Schedule {
    /// 1% of each fault on what we send.
    pub fn sends(seed: u64) -> Schedule {
        Schedule { send: FaultPlan::uniform(10_000), recv: FaultPlan::none(), seed }
    }

    /// 1% of each fault on what we send and on what we receive.
    pub fn both_ways(seed: u64) -> Schedule {
        Schedule { recv: FaultPlan::uniform(10_000), ..Schedule::sends(seed) }
    }
}

/// The model on our end of the wire, its frames recorded, under `sched`.
pub fn model_with_faults(name: &str, sched: Schedule) -> (Model, Faults) {
    let (sock, pcap, path) = wire_port(name);
    let mut injected = path.into_os_string();
    injected.push(".injected");
    let injected = PathBuf::from(injected);
    let _ = std::fs::remove_file(&injected);
    let marked = Marked { inner: PcapTap::new(sock, pcap.clone()), pcap, injected };
    let faults = Faults {
        port: Arc::new(Mutex::new(
            FaultPort::new(marked, sched.send, sched.seed)
                .with_recv_plan(sched.recv, sched.seed.wrapping_add(1))
                .exempt_received(Exempt::NonRoce),
        )),
        bad_from_model: Arc::new(AtomicU64::new(0)),
        sched,
    };
    let model = model_with_port(ModelConfig::default(), faults.clone());
    (model, faults)
}

/// The rig of the verbs tests on the wire: the model on our end of the wire (its frames recorded to
/// `<WIRE_PCAP_DIR>/<name>.pcap`; under `sched`, if given), the driver on it with our address,
/// and its Ethernet port; after `body`, the fault schedule is checked ([`check_faults`]).
pub fn on_wire(
    name: &str,
    sched: Option<Schedule>,
    body: impl FnOnce(&Dev, &mut Net<'_>, Option<&Faults>),
) {
    let (model, faults) = match sched {
        None => (model_on_wire(name, ModelConfig::default()), None),
        Some(sched) => {
            let (m, f) = model_with_faults(name, sched);
            (m, Some(f))
        }
    };
    let dev = driver(&model);
    let mut net = Net::new(&dev);
    body(&dev, &mut net, faults.as_ref());
    if let Some(f) = &faults {
        check_faults(f);
    }
}

/// After a test under faults: the schedule did act, and every bad ICRC on the wire was its own.
pub fn check_faults(f: &Faults) {
    let (c, r) = {
        let p = f.lock();
        (p.counts(), p.recv_counts())
    };
    eprintln!("fault schedule {:?}: sent {c:?}, received {r:?}", f.sched);
    for (plan, c) in [(f.sched.send, c), (f.sched.recv, r)] {
        if plan != FaultPlan::none() {
            assert!(c.frames > 0 && c.forwarded > 0, "{c:?}");
            let n = c.dropped + c.corrupted + c.duplicated + c.reordered;
            assert!(n > 0, "no fault happened: {c:?}");
        }
    }
    assert_eq!(f.bad_from_model.load(Ordering::Relaxed), 0, "the model sent a bad ICRC itself");
}

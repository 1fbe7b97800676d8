//! Our side of the `wire` tier's Ethernet wire (xtask's `tiers/wire.rs` sets up the guest and
//! the environment read here): the model on our end of the veth pair with its frames recorded,
//! the driver opened on it with our address, its Ethernet port answering ARP for us, the peer
//! kernel's neighbour entry for us, and the peer programs run in the peer's namespace.
//! Shared by `wire.rs` (verbs) and `wire_cm.rs` (the connection manager).

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rdma_pmd::{Completion, DestBuf, Gid, Mac, RecvQueue};
use rdma_pmd_hal::mem::MemBar;
use rdma_pmd_mlx5::{EthConfig, EthPort};
use rdma_pmd_mlx5_model::peers::guest::{env, ip, netns, spawn_in_peer};
use rdma_pmd_mlx5_model::roce::pcap::SharedPcap;
use rdma_pmd_mlx5_model::roce::port::PacketSocket;
use rdma_pmd_mlx5_model::roce::{PcapTap, Port};
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
pub fn model_with_port(base: ModelConfig, port: impl Port + Send + 'static) -> Model {
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

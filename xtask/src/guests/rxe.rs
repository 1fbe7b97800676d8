//! The rxe guest: Debian's rdma-core and a trixie-backports kernel ([`KERNEL`]) on [`crate::vm`];
//! one rxe device on a dummy netdev for the single-host tests, and two network namespaces joined
//! by a veth pair, each end with its own rxe device, for the two-host test. The `rxe` and `wire`
//! tiers, `cargo xtask demo --backend rxe|wire` and `cargo xtask bench rxe` boot it.

use crate::vm::{self, Guest, GuestFile, KernelSource};

/// Guest packages besides the kernel and busybox.
const PACKAGES: &[&str] = &[
    "rdma-core",
    "ibverbs-providers",
    "libibverbs1",
    "librdmacm1",
    "rdmacm-utils",
    "ibverbs-utils",
    "perftest",
    "iproute2",
];

/// The guest kernel: trixie-backports' 7.x, whose rdma_rxe works in network namespaces (6.1's
/// opens its RoCE v2 socket in the initial namespace only), so the two-host test runs for real.
pub const KERNEL: KernelSource = KernelSource::TrixieBackports;

/// Modules in load order. On 6.1, crc32_generic first: rdma_rxe needs a crc32 shash that
/// modules.dep does not list ("failed to init crc32 algorithm err:-2" otherwise); later kernels
/// compute the CRC with the built-in crc32 library and have no such module.
fn modules() -> Vec<String> {
    let first: &[&str] = if KERNEL == KernelSource::Bookworm { &["crc32_generic"] } else { &[] };
    first.iter().chain(MODULES).map(|s| s.to_string()).collect()
}

/// Modules after [`modules`]'s first, in load order.
const MODULES: &[&str] = &[
    "ib_core",
    "ib_uverbs",
    "rdma_cm",
    "rdma_ucm",
    "ip6_udp_tunnel",
    "udp_tunnel",
    "rdma_rxe",
    "dummy",
    "veth",
];

/// Network setup in the guest: rxe0 on dummy0 (10.0.0.1) for single-host tests; namespaces
/// `a` and `b` joined by veth `va`/`vb` (10.1.0.1, 10.1.0.2) with rxea/rxeb for the two-host test.
const NET_SETUP: &str = r#"
set -e
ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy
ip addr add 10.0.0.1/24 dev dummy0
ip link set dummy0 up
rdma link add rxe0 type rxe netdev dummy0
ip netns add a
ip netns add b
ip link add va type veth peer name vb
ip link set va netns a
ip link set vb netns b
for ns in a b; do
  ip netns exec $ns sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6'
done
ip -n a addr add 10.1.0.1/24 dev va
ip -n b addr add 10.1.0.2/24 dev vb
ip -n a link set lo up
ip -n b link set lo up
ip -n a link set va up
ip -n b link set vb up
ip netns exec a rdma link add rxea type rxe netdev va
ip netns exec b rdma link add rxeb type rxe netdev vb
rdma link
set +e
"#;

/// The rxe guest with [`NET_SETUP`] run before `script`.
pub fn guest(files: Vec<GuestFile>, script: String) -> Guest {
    guest_without_net("rxe", files, format!("{NET_SETUP}\n{script}"))
}

/// The rxe guest (packages, modules, kernel) with `script` as all of its init script: for
/// tiers that set up their own network.
pub fn guest_without_net(name: &str, files: Vec<GuestFile>, script: String) -> Guest {
    Guest {
        name: name.into(),
        packages: PACKAGES.iter().map(|s| s.to_string()).collect(),
        modules: modules(),
        kernel: KERNEL,
        files,
        init_script: script,
        memory_mib: 1024,
        cpus: 2,
        ..Guest::default()
    }
}

/// The guest's environment for the tests: addresses and namespaces of [`NET_SETUP`], and
/// whether the kernel gives each namespace its own RoCE v2 socket.
pub fn test_env() -> String {
    let netns_roce = if KERNEL == KernelSource::Bookworm { "" } else { " RXE_NETNS_ROCE=1" };
    format!(
        "export RXE_ADDR=10.0.0.1 RXE_ADDR_A=10.1.0.1 RXE_NETNS_A=/run/netns/a \
         RXE_NETNS_B=/run/netns/b RUST_BACKTRACE=1{netns_roce}"
    )
}

/// The rxe device and the IPv4 address of its netdev, if `rdma link` shows one here.
pub fn native_rxe() -> Option<(String, String)> {
    let links = std::process::Command::new("rdma").arg("link").output().ok()?;
    let text = String::from_utf8_lossy(&links.stdout).into_owned();
    for l in text.lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        let (Some(dev), Some(i)) = (w.get(1), w.iter().position(|x| *x == "netdev")) else {
            continue;
        };
        if !dev.starts_with("rxe") {
            continue;
        }
        let netdev = w.get(i + 1)?;
        let ip = std::process::Command::new("ip")
            .args(["-4", "-o", "addr", "show", "dev", netdev])
            .output()
            .ok()?;
        let ip = String::from_utf8_lossy(&ip.stdout).into_owned();
        let addr = ip.split_whitespace().skip_while(|x| *x != "inet").nth(1)?;
        return Some((dev.to_string(), addr.split('/').next()?.to_string()));
    }
    None
}

/// Why the guests cannot run here, `None` when they can. The tools are installed by
/// [`crate::tiers::prereq`] (the one place that installs), which prints the command when it cannot.
pub fn vm_unavailable() -> Option<String> {
    if crate::tiers::prereq::ensure(Some("rxe")) {
        return None;
    }
    Some(format!(
        "no rxe device and no VM tools; run: sudo {} (or: sudo cargo xtask setup)",
        vm::apt_install_command(&vm::host_tools_missing())
    ))
}

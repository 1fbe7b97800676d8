//! Tier `rxe` and `bench rxe`: the rxe backend against Linux soft-RoCE.
//!
//! Where `rdma link` already shows an rxe device the tests run natively. Otherwise they run in a
//! QEMU guest (see [`crate::vm`]) with Debian's kernel and rdma-core: one rxe device on a dummy
//! netdev for the single-host tests, and two network namespaces joined by a veth pair, each end
//! with its own rxe device, for the two-host test.

use std::time::Duration;

use super::Outcome;
use crate::vm::{self, Guest, GuestFile};

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

/// Modules in load order. crc32_generic first: rdma_rxe needs a crc32 shash that modules.dep
/// does not list ("failed to init crc32 algorithm err:-2" otherwise).
const MODULES: &[&str] = &[
    "crc32_generic",
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

fn guest(files: Vec<GuestFile>, script: String) -> Guest {
    Guest {
        name: "rxe".into(),
        packages: PACKAGES.iter().map(|s| s.to_string()).collect(),
        modules: MODULES.iter().map(|s| s.to_string()).collect(),
        files,
        init_script: format!("{NET_SETUP}\n{script}"),
        memory_mib: 1024,
        cpus: 2,
        ..Guest::default()
    }
}

pub fn run() -> Outcome {
    let g = guest(Vec::new(), "ibv_devices\n".into());
    match g.boot(Duration::from_secs(300)) {
        Ok(s) => {
            println!("exit {:?} accel {:?} in {:?}", s.exit, s.accel, s.elapsed);
            Outcome::check(s.exit == Some(0))
        }
        Err(e) => {
            eprintln!("xtask: rxe: {e}");
            Outcome::check(false)
        }
    }
}

/// `cargo xtask bench rxe`.
pub fn bench(_args: &[String]) -> bool {
    let _ = vm::cache_dir();
    false
}

//! The wire guest: the rxe guest ([`super::rxe`]) with its own network, set up by [`NET_SETUP`].
//! Two veth pairs into a network namespace `peer`: the wire, `wm` (ours, in the initial
//! namespace, with no address: what arrives on it belongs to the model's `AF_PACKET` socket) to
//! `wp` (10.3.0.2, with the rxe device `rxep`); and a control link `cm` (10.9.0.1) to `cp`
//! (10.9.0.2). Two more rxe devices in namespaces `sa` and `sb` (10.4.0.1, 10.4.0.2), joined by a
//! veth pair, let a C program be checked against itself before it judges us; the C verbs peer is
//! built by [`build_c_peer`]. The `wire` tier and `cargo xtask demo --backend wire` boot it.

use std::path::PathBuf;
use std::process::Command;

use crate::util;

/// The wire and the control link (see the module docs), the namespaces `sa` and `sb` for the
/// self-checks, and `gidx_of DEV GID`, the index of a GID in the device's table.
pub const NET_SETUP: &str = r#"
set -e
ip netns add peer
ip netns exec peer sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6'
ip link add wm type veth peer name wp
ip link add cm type veth peer name cp
echo 1 > /proc/sys/net/ipv6/conf/wm/disable_ipv6
ip link set wp netns peer
ip link set cp netns peer
ip addr add 10.9.0.1/24 dev cm
ip link set wm up
ip link set cm up
ip -n peer addr add 10.3.0.2/24 dev wp
ip -n peer addr add 10.9.0.2/24 dev cp
ip -n peer link set lo up
ip -n peer link set wp up
ip -n peer link set cp up
ip netns exec peer rdma link add rxep type rxe netdev wp
for ns in sa sb; do
  ip netns add $ns
  ip netns exec $ns sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6'
done
ip link add sva type veth peer name svb
ip link set sva netns sa
ip link set svb netns sb
ip -n sa addr add 10.4.0.1/24 dev sva
ip -n sb addr add 10.4.0.2/24 dev svb
for ns in sa sb; do ip -n $ns link set lo up; done
ip -n sa link set sva up
ip -n sb link set svb up
ip netns exec sa rdma link add rxesa type rxe netdev sva
ip netns exec sb rdma link add rxesb type rxe netdev svb
rdma link
set +e
gidx_of() {
  for i in $(seq 50); do
    for f in /sys/class/infiniband/$1/ports/1/gids/*; do
      [ "$(cat $f)" = "$2" ] && { echo ${f##*/}; return; }
    done
    sleep 0.1
  done
  echo none
}
"#;

/// Compile `examples/c/wire_peer.c` against the host's rdma-core; returns the binary.
pub fn build_c_peer() -> Result<PathBuf, String> {
    if !crate::tiers::prereq::ensure(Some("wire")) {
        return Err("rdma-core's development files are missing".into());
    }
    let root = util::root();
    let dir = root.join("target").join("wire");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let out = dir.join("wire_peer");
    let ok = util::run(
        Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&out)
            .arg(root.join("examples/c/wire_peer.c"))
            .arg("-libverbs"),
    );
    if ok {
        Ok(out)
    } else {
        Err("compiling examples/c/wire_peer.c failed".into())
    }
}

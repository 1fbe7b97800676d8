use rdma_pmd_mlx5::control::Path;

use super::harness::*;
use crate::{Model, ModelConfig, Reason, Wire};

fn on(wire: &Wire) -> Env {
    Env::with_model(
        Model::with_config(ModelConfig { wire: Some(wire.clone()), ..Default::default() }).unwrap(),
    )
}

/// Two models on one wire, QP `a` on `x` and QP `b` on `y`, connected over RoCE v2 (UDP source
/// port `udp_sport`) and in RTS.
struct Across {
    x: Env,
    y: Env,
    cq_x: TCq,
    _cq_y: TCq,
    a: TQp,
    b: TQp,
    /// `x`'s path to `y`.
    to_y: Path,
}

fn across(udp_sport: u16) -> Across {
    let wire = Wire::new();
    let mut x = on(&wire);
    let mut y = on(&wire);
    let cq_x = x.cq(4);
    let cq_y = y.cq(4);
    let a = x.qp(&cq_x, &cq_x, 4, None);
    let b = y.qp(&cq_y, &cq_y, 4, None);
    let (gx, gy) = (x.model.gids()[0], y.model.gids()[0]);
    assert_ne!(gx.gid, gy.gid);
    let to = |g: crate::Gid| Path::RoceV2 {
        dgid: g.gid,
        dmac: g.mac,
        sgid_index: 0,
        udp_sport,
        hop_limit: 0,
        traffic_class: 0,
        flow_label: 0,
        sl: 0,
    };
    rts(&mut x.ctl, a.qpn, b.qpn, to(gy), 1, 1, 7);
    rts(&mut y.ctl, b.qpn, a.qpn, to(gx), 1, 1, 7);
    Across { x, y, cq_x, _cq_y: cq_y, a, b, to_y: to(gy) }
}

#[test]
fn roce_write_crosses_the_wire() {
    let Across { mut x, mut y, mut cq_x, _cq_y, mut a, b, to_y } = across(0xc000);
    let src = x.region(4096, 0x1000, RW);
    let dst = y.region(4096, 0x1000, RW);
    fill(&src.buf, 0, 4096, 0x21);
    let w = wqe(0, a.qpn, 0x08, 0x08, 0, dst.va, dst.key.0, &[(src.va, 4096, src.key.0)]);
    x.ring(&mut a, &w);
    assert_eq!(poll(&mut cq_x).opcode(), 0);
    assert_eq!(bytes(&dst.buf, 0, 4096), bytes(&src.buf, 0, 4096));
    assert_eq!(y.model.counters().bytes_written, 4096);
    assert_eq!(x.model.counters().validation_failures, 0, "{:?}", x.model.violations());

    // A wrong destination MAC reaches nobody: retry exceeded.
    let mut c = x.qp(&cq_x, &cq_x, 4, None);
    let mut bad = to_y;
    if let Path::RoceV2 { dmac, .. } = &mut bad {
        dmac[5] ^= 1;
    }
    rts(&mut x.ctl, c.qpn, b.qpn, bad, 1, 1, 7);
    let w = wqe(0, c.qpn, 0x08, 0x08, 0, dst.va, dst.key.0, &[(src.va, 8, src.key.0)]);
    x.ring(&mut c, &w);
    assert_eq!(poll(&mut cq_x).syndrome(), 0x15);
    let v = x.model.violations();
    assert!(v.iter().any(|v| matches!(v.reason, Reason::RetryExceeded { .. })), "{v:?}");
    assert!(x.model.counters().retransmits >= 1);
}

#[test]
fn roce_to_own_gid_is_loopback() {
    let mut x = Env::new();
    let mut cq = x.cq(4);
    let mut a = x.qp(&cq, &cq, 4, None);
    let b = x.qp(&cq, &cq, 4, None);
    let g = x.model.gids()[0];
    let p = Path::RoceV2 {
        dgid: g.gid,
        dmac: g.mac,
        sgid_index: 0,
        udp_sport: 1,
        hop_limit: 0,
        traffic_class: 0,
        flow_label: 0,
        sl: 0,
    };
    rts(&mut x.ctl, a.qpn, b.qpn, p, 0, 0, 7);
    rts(&mut x.ctl, b.qpn, a.qpn, p, 0, 0, 7);
    let w = wqe(0, a.qpn, 0x08, 0x08, 0, 0, 0, &[]);
    x.ring(&mut a, &w);
    assert_eq!(poll(&mut cq).opcode(), 0);
}

#[test]
fn responder_path_not_leading_back_loses_the_ack() {
    let mut x = Env::new();
    let mut cq = x.cq(4);
    let mut a = x.qp(&cq, &cq, 4, None);
    let b = x.qp(&cq, &cq, 4, None);
    rts(&mut x.ctl, a.qpn, b.qpn, Path::Loopback, 0, 0, 7);
    rts(&mut x.ctl, b.qpn, 0x999, Path::Loopback, 0, 0, 7);
    let w = wqe(0, a.qpn, 0x08, 0x08, 0, 0, 0, &[]);
    x.ring(&mut a, &w);
    assert_eq!(poll(&mut cq).syndrome(), 0x15);
    // The ACK goes to QP 0x999, which does not exist: dropped, and the requester retries.
    assert!(x.model.violations().iter().any(|v| matches!(v.reason, Reason::RetryExceeded { .. })));
    assert!(x.model.counters().drop_no_qp >= 1);
    assert!(x.model.counters().duplicates >= 1, "retransmissions are duplicates at b");
}

#[test]
fn responder_on_another_model_logs_its_side() {
    let Across { mut x, y, mut cq_x, _cq_y, mut a, b, .. } = across(1);
    let src = x.region(4096, 0x1000, RW);
    let w = wqe(0, a.qpn, 0x08, 0x08, 0, 0x1000, 0xbad, &[(src.va, 8, src.key.0)]);
    x.ring(&mut a, &w);
    assert_eq!(poll(&mut cq_x).syndrome(), 0x13);
    assert_eq!(y.model.qp_state(b.qpn), Some(crate::QpState::Error));
    let v = y.model.violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!((v[0].qpn, v[0].reason), (b.qpn, Reason::UnknownRkey { rkey: 0xbad }));
    assert!(y.model.events().contains(&crate::Event::QpAccessError { qpn: b.qpn }));
}

/// Two models, each on one end of a veth pair through [`Model::on_interface`]: an RC WRITE
/// crosses the Linux wire as real frames. Skipped (with a note) where no veth pair can be
/// made (no `CAP_NET_ADMIN`, no `ip`, no veth driver).
#[cfg(target_os = "linux")]
#[test]
fn models_on_a_veth_pair_write_across_it() {
    use std::process::Command;
    let base = format!("rpw{}", std::process::id() % 100_000);
    let (ia, ib) = (format!("{base}a"), format!("{base}b"));
    let ip =
        |args: &[&str]| Command::new("ip").args(args).output().is_ok_and(|o| o.status.success());
    if !ip(&["link", "add", &ia, "type", "veth", "peer", "name", &ib]) {
        eprintln!("*** NOT RUN: models over veth: cannot create a veth pair ***");
        return;
    }
    struct Del(String);
    impl Drop for Del {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["link", "del", &self.0]).output();
        }
    }
    let _del = Del(ia.clone());
    assert!(ip(&["link", "set", &ia, "up"]) && ip(&["link", "set", &ib, "up"]));
    std::thread::sleep(std::time::Duration::from_millis(200));
    let g = |last: u8| crate::Gid {
        gid: std::net::Ipv4Addr::new(10, 66, 0, last).to_ipv6_mapped().octets(),
        mac: [0x02, 0x4d, 0x56, 0, 0, last],
    };
    let (gx, gy) = (g(1), g(2));
    let mut x = Env::with_model(Model::on_interface(&ia, vec![gx]).expect("model on veth a"));
    let mut y = Env::with_model(Model::on_interface(&ib, vec![gy]).expect("model on veth b"));
    let mut cq_x = x.cq(4);
    let cq_y = y.cq(4);
    let mut a = x.qp(&cq_x, &cq_x, 4, None);
    let b = y.qp(&cq_y, &cq_y, 4, None);
    let to = |g: crate::Gid| Path::RoceV2 {
        dgid: g.gid,
        dmac: g.mac,
        sgid_index: 0,
        udp_sport: 0xc000,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        sl: 0,
    };
    rts(&mut x.ctl, a.qpn, b.qpn, to(gy), 5, 9, 7);
    rts(&mut y.ctl, b.qpn, a.qpn, to(gx), 9, 5, 7);
    let src = x.region(8192, 0x1000, RW);
    let dst = y.region(8192, 0x8000, RW);
    fill(&src.buf, 0, 5000, 0x42);
    let w = wqe(0, a.qpn, 0x08, 0x08, 0, dst.va, dst.key.0, &[(src.va, 5000, src.key.0)]);
    x.ring(&mut a, &w);
    let c = poll(&mut cq_x);
    assert_eq!(c.opcode(), 0, "{:?}", x.model.violations());
    assert_eq!(bytes(&dst.buf, 0, 5000), bytes(&src.buf, 0, 5000));
    assert!(y.model.counters().frames_received >= 5);
}

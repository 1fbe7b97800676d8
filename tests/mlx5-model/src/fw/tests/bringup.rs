//! The whole life of an HCA through the command interface: initialization segment, bring-up,
//! objects (checked on the model), events, teardown and page accounting.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::fw::HcaState;
use crate::objects::QpState as ModelQp;

#[test]
fn initialization_segment_reads_as_configured() {
    let cfg = FwConfig { fw_rev: (16, 35, 1012), ..FwConfig::default() };
    let d = Dev::new(cfg);
    let fw_rev = d.bar.read_be32(seg::FW_REV);
    assert_eq!((fw_rev & 0xffff, fw_rev >> 16), (16, 35));
    let sub = d.bar.read_be32(seg::CMDIF_REV_FW_SUB);
    assert_eq!((sub >> 16, sub & 0xffff), (u32::from(CMD_IF_REV), 1012));
    let l = d.bar.read_be32(seg::CMDQ_ADDR_L_SZ);
    assert_eq!(l & !0xfff, d.q.bus().0 as u32, "the address the driver stored stays");
    assert_eq!(((l >> 4) & 0xf, l & 0xf), (5, 6), "32 slots of 64 bytes");
    assert_eq!((l >> 8) & 7, 0, "nic_interface: full driver");
    assert_eq!(d.bar.read_be32(seg::CMDQ_ADDR_H), (d.q.bus().0 >> 32) as u32);
    assert_eq!(d.bar.read_be32(seg::INITIALIZING) & seg::INITIALIZING_BIT, 0);
    assert_eq!(d.bar.read_be32(seg::HEALTH_IRISC_INDEX), 0, "no health syndrome");
    assert_eq!(d.bar.read_be32(seg::CMD_EXEC_TO), 60_000);
    let c1 = d.bar.read_be32(seg::HEALTH_COUNTER);
    let c2 = d.bar.read_be32(seg::HEALTH_COUNTER);
    assert_ne!(c1, c2, "a live firmware's health counter moves");
    let t1 = u64::from(d.bar.read_be32(seg::INTERNAL_TIMER_H)) << 32
        | u64::from(d.bar.read_be32(seg::INTERNAL_TIMER_L));
    std::thread::sleep(Duration::from_millis(2));
    let t2 = u64::from(d.bar.read_be32(seg::INTERNAL_TIMER_L));
    assert!(t2 > t1 & 0xffff_ffff || d.bar.read_be32(seg::INTERNAL_TIMER_H) > (t1 >> 32) as u32);
    // Stores to read-only registers are counted and otherwise ignored.
    d.bar.write_be32(seg::FW_REV, 0xdead_beef);
    assert_eq!(d.bar.read_be32(seg::FW_REV) & 0xffff, 16);
    assert_eq!(d.fw.ignored_stores(), 1);
}

#[test]
fn initializing_clears_after_the_configured_delay() {
    let cfg = FwConfig { init_delay: Duration::from_millis(300), ..FwConfig::default() };
    let d = Dev::new(cfg);
    assert_ne!(d.bar.read_be32(seg::INITIALIZING) & seg::INITIALIZING_BIT, 0);
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while d.bar.read_be32(seg::INITIALIZING) & seg::INITIALIZING_BIT != 0 {
        assert!(std::time::Instant::now() < end, "initializing never cleared");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(d.bar.read_be32(seg::CMD_Q_INIT_TO), 300);
}

#[test]
fn full_bring_up_objects_and_teardown() {
    let mut d = Dev::new(FwConfig { boot_pages: 3, init_pages: 9, ..FwConfig::default() });
    assert_eq!(d.fw.state(), HcaState::Disabled);
    d.simple(Opcode::EnableHca, 0);
    assert_eq!(d.fw.state(), HcaState::Enabled);
    assert_eq!(d.query_pages(PagesStage::Boot), 3);
    d.satisfy(PagesStage::Boot);
    assert_eq!(d.query_pages(PagesStage::Boot), 0);
    assert_eq!(d.query_pages(PagesStage::Init), 9);
    let out = d.ok(&input(Opcode::QueryIssi, 0, 16), ifc::query_issi_out::SIZE);
    assert_eq!(ifc::query_issi_out::CURRENT_ISSI.get(&out), 0);
    let mut issi = input(Opcode::SetIssi, 0, 16);
    ifc::set_issi_in::CURRENT_ISSI.set(&mut issi, 1);
    d.ok(&issi, 16);
    assert_eq!(d.fw.issi(), 1);

    // Host endianness: write, then read back (register data through the inline/mailbox split).
    let mut reg = input(Opcode::AccessReg, 0, 32);
    ifc::access_register_in::REGISTER_ID.set(&mut reg, u64::from(REG_HOST_ENDIANNESS));
    ifc::register_host_endianness::HE.at(ifc::access_register_in::REGISTER_DATA).set(&mut reg, 1);
    d.ok(&reg, 16);
    assert_eq!(d.fw.host_endianness()[0], 0x80);
    let mut rd = input(Opcode::AccessReg, 1, 16);
    ifc::access_register_in::REGISTER_ID.set(&mut rd, u64::from(REG_HOST_ENDIANNESS));
    let out = d.ok(&rd, 32);
    assert_eq!(
        ifc::register_host_endianness::HE.at(ifc::access_register_out::REGISTER_DATA).get(&out),
        1
    );

    // Capabilities come back through eight output mailboxes and match the model's limits.
    let caps = d.query_caps(CapType::General, false);
    let mc = d.model.shared().dev().caps;
    use ifc::cmd_hca_cap as g;
    assert_eq!(g::LOG_MAX_QP_SZ.get(&caps), u64::from(mc.log_max_qp_sz));
    assert_eq!(g::LOG_MAX_CQ_SZ.get(&caps), u64::from(mc.log_max_cq_sz));
    assert_eq!(g::MAX_WQE_SZ_SQ.get(&caps), u64::from(mc.max_wqe_sz_sq));
    assert_eq!(g::LOG_BF_REG_SIZE.get(&caps), u64::from(mc.log_bf_reg_size));
    assert_eq!(g::PORT_TYPE.get(&caps), u64::from(PORT_TYPE_ETH));
    assert_eq!((g::ROCE.get(&caps), g::NUM_PORTS.get(&caps)), (1, 1));
    assert_eq!(g::LOG_MAX_QP.get(&caps), 10);
    let roce = d.query_caps(CapType::Roce, true);
    assert_eq!(ifc::roce_cap::R_ROCE_DEST_UDP_PORT.get(&roce), 4791);
    assert_eq!(ifc::roce_cap::ROCE_VERSION.get(&roce), 1 << 2);

    // SET_HCA_CAP lowers log_max_qp; the current capabilities show it, the maximum does not.
    let mut caps = d.query_caps(CapType::General, true);
    g::LOG_MAX_QP.set(&mut caps, 3);
    let mut set = input(Opcode::SetHcaCap, 0, ifc::set_hca_cap_in::SIZE);
    set[ifc::set_hca_cap_in::CAPABILITY.byte()..].copy_from_slice(&caps);
    d.ok(&set, 16);
    assert_eq!(g::LOG_MAX_QP.get(&d.query_caps(CapType::General, true)), 3);
    assert_eq!(g::LOG_MAX_QP.get(&d.query_caps(CapType::General, false)), 10);

    d.satisfy(PagesStage::Init);
    d.init_hca();
    assert_eq!(d.fw.state(), HcaState::Initialized);
    assert_eq!(d.fw.pages().held, 12);
    assert_eq!(d.query_pages(PagesStage::Regular), 0);
    d.set_roce(true);
    assert!(d.fw.roce_enabled());
    let vport_out = ifc::query_nic_vport_context_out::SIZE;
    let out = d.ok(&input(Opcode::QueryNicVportContext, 0, 16), vport_out);
    let ctx = ifc::query_nic_vport_context_out::NIC_VPORT_CONTEXT;
    assert_eq!(ifc::nic_vport_context::ROCE_EN.at(ctx).get(&out[..]), 1);
    let mac = d.model.gids()[0].mac;
    assert_eq!(
        ifc::nic_vport_context::MAC_31_0.at(ctx).get(&out),
        u64::from(u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]))
    );

    // Objects: each exists on the model afterwards.
    let uar = d.alloc_uar();
    assert!(d.model.shared().dev().uars.contains_key(&uar));
    let (eqn, eq_buf) = d.create_eq(uar, 4, &[EventType::Cmd, EventType::PageRequest]);
    let pd = d.alloc_pd();
    assert!(d.model.shared().dev().pds.contains(&pd));
    let (mk_in, _) = d.mkey_input(pd, 3 * 4096 + 100, 0xa7);
    let out = d.ok(&mk_in, 16);
    let mkey_index = ifc::create_mkey_out::MKEY_INDEX.get(&out) as u32;
    let key = mkey_index << 8 | 0xa7;
    {
        let dev = d.model.shared().dev();
        let mk = dev.mkeys.get(&key).expect("the key the PRM promises: index << 8 | mkey_7_0");
        assert_eq!((mk.pd, mk.start, mk.len), (pd, 0x7f00_0000_0000, 3 * 4096 + 100));
        assert!(mk.rights.local_write && mk.rights.remote_write && !mk.rights.remote_read);
    }
    let cq = d.create_cq(uar, eqn, 6);
    assert_eq!(d.model.shared().dev().cqs[&cq].log_size, 6);
    let a = d.create_qp(pd, cq, uar);
    let b = d.create_qp(pd, cq, uar);
    {
        let dev = d.model.shared().dev();
        let q = &dev.qps[&a];
        assert_eq!(
            (
                q.spec.pd,
                q.spec.send_cq,
                q.spec.log_sq_size,
                q.spec.log_rq_size,
                q.spec.log_rq_stride
            ),
            (pd, cq, 6, Some(4), 5)
        );
    }
    d.connect(a, b);
    d.connect(b, a);
    assert_eq!(d.model.qp_state(a), Some(ModelQp::Rts));
    assert_eq!(d.model.qp_state(b), Some(ModelQp::Rts));
    assert_eq!(d.model.shared().dev().qps[&a].remote_qpn, b);
    let mut x = input(Opcode::QueryQp, 0, 16);
    ifc::query_qp_in::QPN.set(&mut x, u64::from(a));
    let out = d.ok(&x, ifc::query_qp_out::SIZE);
    let qpc = |f: Field| f.at(ifc::query_qp_out::QPC).get(&out);
    assert_eq!(qpc(ifc::qpc::STATE), u64::from(u8::from(QpState::Rts)));
    assert_eq!((qpc(ifc::qpc::REMOTE_QPN), qpc(ifc::qpc::PD)), (u64::from(b), u64::from(pd)));
    assert_eq!((qpc(ifc::qpc::CQN_SND), qpc(ifc::qpc::LOG_SQ_SIZE)), (u64::from(cq), 6));
    let out = d.ok(&input(Opcode::QueryVportState, 0, 16), 16);
    assert_eq!(ifc::query_vport_state_out::STATE.get(&out), u64::from(VPORT_STATE_UP));
    // The RoCE address table in the kernel's form (see the test below): the default GID is
    // IPv4-mapped, so the whole GID, its MAC, L3 type IPv4, version 2.
    let g = d.model.gids()[0];
    assert_eq!(&g.gid[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    let entry = kernel_roce_addr(Some((g.gid, g.mac)), 0, 2);
    assert_eq!(query_roce_address(&mut d, 0), entry);
    assert_eq!(query_roce_address(&mut d, 1), [0; 32], "an empty entry");
    let mut x = input(Opcode::QueryRoceAddress, 0, 16);
    ifc::query_roce_address_in::ROCE_ADDRESS_INDEX.set(&mut x, 16);
    assert_eq!(
        d.status(&x, ifc::query_roce_address_out::SIZE),
        (CmdStatus::BadIndex, crate::fw::codes::syndrome::INDEX_RANGE)
    );
    // SET_ROCE_ADDRESS: the configured entry is accepted, anything else refused.
    let gid_mismatch = (CmdStatus::BadParam, crate::fw::codes::syndrome::GID_MISMATCH);
    assert_eq!(d.status(&set_roce_address(0, 1, entry), 16), (CmdStatus::Ok, 0));
    let mut other = g.gid;
    other[15] ^= 1;
    let other = kernel_roce_addr(Some((other, g.mac)), 0, 2);
    assert_eq!(d.status(&set_roce_address(0, 1, other), 16), gid_mismatch);
    let mut mac = g.mac;
    mac[5] ^= 1;
    let other_mac = kernel_roce_addr(Some((g.gid, mac)), 0, 2);
    assert_eq!(d.status(&set_roce_address(0, 1, other_mac), 16), gid_mismatch);
    let clear = kernel_roce_addr(None, 1, 2);
    assert_eq!(d.status(&set_roce_address(3, 1, clear), 16), (CmdStatus::Ok, 0));
    assert_eq!(d.status(&set_roce_address(3, 1, entry), 16), gid_mismatch);
    assert_eq!(d.status(&set_roce_address(16, 1, clear), 16).0, CmdStatus::BadIndex);
    assert_eq!(d.fw.live_objects(), 7);

    // Command completion events arrived on the EQ, one per command since
    // CREATE_EQ (not for CREATE_EQ itself: no command EQ existed when it was issued), with the
    // slot's bit and the owner bit of their pass over the 16-entry ring.
    let log = d.fw.executed();
    let total = log.iter().rev().take_while(|e| e.opcode != Opcode::CreateEq).count() as u32;
    assert!(total > 16, "the ring wrapped");
    // The last event follows the last completion (the owner bit is handed back first).
    let end = std::time::Instant::now() + WAIT;
    while ifc::eqe::OWNER.get(&d.eqe(eq_buf, 4, total - 1)) != u64::from((total - 1) >> 4 & 1) {
        assert!(std::time::Instant::now() < end, "no event for the last command");
        std::thread::sleep(Duration::from_micros(50));
    }
    for n in total - 16..total {
        let e = d.eqe(eq_buf, 4, n);
        assert_eq!(ifc::eqe::EVENT_TYPE.get(&e), u64::from(u8::from(EventType::Cmd)));
        assert_eq!(ifc::eqe::OWNER.get(&e), u64::from(n >> 4 & 1), "EQE {n}");
        let data = ifc::eqe::EVENT_DATA;
        assert_eq!(ifc::cmd_inter_comp_event::COMMAND_COMPLETION_VECTOR.get(data.slice(&e)), 1);
    }

    // Teardown in the kernel's order; the firmware then gives every page back.
    for qp in [a, b] {
        d.ok(&d.transition(Opcode::ToErrQp, qp), 16);
        assert_eq!(d.model.qp_state(qp), Some(ModelQp::Error));
        d.ok(&d.transition(Opcode::ToRstQp, qp), 16);
        let mut x = input(Opcode::DestroyQp, 0, 16);
        ifc::destroy_qp_in::QPN.set(&mut x, u64::from(qp));
        d.ok(&x, 16);
        assert_eq!(d.model.qp_state(qp), None);
    }
    let mut x = input(Opcode::DestroyCq, 0, 16);
    ifc::destroy_cq_in::CQN.set(&mut x, u64::from(cq));
    d.ok(&x, 16);
    let mut x = input(Opcode::DestroyMkey, 0, 16);
    ifc::destroy_mkey_in::MKEY_INDEX.set(&mut x, u64::from(mkey_index));
    d.ok(&x, 16);
    assert!(d.model.shared().dev().mkeys.is_empty());
    let mut x = input(Opcode::DeallocPd, 0, 16);
    ifc::dealloc_pd_in::PD.set(&mut x, u64::from(pd));
    d.ok(&x, 16);
    let mut x = input(Opcode::DestroyEq, 0, 16);
    ifc::destroy_eq_in::EQ_NUMBER.set(&mut x, u64::from(eqn));
    d.ok(&x, 16);
    let mut x = input(Opcode::DeallocUar, 0, 16);
    ifc::dealloc_uar_in::UAR.set(&mut x, u64::from(uar));
    d.ok(&x, 16);
    assert_eq!(d.fw.live_objects(), 0);
    assert!(d.model.shared().dev().uars.is_empty());

    d.simple(Opcode::TeardownHca, 0);
    assert_eq!(d.fw.state(), HcaState::TornDown);
    assert_eq!(d.query_pages(PagesStage::Regular), -12, "everything can be returned");
    let lent: BTreeSet<u64> = d.lent.iter().copied().collect();
    let mut back = d.take(5);
    back.extend(d.take(100));
    assert_eq!(back.len(), 12);
    assert_eq!(back.iter().copied().collect::<BTreeSet<_>>(), lent, "exactly the pages lent");
    assert!(d.take(4).is_empty());
    d.simple(Opcode::DisableHca, 0);
    assert_eq!(d.fw.state(), HcaState::Disabled);
    let p = d.fw.pages();
    assert_eq!((p.held, p.total_given, p.total_taken), (0, 12, 12));
    assert!(d.fw.delivery_errors().is_empty());
    assert_eq!(d.fw.spurious_doorbells(), 0);
    assert_eq!(d.model.counters().validation_failures, 0);
}

/// A 32-byte `roce_addr_layout` as the kernel fills it, written byte by byte from
/// `mlx5_ifc.h`'s `roce_addr_layout_bits` (`source_l3_address` bytes 0..16, `vlan_valid` and
/// `vlan_id` bytes 16..18, `source_mac_47_32` 18..20, `source_mac_31_0` 20..24, `roce_l3_type`
/// the low nibble of byte 26, `roce_version` byte 27), independent of the model's accessors.
/// `mlx5_core_roce_gid_set` copies the whole 16-byte GID and the MAC only when it has a GID,
/// and sets the version and L3 type on every call (since the kernel's April 2021 fix).
fn kernel_roce_addr(gid: Option<([u8; 16], [u8; 6])>, l3_type: u8, version: u8) -> [u8; 32] {
    let mut e = [0u8; 32];
    if let Some((gid, mac)) = gid {
        e[0..16].copy_from_slice(&gid);
        e[18..24].copy_from_slice(&mac);
    }
    e[26] = l3_type;
    e[27] = version;
    e
}

/// A `SET_ROCE_ADDRESS` (0x761) input, byte by byte: `opcode` bytes 0..2,
/// `roce_address_index` bytes 8..10, `vhca_port_num` the low nibble of byte 11, the entry at
/// byte 16.
fn set_roce_address(index: u16, port: u8, entry: [u8; 32]) -> Vec<u8> {
    let mut c = vec![0u8; 48];
    c[0..2].copy_from_slice(&[0x07, 0x61]);
    c[8..10].copy_from_slice(&index.to_be_bytes());
    c[11] = port;
    c[16..48].copy_from_slice(&entry);
    c
}

/// The entry a `QUERY_ROCE_ADDRESS` (0x760) answers for `index` (its output's bytes 16..48).
fn query_roce_address(d: &mut Dev, index: u16) -> [u8; 32] {
    let mut c = vec![0u8; 16];
    c[0..2].copy_from_slice(&[0x07, 0x60]);
    c[8..10].copy_from_slice(&index.to_be_bytes());
    let out = d.ok(&c, 48);
    out[16..48].try_into().unwrap()
}

/// The RoCE address table takes and answers the entries the kernel's `set_roce_addr` /
/// `mlx5_core_roce_gid_set` write for RoCE v2: an IPv4 GID is the whole IPv4-mapped GID
/// (`::ffff:a.b.c.d`) with L3 type IPv4 (0), an IPv6 one its GID with L3 type IPv6 (1), both
/// version 2; a clear (`mlx5_ib_del_gid`) is no address and no MAC with version 2 and L3 type
/// IPv6. The deprecated IPv4-compatible form `::a.b.c.d` names another GID and is refused;
/// a version-0 clear is refused as firmware refuses it on a function without RoCE v1 (the
/// model's `roce_cap.roce_version` lists only v2), with the syndrome the kernel's fix quotes.
#[test]
fn roce_address_table_takes_and_answers_the_kernels_image() {
    // ::ffff:192.0.2.7 and fe80::4d:11ff:fe22:3344, literal.
    let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7];
    let v6 = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x4d, 0x11, 0xff, 0xfe, 0x22, 0x33, 0x44];
    let mac = [0x02, 0x4d, 0x00, 0x11, 0x22, 0x33];
    let gids = vec![crate::model::Gid { gid: v4, mac }, crate::model::Gid { gid: v6, mac }];
    let model = Model::with_config(crate::ModelConfig { gids, ..Default::default() }).unwrap();
    let mut d = Dev::on(model, FwConfig::default());
    d.up();
    let ok = (CmdStatus::Ok, 0);
    let mismatch = (CmdStatus::BadParam, crate::fw::codes::syndrome::GID_MISMATCH);
    // `mlx5_cmd_check: SET_ROCE_ADDRESS(0x761) ... bad parameter(0x3), syndrome (0x12822d)`.
    let no_v1 = (CmdStatus::BadParam, 0x0012_822d);

    // QUERY answers the entries in the same form.
    let mapped = kernel_roce_addr(Some((v4, mac)), 0, 2);
    let ipv6 = kernel_roce_addr(Some((v6, mac)), 1, 2);
    assert_eq!(query_roce_address(&mut d, 0), mapped);
    assert_eq!(query_roce_address(&mut d, 1), ipv6);
    assert_eq!(query_roce_address(&mut d, 2), [0; 32], "never written");

    // SET takes the kernel's image of the configured entries, on port 0 or 1.
    assert_eq!(d.status(&set_roce_address(0, 0, mapped), 16), ok);
    assert_eq!(d.status(&set_roce_address(0, 1, mapped), 16), ok);
    assert_eq!(d.status(&set_roce_address(1, 1, ipv6), 16), ok);
    // ... and the kernel's clear past them.
    let clear = kernel_roce_addr(None, 1, 2);
    assert_eq!(d.status(&set_roce_address(5, 1, clear), 16), ok);
    assert_eq!(d.status(&set_roce_address(15, 1, clear), 16), ok);
    assert_eq!(d.status(&set_roce_address(16, 1, clear), 16).0, CmdStatus::BadIndex);

    // The deprecated IPv4-compatible GID ::192.0.2.7 (bytes 10..12 zero) is another GID.
    let mut compat = v4;
    compat[10..12].copy_from_slice(&[0, 0]);
    assert_eq!(
        d.status(&set_roce_address(0, 1, kernel_roce_addr(Some((compat, mac)), 0, 2)), 16),
        mismatch
    );
    // An address that disagrees with its L3 type, another address or MAC: refused.
    let typed_v6 = kernel_roce_addr(Some((v4, mac)), 1, 2);
    assert_eq!(d.status(&set_roce_address(0, 1, typed_v6), 16), mismatch);
    let mut other = v4;
    other[15] ^= 1;
    assert_eq!(
        d.status(&set_roce_address(0, 1, kernel_roce_addr(Some((other, mac)), 0, 2)), 16),
        mismatch
    );
    let mut other_mac = mac;
    other_mac[5] ^= 1;
    assert_eq!(
        d.status(&set_roce_address(0, 1, kernel_roce_addr(Some((v4, other_mac)), 0, 2)), 16),
        mismatch
    );
    // The configured table is fixed: no clearing or writing over its entries, no new ones.
    assert_eq!(d.status(&set_roce_address(0, 1, clear), 16), mismatch);
    assert_eq!(d.status(&set_roce_address(5, 1, mapped), 16), mismatch);

    // No RoCE v1 on this function: the pre-2021 all-zero clear (version 0, type 0) and any
    // version-0 entry are refused as real firmware refuses them.
    assert_eq!(d.status(&set_roce_address(5, 1, [0; 32]), 16), no_v1);
    assert_eq!(
        d.status(&set_roce_address(0, 1, kernel_roce_addr(Some((v4, mac)), 0, 0)), 16),
        no_v1
    );
    // The table is unchanged by all of it.
    assert_eq!(query_roce_address(&mut d, 0), mapped);
    assert_eq!(query_roce_address(&mut d, 1), ipv6);
}

#[test]
fn given_pages_are_used_by_the_firmware() {
    let mut d = Dev::new(FwConfig::default());
    d.simple(Opcode::EnableHca, 0);
    let pages = d.give(2);
    let mut b = [0u8; 16];
    assert!(d.dma.read(BusAddr(pages[1] + 4000), &mut b));
    assert_eq!(b, [0xf5; 16]);
}

#[test]
fn runtime_page_requests_go_through_the_pages_eq() {
    let mut d = up();
    assert_eq!(d.fw.request_pages(2), Err(crate::fw::FwError::NoEventQueue));
    let uar = d.alloc_uar();
    // A 2-entry EQ, so the owner bit flips on the third event.
    let (_, buf) = d.create_eq(uar, 1, &[EventType::PageRequest]);
    let held = d.fw.pages().held;
    d.fw.request_pages(3).unwrap();
    let e = d.eqe(buf, 1, 0);
    assert_eq!(ifc::eqe::EVENT_TYPE.get(&e), u64::from(u8::from(EventType::PageRequest)));
    assert_eq!(ifc::eqe::OWNER.get(&e), 0);
    let data = ifc::eqe::EVENT_DATA.slice(&e);
    assert_eq!(ifc::pages_req_event::NUM_PAGES.get(data), 3);
    assert_eq!(ifc::pages_req_event::FUNCTION_ID.get(data), 0);
    assert_eq!(d.eqe(buf, 1, 1)[63] & 1, 1, "the next entry still has the initial owner bit");
    assert_eq!(d.query_pages(PagesStage::Regular), 3);
    d.give(3);
    assert_eq!(d.query_pages(PagesStage::Regular), 0);
    assert_eq!(d.fw.pages().held, held + 3);

    // Offer two back: a negative request.
    d.fw.request_pages(-2).unwrap();
    let data = d.eqe(buf, 1, 1);
    assert_eq!(
        ifc::pages_req_event::NUM_PAGES.get(ifc::eqe::EVENT_DATA.slice(&data)) as u32 as i32,
        -2
    );
    assert_eq!(d.query_pages(PagesStage::Regular), -2);
    assert_eq!(d.take(5).len(), 2, "only the offered pages come back");
    assert_eq!(d.query_pages(PagesStage::Regular), 0);

    // Third event: the ring wrapped, owner bit 1.
    d.fw.request_pages(1).unwrap();
    assert_eq!(ifc::eqe::OWNER.get(&d.eqe(buf, 1, 2)), 1);
    // The driver cannot: MANAGE_PAGES allocation-fail clears the request.
    d.simple(Opcode::ManagePages, ManagePagesMode::AllocationFail.into());
    assert_eq!(d.query_pages(PagesStage::Regular), 0);
}

#[test]
fn commands_run_in_any_slot_and_concurrently() {
    let mut d = up();
    let posted: Vec<_> =
        (0..8).map(|s| d.post(s, &input(Opcode::AllocPd, 0, 16), 16, Tweak::default())).collect();
    let mut pds = BTreeSet::new();
    for p in &posted {
        assert_eq!(d.wait(p.slot, WAIT).map(|o| o >> 1), Some(0));
        let out = d.output(p);
        assert_eq!(ifc::cmd_out::STATUS.get(&out), 0);
        pds.insert(ifc::alloc_pd_out::PD.get(&out));
    }
    assert_eq!(pds.len(), 8, "eight distinct PDs");
}

#[test]
fn eq_doorbells_report_consumption_and_a_full_eq_overruns() {
    use crate::fw::{eq, FwError};
    let mut d = up();
    let uar = d.alloc_uar();
    let (eqn, buf) = d.create_eq(uar, 1, &[EventType::PageRequest]);
    let page = uar as usize * crate::UAR_PAGE;
    let ring = |d: &Dev, at: usize, ci: u32| d.bar.write_be32(page + at, u32::from(eqn) << 24 | ci);
    ring(&d, eq::DOORBELL_ARM, 0);
    d.fw.request_pages(1).unwrap();
    d.fw.request_pages(1).unwrap();
    assert_eq!(d.fw.request_pages(1), Err(FwError::EqOverrun), "two entries, none consumed");
    assert_eq!(d.fw.eq_overruns(), 1);
    assert_eq!(ifc::eqe::OWNER.get(&d.eqe(buf, 1, 0)), 0, "the unconsumed entry is intact");
    ring(&d, eq::DOORBELL_UPDATE, 1);
    d.fw.request_pages(1).unwrap();
    assert_eq!(ifc::eqe::OWNER.get(&d.eqe(buf, 1, 2)), 1);
    assert_eq!(d.query_pages(PagesStage::Regular), 3, "the dropped request asked for nothing");
    // A doorbell naming an EQ that is not on this UAR page.
    d.bar.write_be32(page + eq::DOORBELL_ARM, 9 << 24);
    assert_eq!(d.fw.bad_eq_doorbells(), 1);
    assert_eq!(d.model.counters().validation_failures, 0);
}

#[test]
fn the_models_bar_is_bar0_while_a_firmware_runs() {
    let model = Model::new();
    let fw = Firmware::start(&model, FwConfig::default()).unwrap();
    assert!(Firmware::start(&model, FwConfig::default()).is_err(), "one firmware per model");
    assert_eq!(model.bar().read_be32(seg::CMDIF_REV_FW_SUB) >> 16, u32::from(CMD_IF_REV));
    model.bar().write_be32(seg::CMD_DBELL, 0);
    assert!(model.violations().is_empty(), "page 0 belongs to the firmware");
    drop(fw);
    // Without it, the model treats page 0 as before: a store there is an unknown BAR store.
    model.bar().write_be32(seg::CMD_DBELL, 1);
    assert_eq!(model.violations().len(), 1);
}

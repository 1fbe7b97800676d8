//! Every refusal: command statuses with their syndromes, and delivery statuses.

use super::*;
use crate::fw::codes::syndrome as syn;
use crate::fw::HcaState;

fn pd_of(d: &mut Dev, op: Opcode, field: Field, v: u32) -> (CmdStatus, u32) {
    let mut x = input(op, 0, 16);
    field.set(&mut x, u64::from(v));
    d.status(&x, 16)
}

#[test]
fn life_cycle_order_is_enforced() {
    let mut d = Dev::new(FwConfig::default());
    // Nothing but ENABLE_HCA before ENABLE_HCA.
    for op in [Opcode::Nop, Opcode::QueryIssi, Opcode::QueryPages, Opcode::InitHca, Opcode::AllocPd]
    {
        assert_eq!(d.status(&input(op, 1, 32), 16), (CmdStatus::BadSysState, syn::NOT_ENABLED));
    }
    d.simple(Opcode::EnableHca, 0);
    d.simple(Opcode::Nop, 0);
    assert_eq!(
        d.status(&input(Opcode::EnableHca, 0, 16), 16),
        (CmdStatus::BadResState, syn::FUNCTION_STATE)
    );
    // Objects need INIT_HCA.
    assert_eq!(
        d.status(&input(Opcode::AllocPd, 0, 16), 16),
        (CmdStatus::BadSysState, syn::NOT_INITIALIZED)
    );
    // Capabilities and registers need the boot pages.
    assert_eq!(
        d.status(&input(Opcode::QueryHcaCap, 1, 16), ifc::query_hca_cap_out::SIZE),
        (CmdStatus::NoResources, syn::NOT_ENOUGH_PAGES)
    );
    d.satisfy(PagesStage::Boot);
    // INIT_HCA needs the init pages too.
    assert_eq!(
        d.status(&input(Opcode::InitHca, 0, 32), 16),
        (CmdStatus::NoResources, syn::NOT_ENOUGH_PAGES)
    );
    d.satisfy(PagesStage::Init);
    d.init_hca();
    for op in [Opcode::InitHca, Opcode::SetIssi] {
        assert_eq!(
            d.status(&input(op, 0, 32), 16),
            (CmdStatus::BadSysState, syn::ALREADY_INITIALIZED)
        );
    }
    assert_eq!(
        d.status(&input(Opcode::SetHcaCap, 0, ifc::set_hca_cap_in::SIZE), 16),
        (CmdStatus::BadSysState, syn::ALREADY_INITIALIZED)
    );
    assert_eq!(
        d.status(&input(Opcode::DisableHca, 0, 16), 16),
        (CmdStatus::BadSysState, syn::ALREADY_INITIALIZED)
    );
    // TEARDOWN_HCA refuses while objects live; after it, only pages and DISABLE_HCA.
    let pd = d.alloc_pd();
    assert_eq!(
        d.status(&input(Opcode::TeardownHca, 0, 16), 16),
        (CmdStatus::ResourceBusy, syn::OBJECTS_ALIVE)
    );
    pd_of(&mut d, Opcode::DeallocPd, ifc::dealloc_pd_in::PD, pd);
    d.simple(Opcode::TeardownHca, 0);
    assert_eq!(
        d.status(&input(Opcode::AllocPd, 0, 16), 16),
        (CmdStatus::BadSysState, syn::NOT_INITIALIZED)
    );
    // DISABLE_HCA refuses while the firmware holds pages.
    assert_eq!(
        d.status(&input(Opcode::DisableHca, 0, 16), 16),
        (CmdStatus::ResourceBusy, syn::OBJECTS_ALIVE)
    );
    d.take(64);
    d.simple(Opcode::DisableHca, 0);
    assert_eq!(
        d.status(&input(Opcode::DisableHca, 0, 16), 16),
        (CmdStatus::BadSysState, syn::NOT_ENABLED)
    );
    assert_eq!(d.fw.state(), HcaState::Disabled);
}

#[test]
fn bad_opcodes_op_mods_and_lengths() {
    let mut d = up();
    let mut x = input(Opcode::Nop, 0, 16);
    ifc::cmd_in::OPCODE.set(&mut x, 0x999);
    assert_eq!(d.status(&x, 16), (CmdStatus::BadOp, syn::UNKNOWN_OPCODE));
    assert_eq!(
        d.status(&input(Opcode::QueryPages, 7, 16), 16),
        (CmdStatus::BadOp, syn::BAD_OP_MOD)
    );
    assert_eq!(
        d.status(&input(Opcode::ManagePages, 9, 16), 16),
        (CmdStatus::BadOp, syn::BAD_OP_MOD)
    );
    // Input shorter than the layout.
    assert_eq!(
        d.status(&input(Opcode::AllocPd, 0, 8), 16),
        (CmdStatus::BadInputLen, syn::INPUT_TOO_SHORT)
    );
    let short_qp = input(Opcode::CreateQp, 0, 100);
    assert_eq!(d.status(&short_qp, 16), (CmdStatus::BadInputLen, syn::INPUT_TOO_SHORT));
    // Output shorter than the layout.
    assert_eq!(
        d.status(&input(Opcode::QueryHcaCap, 1, 16), 16),
        (CmdStatus::BadOutputLen, syn::OUTPUT_TOO_SHORT)
    );
    // MANAGE_PAGES take with no room for the pages asked for.
    let mut take = input(Opcode::ManagePages, ManagePagesMode::Take.into(), 16);
    ifc::manage_pages_in::INPUT_NUM_ENTRIES.set(&mut take, 4);
    assert_eq!(d.status(&take, 16), (CmdStatus::BadOutputLen, syn::OUTPUT_TOO_SHORT));
    // MANAGE_PAGES give announcing more entries than the input carries.
    let mut give = input(Opcode::ManagePages, ManagePagesMode::Give.into(), 24);
    ifc::manage_pages_in::INPUT_NUM_ENTRIES.set(&mut give, 2);
    assert_eq!(d.status(&give, 16), (CmdStatus::BadInputLen, syn::BAD_PAGE_COUNT));
    // ACCESS_REG write without the register's bytes.
    let mut reg = input(Opcode::AccessReg, 0, 16);
    ifc::access_register_in::REGISTER_ID.set(&mut reg, u64::from(REG_HOST_ENDIANNESS));
    assert_eq!(d.status(&reg, 16), (CmdStatus::BadPkt, syn::SHORT_REGISTER));
    ifc::access_register_in::REGISTER_ID.set(&mut reg, 0x5001);
    assert_eq!(d.status(&reg, 16), (CmdStatus::BadParam, syn::BAD_REGISTER));
}

#[test]
fn bad_parameters() {
    let mut d = Dev::new(FwConfig::default());
    d.simple(Opcode::EnableHca, 0);
    let mut issi = input(Opcode::SetIssi, 0, 16);
    ifc::set_issi_in::CURRENT_ISSI.set(&mut issi, 5);
    assert_eq!(d.status(&issi, 16), (CmdStatus::BadParam, syn::BAD_ISSI));
    let mut f = input(Opcode::QueryPages, 1, 16);
    ifc::query_pages_in::FUNCTION_ID.set(&mut f, 3);
    assert_eq!(d.status(&f, 16), (CmdStatus::BadParam, syn::BAD_FUNCTION));
    // Pages: misaligned, unreachable, twice in one list, already held.
    let good = d.give(1)[0];
    let page = |d: &mut Dev, a: u64| {
        let mut x = input(Opcode::ManagePages, ManagePagesMode::Give.into(), 24);
        ifc::manage_pages_in::INPUT_NUM_ENTRIES.set(&mut x, 1);
        ifc::manage_pages_in::PAS.set(&mut x, a);
        d.status(&x, 16)
    };
    let fresh = d.alloc(8192, 4096);
    assert_eq!(page(&mut d, fresh + 0x80), (CmdStatus::BadParam, syn::BAD_PAGE));
    assert_eq!(page(&mut d, 0x1000), (CmdStatus::BadParam, syn::BAD_PAGE));
    assert_eq!(page(&mut d, good), (CmdStatus::BadParam, syn::BAD_PAGE));
    let mut two = input(Opcode::ManagePages, ManagePagesMode::Give.into(), 32);
    ifc::manage_pages_in::INPUT_NUM_ENTRIES.set(&mut two, 2);
    ifc::manage_pages_in::PAS.index(0).set(&mut two, fresh);
    ifc::manage_pages_in::PAS.index(1).set(&mut two, fresh);
    assert_eq!(d.status(&two, 16), (CmdStatus::BadParam, syn::BAD_PAGE));
    assert_eq!(d.fw.pages().held, 1, "refused lists give nothing");
    d.satisfy(PagesStage::Boot);
    // Capabilities: unknown type, above the maximum, unsupported UAR page size.
    assert_eq!(
        d.status(&input(Opcode::QueryHcaCap, 0x5 << 1, 16), ifc::query_hca_cap_out::SIZE),
        (CmdStatus::BadParam, syn::BAD_CAP_TYPE)
    );
    let mut caps = d.query_caps(CapType::General, true);
    ifc::cmd_hca_cap::LOG_MAX_QP.set(&mut caps, 11);
    let mut set = input(Opcode::SetHcaCap, 0, ifc::set_hca_cap_in::SIZE);
    set[ifc::set_hca_cap_in::CAPABILITY.byte()..].copy_from_slice(&caps);
    assert_eq!(d.status(&set, 16), (CmdStatus::BadParam, syn::CAP_ABOVE_MAX));
    ifc::cmd_hca_cap::LOG_MAX_QP.set(&mut caps, 8);
    ifc::cmd_hca_cap::LOG_UAR_PAGE_SZ.set(&mut caps, 4);
    set[ifc::set_hca_cap_in::CAPABILITY.byte()..].copy_from_slice(&caps);
    assert_eq!(d.status(&set, 16), (CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
    let mut td = input(Opcode::TeardownHca, 0, 16);
    d.satisfy(PagesStage::Init);
    d.init_hca();
    ifc::teardown_hca_in::PROFILE.set(&mut td, 2);
    assert_eq!(d.status(&td, 16), (CmdStatus::BadParam, syn::BAD_OP_MOD));
    let mut v = input(Opcode::ModifyNicVportContext, 0, ifc::modify_nic_vport_context_in::SIZE);
    ifc::modify_nic_vport_context_in::VPORT_NUMBER.set(&mut v, 1);
    assert_eq!(d.status(&v, 16), (CmdStatus::BadParam, syn::BAD_FUNCTION));
}

#[test]
fn object_checks() {
    let mut d = up();
    let uar = d.alloc_uar();
    let (eqn, _) = d.create_eq(uar, 4, &[EventType::Cmd]);
    let pd = d.alloc_pd();
    let cq = d.create_cq(uar, eqn, 5);

    // Unknown objects.
    assert_eq!(
        pd_of(&mut d, Opcode::DeallocPd, ifc::dealloc_pd_in::PD, pd + 100),
        (CmdStatus::BadResource, syn::NO_SUCH_OBJECT)
    );
    assert_eq!(
        pd_of(&mut d, Opcode::DestroyCq, ifc::destroy_cq_in::CQN, cq + 100),
        (CmdStatus::BadResource, syn::NO_SUCH_OBJECT)
    );
    assert_eq!(
        pd_of(&mut d, Opcode::DestroyQp, ifc::destroy_qp_in::QPN, 0x4242),
        (CmdStatus::BadResource, syn::NO_SUCH_OBJECT)
    );
    assert_eq!(
        pd_of(&mut d, Opcode::DestroyMkey, ifc::destroy_mkey_in::MKEY_INDEX, 0x77),
        (CmdStatus::BadResource, syn::NO_SUCH_OBJECT)
    );
    assert_eq!(
        pd_of(&mut d, Opcode::DeallocUar, ifc::dealloc_uar_in::UAR, uar + 1),
        (CmdStatus::BadResource, syn::NO_SUCH_OBJECT)
    );
    assert_eq!(
        pd_of(&mut d, Opcode::DestroyEq, ifc::destroy_eq_in::EQ_NUMBER, u32::from(eqn) + 1),
        (CmdStatus::BadResource, syn::NO_SUCH_OBJECT)
    );
    // Indices beyond the table.
    assert_eq!(
        pd_of(&mut d, Opcode::DestroyEq, ifc::destroy_eq_in::EQ_NUMBER, 200),
        (CmdStatus::BadIndex, syn::INDEX_RANGE)
    );
    assert_eq!(
        pd_of(&mut d, Opcode::DeallocUar, ifc::dealloc_uar_in::UAR, 100_000),
        (CmdStatus::BadIndex, syn::INDEX_RANGE)
    );

    // A CQ on an EQ that does not exist; too big; 128-byte CQEs; a bad page in its PAS.
    let mut x = d.cq_input(uar, eqn + 1, 5);
    assert_eq!(d.status(&x, 16), (CmdStatus::BadResource, syn::NO_SUCH_OBJECT));
    x = d.cq_input(uar, eqn, 5);
    set_in(&mut x, ifc::create_cq_in::CQ_CONTEXT, ifc::cqc::LOG_CQ_SIZE, 23);
    assert_eq!(d.status(&x, 16), (CmdStatus::BadSize, syn::QUEUE_TOO_BIG));
    x = d.cq_input(uar, eqn, 5);
    set_in(&mut x, ifc::create_cq_in::CQ_CONTEXT, ifc::cqc::CQE_SZ, 1);
    assert_eq!(d.status(&x, 16), (CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
    x = d.cq_input(uar, eqn, 7); // two pages
    let second = ifc::create_cq_in::PAS.index(1);
    let v = second.get(&x);
    second.set(&mut x, v + 0x800);
    assert_eq!(d.status(&x, 16), (CmdStatus::BadParam, syn::BAD_ADDRESS), "unaligned page");
    second.set(&mut x, 0x7000_0000_0000);
    assert_eq!(d.status(&x, 16), (CmdStatus::BadParam, syn::BAD_ADDRESS), "unmapped page");
    x.truncate(x.len() - 8);
    assert_eq!(d.status(&x, 16), (CmdStatus::BadInputLen, syn::PAS_TOO_SHORT));
    x = d.cq_input(uar, eqn, 5);
    set_in(&mut x, ifc::create_cq_in::CQ_CONTEXT, ifc::cqc::DBR_ADDR, 0x10);
    assert_eq!(d.status(&x, 16), (CmdStatus::BadParam, syn::BAD_ADDRESS));

    // An EQ bigger than log_max_eq_sz, on an unknown UAR.
    let (mut e, _) = d.eq_input(uar, 4, &[]);
    let too_big = FwConfig::default().log_max_eq_sz + 1;
    set_in(&mut e, ifc::create_eq_in::EQ_CONTEXT, ifc::eqc::LOG_EQ_SIZE, too_big.into());
    assert_eq!(d.status(&e, 16), (CmdStatus::BadParam, syn::QUEUE_TOO_BIG));
    let (mut e, _) = d.eq_input(uar + 5, 4, &[]);
    assert_eq!(d.status(&e, 16), (CmdStatus::BadResource, syn::NO_SUCH_OBJECT));
    e = d.eq_input(uar, 7, &[]).0;
    e.truncate(e.len() - 8);
    assert_eq!(d.status(&e, 16), (CmdStatus::BadInputLen, syn::PAS_TOO_SHORT));

    // Memory keys: unknown PD, too few MTT entries, a bad page, KLM mode.
    let (mut m, _) = d.mkey_input(pd + 9, 8192, 1);
    assert_eq!(d.status(&m, 16), (CmdStatus::BadResource, syn::NO_SUCH_OBJECT));
    let ctx = ifc::create_mkey_in::MKEY_CONTEXT;
    (m, _) = d.mkey_input(pd, 8192, 1);
    set_in(&mut m, ctx, ifc::mkc::LEN, 3 * 4096);
    assert_eq!(d.status(&m, 16), (CmdStatus::BadParam, syn::PAS_TOO_SHORT));
    (m, _) = d.mkey_input(pd, 8192, 1);
    let mtt = Field::new(ifc::create_mkey_in::KLM_PAS_MTT.bit, 64).index(1);
    let v = mtt.get(&m);
    mtt.set(&mut m, v + 0x800);
    assert_eq!(d.status(&m, 16), (CmdStatus::BadParam, syn::BAD_ADDRESS), "unaligned page");
    mtt.set(&mut m, 0x7000_0000_0000 | 3);
    assert_eq!(d.status(&m, 16), (CmdStatus::BadParam, syn::BAD_ADDRESS), "unmapped page");
    (m, _) = d.mkey_input(pd, 8192, 1);
    set_in(&mut m, ctx, ifc::mkc::ACCESS_MODE_1_0, 2);
    assert_eq!(d.status(&m, 16), (CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
    (m, _) = d.mkey_input(pd, 8192, 1);
    set_in(&mut m, ctx, ifc::mkc::LEN, 0);
    assert_eq!(d.status(&m, 16), (CmdStatus::BadParam, syn::EMPTY_RANGE));
    assert_eq!(d.model.shared().dev().mkeys.len(), 0, "nothing half-created");

    // QPs: XRC is not modelled, unknown CQ, oversized SQ.
    let mut q = d.qp_input(pd, cq, uar, 6);
    set_in(&mut q, ifc::create_qp_in::QPC, ifc::qpc::ST, 3);
    assert_eq!(d.status(&q, 16), (CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
    q = d.qp_input(pd, cq + 1, uar, 6);
    assert_eq!(d.status(&q, 16), (CmdStatus::BadResource, syn::NO_SUCH_OBJECT));
    q = d.qp_input(pd, cq, uar, 6);
    set_in(&mut q, ifc::create_qp_in::QPC, ifc::qpc::LOG_SQ_SIZE, 15);
    set_in(&mut q, ifc::create_qp_in::QPC, ifc::qpc::LOG_RQ_SIZE, 15);
    assert_eq!(d.status(&q, 16), (CmdStatus::BadInputLen, syn::PAS_TOO_SHORT));

    // Busy: a QP holds the CQ, the PD and the UAR; the CQ holds the EQ.
    let qp = d.create_qp(pd, cq, uar);
    assert_eq!(
        pd_of(&mut d, Opcode::DestroyCq, ifc::destroy_cq_in::CQN, cq),
        (CmdStatus::ResourceBusy, syn::OBJECT_IN_USE)
    );
    assert_eq!(
        pd_of(&mut d, Opcode::DeallocPd, ifc::dealloc_pd_in::PD, pd),
        (CmdStatus::ResourceBusy, syn::OBJECT_IN_USE)
    );
    assert_eq!(
        pd_of(&mut d, Opcode::DeallocUar, ifc::dealloc_uar_in::UAR, uar),
        (CmdStatus::ResourceBusy, syn::OBJECT_IN_USE)
    );
    assert_eq!(
        pd_of(&mut d, Opcode::DestroyEq, ifc::destroy_eq_in::EQ_NUMBER, u32::from(eqn)),
        (CmdStatus::ResourceBusy, syn::OBJECT_IN_USE)
    );
    assert!(d.model.shared().dev().cqs.contains_key(&cq));

    // QP transitions out of order, bad port, bad MTU, RoCE while disabled.
    let rtr2rts = d.transition(Opcode::Rtr2RtsQp, qp);
    assert_eq!(d.status(&rtr2rts, 16), (CmdStatus::BadQpState, syn::QP_TRANSITION));
    let init2rtr = d.transition(Opcode::Init2RtrQp, qp);
    assert_eq!(d.status(&init2rtr, 16), (CmdStatus::BadQpState, syn::QP_TRANSITION));
    let ctx = ifc::rst2init_qp_in::QPC;
    let path = ifc::qpc::PRIMARY_ADDRESS_PATH.at(ctx);
    let mut r2i = d.transition(Opcode::Rst2InitQp, qp);
    ifc::ads::VHCA_PORT_NUM.at(path).set(&mut r2i, 2);
    assert_eq!(d.status(&r2i, 16), (CmdStatus::BadParam, syn::BAD_PORT));
    ifc::ads::VHCA_PORT_NUM.at(path).set(&mut r2i, 1);
    d.ok(&r2i, 16);
    assert_eq!(d.status(&r2i, 16), (CmdStatus::BadQpState, syn::QP_TRANSITION));
    let mut i2r = d.transition(Opcode::Init2RtrQp, qp);
    set_in(&mut i2r, ctx, ifc::qpc::MTU, 6);
    assert_eq!(d.status(&i2r, 16), (CmdStatus::BadParam, syn::BAD_MTU));
    set_in(&mut i2r, ctx, ifc::qpc::MTU, 3);
    d.set_roce(false);
    assert_eq!(d.status(&i2r, 16), (CmdStatus::BadParam, syn::ROCE_DISABLED));
    d.set_roce(true);
    // A RoCE path whose source GID index is not in the table: refused by the model's check.
    ifc::ads::SRC_ADDR_INDEX.at(path).set(&mut i2r, 9);
    assert_eq!(d.status(&i2r, 16), (CmdStatus::BadParam, syn::MODEL_REFUSED));
    ifc::ads::SRC_ADDR_INDEX.at(path).set(&mut i2r, 0);
    d.ok(&i2r, 16);
    assert_eq!(d.model.qp_state(qp), Some(crate::objects::QpState::Rtr));
    // 2ERR and 2RST are legal from any state.
    d.ok(&d.transition(Opcode::ToErrQp, qp), 16);
    d.ok(&d.transition(Opcode::ToRstQp, qp), 16);
    d.ok(&d.transition(Opcode::ToRstQp, qp), 16);
}

#[test]
fn object_limits() {
    let mut d = Dev::new(FwConfig { log_max_pd: 1, log_max_eq: 1, ..FwConfig::default() });
    d.up();
    d.alloc_pd();
    d.alloc_pd();
    assert_eq!(
        d.status(&input(Opcode::AllocPd, 0, 16), 16),
        (CmdStatus::ExceedLim, syn::OBJECT_LIMIT)
    );
    let uar = d.alloc_uar();
    d.create_eq(uar, 2, &[]);
    d.create_eq(uar, 2, &[]);
    let (e, _) = d.eq_input(uar, 2, &[]);
    assert_eq!(d.status(&e, 16), (CmdStatus::ExceedLim, syn::OBJECT_LIMIT));
    // SET_HCA_CAP lowered log_max_qp to 8 in `up`; the model runs out of UARs long before.
    let uars = d.model.shared().dev().uar_pages;
    for _ in 2..uars {
        d.alloc_uar();
    }
    assert_eq!(
        d.status(&input(Opcode::AllocUar, 0, 16), 16),
        (CmdStatus::NoResources, syn::MODEL_FULL)
    );
}

#[test]
fn delivery_errors() {
    let mut d = up();
    let sets = |d: &Dev| d.fw.executed().iter().filter(|e| e.opcode == Opcode::SetHcaCap).count();
    let sets_before = sets(&d);
    let big = input(Opcode::QueryHcaCap, 1, 16);
    let out = ifc::query_hca_cap_out::SIZE;
    let cases = [
        (Tweak { kind: Some(5), ..Tweak::default() }, DeliveryStatus::CmdDescrErr),
        (Tweak { inlen: Some(4), ..Tweak::default() }, DeliveryStatus::InLengthErr),
    ];
    for (t, want) in cases {
        assert_eq!(d.run(1, &big, out, t).0, want);
    }
    // Mailbox chains: a wrong token, a wrong block number, a misaligned pointer.
    let long = input(Opcode::SetHcaCap, 0, ifc::set_hca_cap_in::SIZE);
    let cases = [
        (Tweak { bad_token_in_block: Some(3), ..Tweak::default() }, DeliveryStatus::TokenErr),
        (
            Tweak { bad_number_in_block: Some(5), ..Tweak::default() },
            DeliveryStatus::BadBlockNumber,
        ),
        (Tweak { misalign_in_ptr: true, ..Tweak::default() }, DeliveryStatus::InPtrAlignErr),
    ];
    for (t, want) in cases {
        assert_eq!(d.run(2, &long, 16, t).0, want);
    }
    let t = Tweak { misalign_out_ptr: true, ..Tweak::default() };
    assert_eq!(d.run(3, &big, out, t).0, DeliveryStatus::OutPtrAlignErr);
    // An output length the firmware cannot even write a status into.
    let p = d.post(4, &input(Opcode::AllocPd, 0, 16), 4, Tweak::default());
    assert_eq!(
        d.wait(p.slot, WAIT).map(|o| DeliveryStatus::from(o >> 1)),
        Some(DeliveryStatus::OutLengthErr)
    );
    assert_eq!(d.fw.delivery_errors().len(), 7);
    assert!(d.fw.delivery_errors().iter().all(|e| e.status != DeliveryStatus::Ok));
    // None of them executed: no PD exists.
    assert!(d.model.shared().dev().pds.is_empty());
    assert_eq!(sets(&d), sets_before);

    // A doorbell for a slot the driver did not hand over is ignored.
    let p =
        d.post(5, &input(Opcode::AllocPd, 0, 16), 16, Tweak { no_owner: true, ..Tweak::default() });
    std::thread::sleep(Duration::from_millis(50));
    let mut st = [0u8; 1];
    d.q.read_bytes(p.slot as usize * entry::SIZE + entry::STATUS_OWN, &mut st);
    assert_eq!(st[0], 0, "untouched");
    assert_eq!(d.fw.spurious_doorbells(), 1);
    assert!(d.model.shared().dev().pds.is_empty());
}

/// UD and GSI QPs through the commands: `st` UD (0x2) and QP1 (0x8) are accepted, RST2INIT
/// carries the Q_Key, the RC fields of INIT2RTR do not matter, QUERY_QP reports both; a
/// second QP1 is refused; RC `rae` with an extended atomic mode is refused, with
/// IB-compatible mode it grants remote atomics; `mkc.a` grants them on a key.
#[test]
fn datagram_qps_and_atomic_rights() {
    use crate::objects::{QpState, Service};
    let mut d = up();
    let uar = d.alloc_uar();
    let (eqn, _) = d.create_eq(uar, 4, &[EventType::Cmd]);
    let pd = d.alloc_pd();
    let cq = d.create_cq(uar, eqn, 5);
    let ctx = ifc::rst2init_qp_in::QPC;
    let path = ifc::qpc::PRIMARY_ADDRESS_PATH.at(ctx);
    let mut qpns = Vec::new();
    for (st, qkey) in [(QPC_ST_UD, 0x1234_5678u64), (QPC_ST_QP1, 0x8001_0000)] {
        let mut q = d.qp_input(pd, cq, uar, 6);
        set_in(&mut q, ifc::create_qp_in::QPC, ifc::qpc::ST, u64::from(st));
        let qpn = ifc::create_qp_out::QPN.get(&d.ok(&q, 16)) as u32;
        let mut r2i = d.transition(Opcode::Rst2InitQp, qpn);
        ifc::ads::VHCA_PORT_NUM.at(path).set(&mut r2i, 1);
        set_in(&mut r2i, ctx, ifc::qpc::Q_KEY, qkey);
        d.ok(&r2i, 16);
        d.ok(&d.transition(Opcode::Init2RtrQp, qpn), 16);
        let mut r2s = d.transition(Opcode::Rtr2RtsQp, qpn);
        set_in(&mut r2s, ctx, ifc::qpc::NEXT_SEND_PSN, 5);
        d.ok(&r2s, 16);
        assert_eq!(d.model.qp_state(qpn), Some(QpState::Rts));
        let mut query = input(Opcode::QueryQp, 0, 16);
        ifc::query_qp_in::QPN.set(&mut query, u64::from(qpn));
        let out = d.ok(&query, ifc::query_qp_out::SIZE);
        let qctx = ifc::query_qp_out::QPC;
        assert_eq!(ifc::qpc::ST.at(qctx).get(&out), u64::from(st));
        assert_eq!(ifc::qpc::Q_KEY.at(qctx).get(&out), qkey);
        qpns.push(qpn);
    }
    let dev = d.model.shared().dev();
    assert_eq!(dev.qps[&qpns[0]].spec.service, Service::Ud);
    assert_eq!(dev.qps[&qpns[1]].spec.service, Service::Gsi);
    assert_eq!(dev.qps[&qpns[1]].qkey, 0x8001_0000);
    drop(dev);
    let mut q = d.qp_input(pd, cq, uar, 6);
    set_in(&mut q, ifc::create_qp_in::QPC, ifc::qpc::ST, u64::from(QPC_ST_QP1));
    assert_eq!(d.status(&q, 16).0, CmdStatus::BadParam, "one QP1 per port");

    let rc = d.create_qp(pd, cq, uar);
    let mut r2i = d.transition(Opcode::Rst2InitQp, rc);
    ifc::ads::VHCA_PORT_NUM.at(path).set(&mut r2i, 1);
    set_in(&mut r2i, ctx, ifc::qpc::RAE, 1);
    set_in(&mut r2i, ctx, ifc::qpc::ATOMIC_MODE, 4); // MLX5_ATOMIC_MODE_16B
    assert_eq!(d.status(&r2i, 16), (CmdStatus::BadParam, syn::MODEL_REFUSED));
    set_in(&mut r2i, ctx, ifc::qpc::ATOMIC_MODE, 1); // MLX5_ATOMIC_MODE_IB_COMP
    d.ok(&r2i, 16);
    assert!(d.model.shared().dev().qps[&rc].rights.remote_atomic);

    let (mut m, _) = d.mkey_input(pd, 8192, 1);
    set_in(&mut m, ifc::create_mkey_in::MKEY_CONTEXT, ifc::mkc::A, 1);
    let out = d.ok(&m, 16);
    let index = ifc::create_mkey_out::MKEY_INDEX.get(&out) as u32;
    let dev = d.model.shared().dev();
    let key = dev.mkeys.iter().find(|(k, _)| *k >> 8 == index).map(|(_, m)| m.clone()).unwrap();
    assert!(key.rights.remote_atomic);
}

/// A QP's `page_offset` is taken (see the data-path test that runs a QP from one), but the
/// model reads each entry from one page: a start that would split a 128-byte receive WQE
/// across two 4 KiB pages (one quantum, 64 bytes, in) is `BAD_PARAM` `QUEUE_START`, and a
/// start that pushes the queue past its listed pages is `BAD_INPUT_LEN`. A CQ starts on its
/// page (PRM, as 6.12 `mlx5_ib.h` quotes it for `mlx5_umem_find_best_cq_quantized_pgoff`).
#[test]
fn queue_starts_inside_a_page() {
    use ifc::qpc;
    let mut d = Dev::new(FwConfig::default());
    d.up();
    let uar = d.alloc_uar();
    let (eqn, _) = d.create_eq(uar, 4, &[EventType::Cmd]);
    let pd = d.alloc_pd();
    let cq = d.create_cq(uar, eqn, 4);
    let qp = |d: &mut Dev, stride_log: u64, offset: u64| {
        let mut q = d.qp_input(pd, cq, uar, 6);
        set_in(&mut q, ifc::create_qp_in::QPC, qpc::LOG_RQ_STRIDE, stride_log - 4);
        set_in(&mut q, ifc::create_qp_in::QPC, qpc::PAGE_OFFSET, offset);
        d.status(&q, 16)
    };
    assert_eq!(qp(&mut d, 7, 1), (CmdStatus::BadParam, syn::QUEUE_START));
    assert_eq!(qp(&mut d, 7, 2).0, CmdStatus::Ok, "128 bytes in: whole receive WQEs");
    // 16 × 32-byte receive WQEs and 64 WQEBBs need 4608 bytes: two 4 KiB pages from the start,
    // three once the queue begins 3968 bytes (62 quanta) in; the input lists two.
    assert_eq!(qp(&mut d, 5, 62), (CmdStatus::BadInputLen, syn::PAS_TOO_SHORT));
    let mut c = d.cq_input(uar, eqn, 4);
    set_in(&mut c, ifc::create_cq_in::CQ_CONTEXT, ifc::cqc::PAGE_OFFSET, 16);
    assert_eq!(d.status(&c, 16), (CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT));
}

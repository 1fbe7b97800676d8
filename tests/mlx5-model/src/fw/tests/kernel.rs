//! What the Linux kernel's `mlx5_core` and `mlx5_ib` (6.12) ask of the firmware, one behaviour
//! per test, each naming the kernel function or PRM rule it follows.

use super::*;
use crate::fw::codes::syndrome as syn;
use crate::fw::CommandRecord;

/// Kernel 6.12 `mlx5_query_board_id` and `mlx5_core_query_vendor_id` (`fw.c`): both read
/// `QUERY_ADAPTER`'s parameter block (the PSID from `vsd_contd_psid`, the vendor from
/// `ieee_vendor_id`) right after `INIT_HCA`.
#[test]
fn query_adapter_answers_the_vendor_and_a_psid() {
    let mut d = up();
    let out = d.ok(&input(Opcode::QueryAdapter, 0, 16), ifc::query_adapter_out::SIZE);
    use ifc::query_adapter_out as o;
    assert_eq!(o::IEEE_VENDOR_ID.get(&out), 0x0002c9, "Mellanox's OUI");
    assert_eq!(o::VSD_VENDOR_ID.get(&out), 0x15b3, "Mellanox's PCI vendor id");
    let psid = o::VSD_CONTD_PSID.slice(&out);
    let text: Vec<u8> = psid.iter().copied().take_while(|b| *b != 0).collect();
    assert!(text.starts_with(b"MT_") && text.len() <= 16, "{text:?}");
    assert!(psid[text.len()..].iter().all(|b| *b == 0), "NUL padded");
    let vsd = o::VSD.slice(&out);
    assert!(vsd.iter().all(|b| b.is_ascii_graphic() || *b == b' ' || *b == 0));
    // A short output buffer (the kernel sizes it from the header) is refused as such.
    let (st, _) = d.status(&input(Opcode::QueryAdapter, 0, 16), 16);
    assert_eq!(st, CmdStatus::BadOutputLen);
}

/// Before `ENABLE_HCA` the function answers nothing but `ENABLE_HCA` (kernel `main.c`
/// issues `QUERY_ADAPTER` only after `INIT_HCA`).
#[test]
fn query_adapter_needs_an_enabled_function() {
    let mut d = Dev::new(FwConfig::default());
    let (st, _) = d.status(&input(Opcode::QueryAdapter, 0, 16), ifc::query_adapter_out::SIZE);
    assert_eq!(st, CmdStatus::BadSysState);
}

/// `Model::command_log` counts what ran by opcode, op_mod and status; `Model::fw_pages`
/// counts the pages given and reclaimed through `MANAGE_PAGES`.
#[test]
fn command_log_and_page_counts_follow_the_commands() {
    let mut d = Dev::new(FwConfig::default());
    assert!(d.model.command_log().is_empty());
    assert_eq!(d.model.fw_pages(), (0, 0));
    d.up();
    let log = d.model.command_log();
    let find = |log: &[CommandRecord], op: Opcode, op_mod: u16, st: CmdStatus| {
        log.iter()
            .find(|r| r.opcode == op && r.op_mod == op_mod && r.status == st)
            .map_or(0, |r| r.count)
    };
    assert_eq!(find(&log, Opcode::EnableHca, 0, CmdStatus::Ok), 1);
    assert_eq!(find(&log, Opcode::QueryPages, u16::from(PagesStage::Boot), CmdStatus::Ok), 1);
    assert_eq!(find(&log, Opcode::InitHca, 0, CmdStatus::Ok), 1);
    let given = (d.fw.pages().total_given, 0);
    assert!(given.0 >= 20, "boot + init pages: {given:?}");
    assert_eq!(d.model.fw_pages(), given);
    // A refused command is counted under its status.
    d.status(&input(Opcode::InitHca, 0, 16), 16);
    d.status(&input(Opcode::InitHca, 0, 16), 16);
    let log = d.model.command_log();
    assert_eq!(find(&log, Opcode::InitHca, 0, CmdStatus::BadSysState), 2);
    assert_eq!(find(&log, Opcode::InitHca, 0, CmdStatus::Ok), 1);
    let total: u64 = log.iter().map(|r| r.count).sum();
    assert_eq!(total as usize, d.fw.executed().len());
    // Teardown, then every page back.
    d.set_roce(false);
    d.ok(&input(Opcode::TeardownHca, 0, 16), 16);
    let back = d.take(64);
    assert_eq!(d.model.fw_pages(), (given.0, back.len() as u64));
    assert_eq!(back.len() as u64, given.0, "every page comes back after TEARDOWN_HCA");
}

/// The kernel's async EQ is `MLX5_NUM_ASYNC_EQE` (4096) + `MLX5_NUM_SPARE_EQE` (128) entries,
/// rounded up to 8192 (kernel 6.12 `eq.c` `create_async_eqs`, `create_map_eq`), in a fragmented
/// buffer: one PAS entry per 4 KiB page, wherever each page lies (`mlx5_frag_buf_alloc_node`,
/// `mlx5_fill_page_frag_array`). The capabilities say so (a ConnectX-5 reports
/// `log_max_eq_sz` 22, `log_max_eq` 7) and the firmware takes it, writing each EQE into the
/// page the PAS names for it.
#[test]
fn eq_sizes_of_a_real_part_take_the_kernels_async_eq() {
    let mut d = up();
    let caps = d.query_caps(CapType::General, true);
    assert_eq!(ifc::cmd_hca_cap::LOG_MAX_EQ_SZ.get(&caps), 22);
    assert_eq!(ifc::cmd_hca_cap::LOG_MAX_EQ.get(&caps), 7);
    let uar = d.alloc_uar();
    use ifc::create_eq_in as i;
    let log_size = 13u8;
    let n_pages = (64usize << log_size) / 4096;
    // Pages allocated one by one and listed in reverse: nothing is contiguous.
    let mut pages: Vec<u64> = (0..n_pages).map(|_| d.alloc(4096, 4096)).collect();
    pages.reverse();
    for p in &pages {
        assert!(d.dma.write(BusAddr(*p), &[1u8; 4096]), "owner bits start at 1");
    }
    let mut inp = input(Opcode::CreateEq, 0, i::SIZE + 8 * n_pages);
    set_in(&mut inp, i::EQ_CONTEXT, ifc::eqc::LOG_EQ_SIZE, u64::from(log_size));
    set_in(&mut inp, i::EQ_CONTEXT, ifc::eqc::UAR_PAGE, u64::from(uar));
    let bit = u32::from(u8::from(EventType::PageRequest));
    Field::new(i::EVENT_BITMASK.bit + 64 * (bit / 64), 64).set(&mut inp, 1 << (bit % 64));
    for (k, p) in pages.iter().enumerate() {
        i::PAS.index(k as u32).set(&mut inp, *p);
    }
    d.ok(&inp, 16);
    // 65 events: the 65th is EQE 64, the first of the PAS's second page.
    for _ in 0..65 {
        d.fw.request_pages(1).expect("page request posted");
    }
    let read = |d: &Dev, at: u64| {
        let mut e = [0u8; 64];
        assert!(d.dma.read(BusAddr(at), &mut e));
        e
    };
    for (at, what) in [(pages[0], "EQE 0"), (pages[0] + 63 * 64, "EQE 63"), (pages[1], "EQE 64")] {
        let e = read(&d, at);
        assert_eq!(ifc::eqe::EVENT_TYPE.get(&e), u64::from(u8::from(EventType::PageRequest)));
        assert_eq!(ifc::eqe::OWNER.get(&e), 0, "{what}: first pass");
    }
    assert_eq!(read(&d, pages[1] + 64)[63], 1, "EQE 65 not written");
}

/// An MSI-X sink that records the vectors raised.
#[derive(Debug, Default)]
pub(super) struct Vectors(std::sync::Mutex<Vec<u16>>);

impl crate::Interrupts for Vectors {
    fn raise(&self, vector: u16) {
        self.0.lock().unwrap().push(vector);
    }
}

impl Vectors {
    pub(super) fn seen(&self) -> Vec<u16> {
        self.0.lock().unwrap().clone()
    }

    /// The vectors once at least `n` were raised (the firmware raises after writing the EQE).
    pub(super) fn wait(&self, n: usize) -> Vec<u16> {
        let end = Instant::now() + WAIT;
        while self.seen().len() < n {
            assert!(Instant::now() < end, "{n} interrupts expected, got {:?}", self.seen());
            std::thread::sleep(Duration::from_micros(50));
        }
        self.seen()
    }
}

/// A device brought up to `INIT_HCA` whose MSI-X vectors land in the returned sink.
fn up_with_vectors() -> (Dev, Arc<Vectors>) {
    let sink = Arc::new(Vectors::default());
    let cfg = crate::ModelConfig { interrupts: Some(sink.clone()), ..Default::default() };
    let model = Model::with_config(cfg).expect("model");
    let mut d = Dev::on(model, FwConfig::default());
    d.up();
    (d, sink)
}

/// Wait until EQE `n` of the ring at `buf` carries the owner bit of its first pass.
pub(super) fn wait_eqe(d: &Dev, buf: u64, log_size: u8, n: u32) -> [u8; 64] {
    let end = Instant::now() + WAIT;
    loop {
        let e = d.eqe(buf, log_size, n);
        if ifc::eqe::OWNER.get(&e) == u64::from(n >> log_size & 1) {
            return e;
        }
        assert!(Instant::now() < end, "no EQE {n}");
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Store the EQ doorbell of `uar`: consumer index `ci`, armed or not (kernel `eq.c`
/// `eq_update_ci`: `eqn << 24 | ci` at 0x40 to arm, 0x48 to update only).
pub(super) fn eq_doorbell(d: &Dev, uar: u32, eqn: u8, ci: u32, arm: bool) {
    let off = uar as usize * crate::UAR_PAGE
        + if arm { crate::fw::eq::DOORBELL_ARM } else { crate::fw::eq::DOORBELL_UPDATE };
    d.bar.write_be32(off, u32::from(eqn) << 24 | ci);
}

/// Kernel 6.12 `eq.c` `create_async_eqs`: the command EQ is created by a command issued in
/// polling mode, then `mlx5_cmd_use_events` switches; `cmd.c` completes a command by EQE only
/// if it was issued in event mode (an EQE for a polled command is "completion arrived after
/// timeout"). So the firmware posts a command completion EQE only for commands issued while a
/// command EQ existed, and raises the EQ's vector (`eqc.intr`) when the EQ is armed; an armed
/// EQ fires once, and arming it over unconsumed EQEs fires it at once (PRM EQ arming; the
/// kernel re-arms with `eq_update_ci(eq, 1)` after each interrupt). Page requests likewise.
#[test]
fn command_events_only_for_commands_issued_with_a_command_eq_and_each_interrupts() {
    let (mut d, sink) = up_with_vectors();
    let uar = d.alloc_uar();
    let (mut inp, buf) = d.eq_input(uar, 4, &[EventType::Cmd, EventType::PageRequest]);
    set_in(&mut inp, ifc::create_eq_in::EQ_CONTEXT, ifc::eqc::INTR, 3);
    let out = d.ok(&inp, 16);
    let eqn = ifc::create_eq_out::EQ_NUMBER.get(&out) as u8;
    // The kernel arms a new EQ at once (`create_map_eq`).
    eq_doorbell(&d, uar, eqn, 0, true);
    // A command in slot 5: its event is EQE 0, so CREATE_EQ (slot 0) got none.
    let p = d.post(5, &input(Opcode::Nop, 0, 16), 16, Tweak::default());
    d.wait(p.slot, WAIT).expect("NOP completes");
    let e = wait_eqe(&d, buf, 4, 0);
    assert_eq!(ifc::eqe::EVENT_TYPE.get(&e), u64::from(u8::from(EventType::Cmd)));
    let vector = ifc::cmd_inter_comp_event::COMMAND_COMPLETION_VECTOR;
    assert_eq!(vector.get(ifc::eqe::EVENT_DATA.slice(&e)), 1 << 5, "the NOP's, not CREATE_EQ's");
    assert_eq!(sink.wait(1), vec![3], "the EQ's vector, once");
    // Not re-armed: the next command's EQE is written, no interrupt.
    d.simple(Opcode::Nop, 0);
    wait_eqe(&d, buf, 4, 1);
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(sink.seen(), vec![3]);
    // Arming with EQE 1 still unconsumed fires at once.
    eq_doorbell(&d, uar, eqn, 1, true);
    assert_eq!(sink.seen(), vec![3, 3]);
    // Consumed and armed: quiet until the next event, here a page request.
    eq_doorbell(&d, uar, eqn, 2, true);
    assert_eq!(sink.seen(), vec![3, 3]);
    d.fw.request_pages(1).expect("page request");
    let e = wait_eqe(&d, buf, 4, 2);
    assert_eq!(ifc::eqe::EVENT_TYPE.get(&e), u64::from(u8::from(EventType::PageRequest)));
    assert_eq!(sink.seen(), vec![3, 3, 3]);
    // Exactly two command events were written: EQE 3 is untouched.
    assert_eq!(d.eqe(buf, 4, 3)[63], 1);
}

/// Kernel 6.12 `mlx5_ib` `main.c` `mlx5_ib_dev_res_init`: with the `xrc` capability it
/// allocates two XRC domains (`mlx5_cmd_xrcd_alloc`, `ALLOC_XRCD`) and frees them at unload
/// (`DEALLOC_XRCD`); a live domain is an object like any other.
#[test]
fn xrc_domains_are_allocated_and_freed() {
    let mut d = up();
    let caps = d.query_caps(CapType::General, true);
    assert_eq!(ifc::cmd_hca_cap::XRC.get(&caps), 1);
    assert!(ifc::cmd_hca_cap::LOG_MAX_XRCD.get(&caps) >= 1);
    let before = d.fw.live_objects();
    let x0 = ifc::alloc_xrcd_out::XRCD.get(&d.simple(Opcode::AllocXrcd, 0)) as u32;
    let x1 = ifc::alloc_xrcd_out::XRCD.get(&d.simple(Opcode::AllocXrcd, 0)) as u32;
    assert_ne!(x0, x1);
    assert_eq!(d.fw.live_objects(), before + 2);
    let dealloc = |x: u32| {
        let mut inp = input(Opcode::DeallocXrcd, 0, 16);
        ifc::dealloc_xrcd_in::XRCD.set(&mut inp, u64::from(x));
        inp
    };
    d.ok(&dealloc(x0), 16);
    assert_eq!(d.status(&dealloc(x0), 16), (CmdStatus::BadResource, syn::NO_SUCH_OBJECT));
    d.ok(&dealloc(x1), 16);
    assert_eq!(d.fw.live_objects(), before);
}

/// Kernel 6.12 `core/vport.c` `mlx5_query_hca_vport_pkey` (called by `mlx5_ib`'s query_pkey
/// on RoCE ports too): index 0xffff asks for the whole table of `128 << pkey_table_size`
/// entries, any other index for one; index 0 holds the default P_Key 0xffff.
#[test]
fn the_pkey_table_holds_the_default_pkey() {
    let mut d = up();
    use ifc::query_hca_vport_pkey_in as i;
    let query = |index: u16| {
        let mut inp = input(Opcode::QueryHcaVportPkey, 0, i::SIZE);
        i::PKEY_INDEX.set(&mut inp, u64::from(index));
        inp
    };
    let entry = |out: &[u8], k: usize| {
        let at = ifc::query_hca_vport_pkey_out::SIZE + 4 * k;
        ifc::pkey::PKEY.get(&out[at..at + 4])
    };
    assert_eq!(entry(&d.ok(&query(0), 20), 0), 0xffff);
    assert_eq!(entry(&d.ok(&query(5), 20), 0), 0);
    let all = d.ok(&query(0xffff), 16 + 4 * 128);
    assert_eq!(entry(&all, 0), 0xffff);
    assert!((1..128).all(|k| entry(&all, k) == 0));
    assert_eq!(d.status(&query(128), 20), (CmdStatus::BadIndex, syn::INDEX_RANGE));
    assert_eq!(d.status(&query(0xffff), 20).0, CmdStatus::BadOutputLen, "room for 128");
    let mut other = query(0);
    i::OTHER_VPORT.set(&mut other, 1);
    i::VPORT_NUMBER.set(&mut other, 1);
    assert_eq!(d.status(&other, 20).0, CmdStatus::BadParam);
}

/// An `ACCESS_REG` read of `reg` with `data` as the register image sent; the register bytes.
fn read_reg(d: &mut Dev, reg: u16, data: &[u8]) -> Result<Vec<u8>, (CmdStatus, u32)> {
    let mut inp = input(Opcode::AccessReg, 1, 16 + data.len());
    ifc::access_register_in::REGISTER_ID.set(&mut inp, u64::from(reg));
    inp[16..].copy_from_slice(data);
    let (st, out) = d.run(0, &inp, 16 + data.len(), Tweak::default());
    assert_eq!(st, DeliveryStatus::Ok);
    match CmdStatus::from(ifc::cmd_out::STATUS.get(&out) as u8) {
        CmdStatus::Ok => Ok(out[16..].to_vec()),
        s => Err((s, ifc::cmd_out::SYNDROME.get(&out) as u32)),
    }
}

/// Kernel 6.12 `mlx5_ib` `main.c` `mlx5_query_node_desc`: `ACCESS_REG` NODE_DESC (0x6001), a
/// 64-byte string (`IB_DEVICE_NODE_DESC_MAX`).
#[test]
fn node_desc_is_a_string() {
    let mut d = up();
    let desc = read_reg(&mut d, REG_NODE_DESC, &[0; 64]).expect("NODE_DESC reads");
    assert_eq!(desc.len(), 64);
    let text: Vec<u8> = desc.iter().copied().take_while(|b| *b != 0).collect();
    assert!(!text.is_empty() && text.iter().all(|b| b.is_ascii_graphic() || *b == b' '));
    assert!(desc[text.len()..].iter().all(|b| *b == 0));
}

/// Kernel 6.12 `core/port.c` `mlx5_query_port_ptys` / `mlx5_port_query_eth_proto` (read by
/// `mlx5_ib`'s `mlx5_query_port_roce` to report speed and width): PTYS (0x5004) for local
/// port 1, Ethernet protocol (`MLX5_PTYS_EN`), legacy link modes (`port.h` `enum
/// mlx5e_link_mode`): a 100 Gb/s port's capability, operating at 100GBASE-CR4.
#[test]
fn ptys_reports_a_100g_ethernet_port() {
    let mut d = up();
    use ifc::ptys_reg as p;
    let mut q = [0u8; p::SIZE];
    p::LOCAL_PORT.set(&mut q, 1);
    p::PROTO_MASK.set(&mut q, u64::from(PTYS_EN));
    let r = read_reg(&mut d, REG_PTYS, &q).expect("PTYS reads");
    assert_eq!(p::LOCAL_PORT.get(&r), 1);
    let cap = p::ETH_PROTO_CAPABILITY.get(&r);
    for mode in [20, 21, 22, 23, 27, 28, 29, 6, 7, 4] {
        assert_eq!(cap >> mode & 1, 1, "link mode {mode}");
    }
    assert_eq!(p::ETH_PROTO_OPER.get(&r), 1 << 20, "MLX5E_100GBASE_CR4");
    assert_eq!(p::ETH_PROTO_ADMIN.get(&r), cap);
    assert_eq!(p::EXT_ETH_PROTO_CAPABILITY.get(&r), 0, "no extended modes without PCAM");
    // Another port, or the InfiniBand protocol, is refused.
    let mut bad = q;
    p::LOCAL_PORT.set(&mut bad, 2);
    assert_eq!(read_reg(&mut d, REG_PTYS, &bad).unwrap_err().0, CmdStatus::BadParam);
    let mut ib = q;
    p::PROTO_MASK.set(&mut ib, 1);
    assert_eq!(read_reg(&mut d, REG_PTYS, &ib).unwrap_err().0, CmdStatus::BadParam);
}

/// `MAD_IFC` (0x50d) has no agent behind it on an Ethernet port: refused (kernel 6.12
/// `mlx5_ib` only logs the failure on RoCE ports).
#[test]
fn mad_ifc_is_refused_on_ethernet() {
    let mut d = up();
    let inp = input(Opcode::MadIfc, 0, 16 + 8 + 256);
    assert_eq!(d.status(&inp, 16 + 256), (CmdStatus::BadOp, syn::NOT_ON_ETHERNET));
}

/// A link transition reaches the kernel as a port change EQE (type 0x09, sub-type 1 down or 4
/// active, `port_num` 1) on its async EQ, with the EQ's vector (kernel 6.12 `events.c`
/// `port_change`; `device.h` `MLX5_PORT_CHANGE_SUBTYPE_*`).
#[test]
fn port_changes_post_port_change_events() {
    let (mut d, sink) = up_with_vectors();
    assert_eq!(d.fw.port_change(true), Err(crate::fw::FwError::NoEventQueue));
    let uar = d.alloc_uar();
    let (mut inp, buf) = d.eq_input(uar, 4, &[EventType::PortChange]);
    set_in(&mut inp, ifc::create_eq_in::EQ_CONTEXT, ifc::eqc::INTR, 2);
    let eqn = ifc::create_eq_out::EQ_NUMBER.get(&d.ok(&inp, 16)) as u8;
    eq_doorbell(&d, uar, eqn, 0, true);
    d.fw.port_change(false).expect("posted");
    d.fw.port_change(true).expect("posted");
    for (n, sub) in [(0, PORT_CHANGE_DOWN), (1, PORT_CHANGE_ACTIVE)] {
        let e = wait_eqe(&d, buf, 4, n);
        assert_eq!(ifc::eqe::EVENT_TYPE.get(&e), u64::from(u8::from(EventType::PortChange)));
        assert_eq!(ifc::eqe::EVENT_SUB_TYPE.get(&e), u64::from(sub));
        let data = ifc::eqe::EVENT_DATA.slice(&e);
        assert_eq!(ifc::port_state_change_event::PORT_NUM.get(data), 1);
        assert_eq!(e[ifc::eqe::EVENT_DATA.byte() + 8] >> 4, 1, "the kernel's `port >> 4`");
    }
    assert_eq!(sink.seen(), vec![2], "one interrupt: the EQ was not re-armed");
}

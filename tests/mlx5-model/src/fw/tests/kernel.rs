//! What the Linux kernel's `mlx5_core` and `mlx5_ib` (6.12) ask of the firmware, one behaviour
//! per test, each naming the kernel function or PRM rule it follows.

use super::*;
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
struct Vectors(std::sync::Mutex<Vec<u16>>);

impl crate::Interrupts for Vectors {
    fn raise(&self, vector: u16) {
        self.0.lock().unwrap().push(vector);
    }
}

impl Vectors {
    fn seen(&self) -> Vec<u16> {
        self.0.lock().unwrap().clone()
    }

    /// The vectors once at least `n` were raised (the firmware raises after writing the EQE).
    fn wait(&self, n: usize) -> Vec<u16> {
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
fn wait_eqe(d: &Dev, buf: u64, log_size: u8, n: u32) -> [u8; 64] {
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
fn eq_doorbell(d: &Dev, uar: u32, eqn: u8, ci: u32, arm: bool) {
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

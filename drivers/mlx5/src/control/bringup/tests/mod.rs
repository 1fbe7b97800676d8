use core::cell::Cell;
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use rdma_pmd::{DeviceFault, Errno, Error, FirmwareFault};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::{Clock, Mmio};

use super::*;
use crate::control::cmd::CmdStatus;
use crate::control::init_seg::{FwVersion, HealthSyndrome};
use crate::control::DeviceCaps;
use crate::testing::fw::{default_state, page_request, script, FakeFw, State};

mod hostile;

/// 1 µs per reading.
struct Ticks(Cell<u64>);
impl Clock for Ticks {
    fn now_ns(&self) -> u64 {
        let t = self.0.get() + 1_000;
        self.0.set(t);
        t
    }
}

fn cfg() -> HcaConfig {
    HcaConfig {
        cmd: CmdConfig { in_blocks: 16, out_blocks: 16, timeout_ns: 2_000_000 },
        fw_init_timeout_ns: 1_000_000,
        reclaim_timeout_ns: 1_000_000,
        ..HcaConfig::default()
    }
}

struct Rig {
    st: Arc<Mutex<State>>,
    fw: Arc<FakeFw>,
    bar: MemBar,
    dma: Arc<HeapDma>,
    clock: Ticks,
    bitmap: Vec<u64>,
}

fn rig(st: Arc<Mutex<State>>) -> Rig {
    let (fw, bar, dma) = script(st.clone());
    Rig { st, fw, bar, dma, clock: Ticks(Cell::new(0)), bitmap: vec![0; bitmap_words(1024)] }
}

const BRING_UP: &[u16] = &[
    0x104, // ENABLE_HCA
    0x10a, // QUERY_ISSI
    0x10b, // SET_ISSI
    0x107, // QUERY_PAGES boot
    0x108, // MANAGE_PAGES
    0x805, // ACCESS_REG
    0x100, 0x100, // QUERY_HCA_CAP general max, cur
    0x109, // SET_HCA_CAP general
    0x100, // QUERY_HCA_CAP general cur
    0x100, 0x100, // QUERY_HCA_CAP roce max, cur
    0x109, // SET_HCA_CAP roce
    0x107, // QUERY_PAGES init
    0x108, 0x108, 0x108, // MANAGE_PAGES 128 + 128 + 44
    0x102, // INIT_HCA
    0x802, // ALLOC_UAR
    0x301, 0x301, // CREATE_EQ async, completion
    0x755, // MODIFY_NIC_VPORT_CONTEXT roce_en
];

const TEARDOWN: &[u16] = &[
    0x755, // MODIFY_NIC_VPORT_CONTEXT roce off
    0x302, 0x302, // DESTROY_EQ
    0x803, // DEALLOC_UAR
    0x103, // TEARDOWN_HCA
    0x108, 0x108, 0x108, // MANAGE_PAGES take: 128 + 128 + 84
    0x105, // DISABLE_HCA
];

#[test]
fn bring_up_follows_the_kernel_sequence_and_reports_what_it_learned() {
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    assert_eq!(r.fw.opcodes(), BRING_UP);
    let rep = *hca.report();
    assert_eq!(rep.fw, FwVersion { major: 16, minor: 28, subminor: 1002 });
    assert_eq!((rep.cmdif_rev, rep.issi), (5, 1));
    assert_eq!((rep.boot_pages, rep.init_pages, rep.pages_lent), (40, 300, 340));
    assert_eq!(r.st.lock().unwrap().held.len(), 340);
    assert!(rep.set_general_caps && rep.set_roce_caps && rep.roce_enabled);
    assert_eq!(rep.caps.port_type, PortType::Ethernet);
    assert!(rep.caps.roce_sw_udp_sport);
    assert_eq!(
        rep.caps.device_caps(),
        DeviceCaps {
            log_max_qp_sz: 15,
            log_max_cq_sz: 22,
            max_wqe_sz_sq: 1024,
            log_bf_reg_size: 9
        }
    );
    assert_eq!((rep.eq_uar, rep.async_eqn, rep.comp_eqn), (1, 5, 6));
    let text = format!("{rep}");
    assert!(text.contains("firmware 16.28.1002") && text.contains("340 lent of 1024"), "{text}");

    // Field-level checks of what was sent.
    let log = r.fw.log.lock().unwrap().clone();
    assert_eq!(log[3].op_mod, consts::QUERY_PAGES_IN_OP_MOD_BOOT_PAGES);
    assert_eq!(log[13].op_mod, consts::QUERY_PAGES_IN_OP_MOD_INIT_PAGES);
    assert_eq!(ifc::get(&log[2].input, set_issi_in::CURRENT_ISSI), 1);
    let reg = &log[5];
    assert_eq!(reg.op_mod, 0, "ACCESS_REG write");
    assert_eq!(ifc::get(&reg.input, access_register_in::REGISTER_ID), 0x7004);
    assert_eq!((log[6].op_mod, log[7].op_mod), (0, 1), "general max, then current");
    let set = &log[8];
    assert_eq!(set.op_mod, 0);
    assert_eq!(set.input.len(), set_hca_cap_in::SIZE);
    let cap = &set.input[set_hca_cap_in::CAPABILITY.byte()..];
    assert_eq!(ifc::get(cap, cmd_hca_cap::CMDIF_CHECKSUM), 0, "checksums off");
    assert_eq!(ifc::get(cap, cmd_hca_cap::LOG_UAR_PAGE_SZ), 0);
    assert_eq!(ifc::get(cap, cmd_hca_cap::LOG_MAX_QP_SZ), 15, "current values carried over");
    assert_eq!(ifc::get(cap, cmd_hca_cap::LOG_MAX_QP), 18, "min(18, max): the default profile");
    assert_eq!((log[10].op_mod, log[11].op_mod, log[12].op_mod), (8, 9, 8));
    let rcap = &log[12].input[set_hca_cap_in::CAPABILITY.byte()..];
    assert_eq!(ifc::get(rcap, roce_cap::SW_R_ROCE_SRC_UDP_PORT), 1);
    let give = &log[14];
    assert_eq!(give.op_mod, consts::MANAGE_PAGES_IN_OP_MOD_ALLOCATION_SUCCESS);
    assert_eq!(ifc::get(&give.input, manage_pages_in::INPUT_NUM_ENTRIES), 128);
    assert_eq!(give.input.len(), manage_pages_in::SIZE + 128 * 8);
    let eqs = r.st.lock().unwrap().eqs.clone();
    // MLX5_ASYNC_EVENT_MASK of the kernel's eq.c (path migration 0x01, communication
    // established 0x02, SQ drained 0x03, CQ error 0x04, WQ catastrophic 0x05, path migration
    // failed 0x07, port change 0x09, WQ invalid request 0x10, WQ access 0x11, SRQ catastrophic
    // 0x12, SRQ last WQE 0x13, SRQ limit 0x14), with command 0x0a and page request 0x0b.
    assert_eq!(eqs[0].2, 0x1f_0ebe, "the kernel's async set, commands and pages");
    assert_eq!(eqs[1].2, 0);
    let eq0 = &log[19].input;
    let ctx = create_eq_in::EQ_CONTEXT_ENTRY;
    assert_eq!(ifc::get(eq0, eqc::LOG_EQ_SIZE.within(ctx)), 7);
    assert_eq!(ifc::get(eq0, eqc::UAR_PAGE.within(ctx)), 1);
    let roce = &log[21].input;
    let sel = modify_nic_vport_context_in::FIELD_SELECT;
    let nvc = modify_nic_vport_context_in::NIC_VPORT_CONTEXT;
    assert_eq!(ifc::get(roce, modify_nic_vport_field_select::ROCE_EN.within(sel)), 1);
    assert_eq!(ifc::get(roce, nic_vport_context::ROCE_EN.within(nvc)), 1);
    assert!(r.fw.faults.lock().unwrap().is_empty(), "{:?}", r.fw.faults.lock().unwrap());

    r.fw.log.lock().unwrap().clear();
    let t = hca.teardown().unwrap();
    assert_eq!(r.fw.opcodes(), TEARDOWN);
    let log = r.fw.log.lock().unwrap().clone();
    assert_eq!(ifc::get(&log[0].input, nic_vport_context::ROCE_EN.within(nvc)), 0, "RoCE off");
    assert_eq!(ifc::get(&log[0].input, modify_nic_vport_field_select::ROCE_EN.within(sel)), 1);
    assert_eq!(ifc::get(&log[1].input, destroy_eq_in::EQ_NUMBER), 6, "completion EQ first");
    assert_eq!(ifc::get(&log[2].input, destroy_eq_in::EQ_NUMBER), 5);
    assert_eq!(ifc::get(&log[3].input, dealloc_uar_in::UAR), 1);
    assert_eq!(ifc::get(&log[4].input, teardown_hca_in::PROFILE), 0, "graceful close");
    assert_eq!(log[5].op_mod, consts::MANAGE_PAGES_IN_OP_MOD_HCA_RETURN_PAGES);
    assert_eq!(ifc::get(&log[5].input, manage_pages_in::INPUT_NUM_ENTRIES), 128);
    assert_eq!(log[5].outlen, manage_pages_out::SIZE + 128 * 8);
    assert_eq!(ifc::get(&log[8].input, disable_hca_in::FUNCTION_ID), 0);
    assert_eq!(t, TeardownReport { pages_reclaimed: 340, pages_outstanding: 0 });
    assert!(r.st.lock().unwrap().held.is_empty());
    assert_eq!(r.dma.live_blocks(), 0, "queue, EQs and page pool given back");
}

#[test]
fn a_virtual_function_skips_the_host_endianness_register() {
    // The kernel's set_hca_ctrl: `if (!mlx5_core_is_pf(dev)) return 0;`.
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let vf = HcaConfig { function: Function::Virtual, ..cfg() };
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, vf).unwrap();
    assert!(!hca.report().set_host_endianness);
    let ops = r.fw.opcodes();
    assert!(!ops.contains(&consts::CMD_OP_ACCESS_REG), "{ops:x?}");
    assert_eq!(&ops[..5], &BRING_UP[..5]);
    assert_eq!(&ops[5..], &BRING_UP[6..ops.len() + 1]);
    hca.teardown().unwrap();
    // A physical function writes it.
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    assert!(hca.report().set_host_endianness);
    hca.teardown().unwrap();
}

#[test]
fn set_hca_cap_sets_cache_line_qp_count_and_page_release_where_offered() {
    for (line, want) in [(64u16, 0u64), (128, 1)] {
        let st = default_state();
        st.lock().unwrap().caps = vec![
            (cmd_hca_cap::CACHE_LINE_128BYTE, 1),
            (cmd_hca_cap::RELEASE_ALL_PAGES, 1),
            (cmd_hca_cap::LOG_MAX_QP, 20),
        ];
        let mut r = rig(st);
        let pool = PagePool::new(&mut r.bitmap, 1024);
        let c = HcaConfig { cache_line: line, ..cfg() };
        let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, c).unwrap();
        let log = r.fw.log.lock().unwrap().clone();
        let set = log.iter().find(|c| c.opcode == consts::CMD_OP_SET_HCA_CAP).unwrap();
        let cap = &set.input[set_hca_cap_in::CAPABILITY.byte()..];
        // Read back through the generated accessors, independently of the builder.
        assert_eq!(ifc::get(cap, cmd_hca_cap::CACHE_LINE_128BYTE), want, "line {line}");
        assert_eq!(ifc::get(cap, cmd_hca_cap::RELEASE_ALL_PAGES), 1);
        assert_eq!(ifc::get(cap, cmd_hca_cap::LOG_MAX_QP), 18, "min(18, 20)");
        hca.teardown().unwrap();
    }
    // Not offered (maximum 0): left as firmware had them.
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    let log = r.fw.log.lock().unwrap().clone();
    let set = log.iter().find(|c| c.opcode == consts::CMD_OP_SET_HCA_CAP).unwrap();
    let cap = &set.input[set_hca_cap_in::CAPABILITY.byte()..];
    assert_eq!(ifc::get(cap, cmd_hca_cap::CACHE_LINE_128BYTE), 0);
    assert_eq!(ifc::get(cap, cmd_hca_cap::RELEASE_ALL_PAGES), 0);
    hca.teardown().unwrap();
}

#[test]
fn error_events_are_delivered_typed_and_release_all_takes_every_page() {
    use super::eq::{EventType, QueueKind};
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    let dma = r.dma.clone();
    {
        let mut st = r.st.lock().unwrap();
        let ring = &mut st.rings[0];
        // mlx5_eqe_cq_err: CQ 7 overran.
        let mut d = [0u8; 28];
        d[3] = 7;
        d[11] = 1;
        ring.post(&dma, 0x04, 0, &d);
        // mlx5_eqe_qp_srq: QP 0x99 catastrophic, then one informational event.
        let mut d = [0u8; 28];
        d[27] = 0x99;
        ring.post(&dma, 0x05, 0, &d);
        ring.post(&dma, 0x02, 0, &d);
    }
    let s = hca.poll_events().unwrap();
    let errs: Vec<_> = s.errors().collect();
    assert_eq!(
        errs,
        [
            AsyncError::Cq { cqn: 7, syndrome: 1 },
            AsyncError::Queue { ty: EventType::WqCatasError, kind: QueueKind::Qp, num: 0x99 },
        ]
    );
    assert_eq!((s.error_count, s.queue_events, s.other), (2, 1, 0));
    // A page request with RELEASE_ALL_PAGES_MASK takes back every page lent.
    let lent = hca.pages_lent();
    assert!(lent > 0);
    {
        let mut st = r.st.lock().unwrap();
        let mut d = crate::testing::fw::page_request(0, 0);
        d[0] = 0x40;
        st.rings[0].post(&dma, 0x0b, 0, &d);
    }
    let s = hca.poll_events().unwrap();
    assert_eq!((s.page_requests, s.pages_reclaimed), (1, lent as u32));
    assert_eq!(hca.pages_lent(), 0);
    let _ = hca.teardown();
}

#[test]
fn infiniband_port_skips_roce_enable() {
    let st = default_state();
    st.lock().unwrap().port_type = 0;
    let mut r = rig(st);
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    assert!(!hca.report().roce_enabled);
    assert!(!r.fw.opcodes().contains(&0x755));
    hca.teardown().unwrap();
    assert_eq!(r.dma.live_blocks(), 0);
}

#[test]
fn failing_init_hca_unwinds_and_reclaims_every_page() {
    let st = default_state();
    st.lock().unwrap().fail = Some((0x102, 0x04)); // INIT_HCA: bad system state
    let mut r = rig(st);
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).err().unwrap();
    assert_eq!(
        e,
        HcaError::Cmd {
            step: "INIT_HCA",
            error: CmdError::Failed {
                opcode: 0x102,
                op_mod: 0,
                status: CmdStatus::BadSysState,
                syndrome: 0x00c0_ffee
            }
        }
    );
    let fault = FirmwareFault {
        name: "INIT_HCA",
        opcode: 0x102,
        status: 0x04,
        syndrome: 0x00c0_ffee,
        errno: Errno::EIO,
    };
    assert_eq!(Error::from(e), Error::Firmware(fault));
    let ops = r.fw.opcodes();
    assert_eq!(&ops[ops.len() - 4..], &[0x108, 0x108, 0x108, 0x105], "pages back, then disable");
    assert!(!ops.contains(&0x103), "no TEARDOWN_HCA: INIT_HCA never succeeded");
    assert!(r.st.lock().unwrap().held.is_empty(), "firmware holds no page");
    assert_eq!(r.dma.live_blocks(), 0, "nothing leaked");
}

#[test]
fn failing_status_maps_to_the_provider_errno() {
    for (status, errno) in
        [(0x03, Errno::EINVAL), (0x06, Errno::EBUSY), (0x08, Errno::ENOMEM), (0x0f, Errno::EAGAIN)]
    {
        let st = default_state();
        st.lock().unwrap().fail = Some((0x104, status));
        let mut r = rig(st);
        let pool = PagePool::new(&mut r.bitmap, 1024);
        let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).err().unwrap();
        assert_eq!(Error::from(e).errno(), errno, "status {status:#x}");
        assert_eq!(r.fw.opcodes(), vec![0x104], "nothing after a refused ENABLE_HCA");
        assert_eq!(r.dma.live_blocks(), 0);
    }
}

#[test]
fn a_command_that_never_completes_is_a_typed_timeout_and_memory_firmware_may_touch_is_kept() {
    let st = default_state();
    st.lock().unwrap().hang = Some(0x100); // QUERY_HCA_CAP
    let mut r = rig(st);
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).err().unwrap();
    assert_eq!(
        e,
        HcaError::Cmd {
            step: "QUERY_HCA_CAP",
            error: CmdError::Timeout { opcode: 0x100, waited_ns: 2_000_000 }
        }
    );
    assert_eq!(Error::from(e), DeviceFault::CommandTimeout { opcode: 0x100 }.into());
    assert_eq!(Error::from(e).errno(), Errno::ETIMEDOUT);
    // Bounded: the fake clock moves 1 µs per reading; bring-up gave up within the command
    // bound plus the unwind's bounded commands.
    assert!(r.clock.0.get() < 20_000_000, "took {} ns", r.clock.0.get());
    assert!(r.dma.live_blocks() > 0, "queue and lent pages kept: firmware may still write them");
}

#[test]
fn firmware_stuck_initializing_times_out_before_any_command() {
    let mut r = rig(default_state());
    r.bar.write_u32(0x1fc, 0x8000_0000u32.to_be());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).err().unwrap();
    assert_eq!(e, HcaError::FwInitTimeout { waited_ns: 1_000_000 });
    assert_eq!(Error::from(e), Error::Timeout("firmware initialization"));
    assert!(r.clock.0.get() <= 1_010_000);
    assert!(r.fw.opcodes().is_empty());
    assert_eq!(r.dma.live_blocks(), 0);
}

#[test]
fn firmware_that_stays_initializing_after_taking_the_queue_times_out() {
    let mut r = rig(default_state());
    r.fw.init_after_addr.store(true, std::sync::atomic::Ordering::SeqCst);
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).err().unwrap();
    assert_eq!(e, HcaError::FwInitTimeout { waited_ns: 1_000_000 });
    let mut a = [0u8; 8];
    r.bar.mem().read_bytes(0x10, &mut a);
    assert_ne!(a, [0; 8], "the queue address was handed over first");
    assert!(r.fw.opcodes().is_empty());
    assert_eq!(r.dma.live_blocks(), 0, "queue memory given back: no command was posted");
}

#[test]
fn health_syndrome_during_initializing_is_reported() {
    let mut r = rig(default_state());
    r.bar.write_u32(0x1fc, 0x8000_0000u32.to_be());
    r.bar.write_u32(0x23c, u32::from_be_bytes([0, 0x07, 0, 1]).to_be());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    match Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).err().unwrap() {
        HcaError::Health(h) => {
            assert_eq!(h.syndrome, HealthSyndrome::IriscError);
            assert_eq!(h.ext_syndrome, 1);
        }
        other => panic!("expected a health error, got {other:?}"),
    }
}

#[test]
fn wrong_command_interface_revision_is_refused() {
    let mut r = rig(default_state());
    r.bar.write_u32(0x4, 0x0004_0000u32.to_be());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).err().unwrap();
    assert_eq!(e, HcaError::CmdifRev { found: 4 });
}

#[test]
fn a_pool_too_small_for_init_pages_fails_cleanly() {
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 100);
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).err().unwrap();
    assert!(matches!(e, HcaError::PagePoolExhausted { free: 60, .. }), "{e:?}");
    assert!(r.st.lock().unwrap().held.is_empty());
    assert_eq!(r.dma.live_blocks(), 0);
}

#[test]
fn pages_firmware_never_returns_are_reported_and_kept() {
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    r.st.lock().unwrap().keep_pages = true;
    let e = hca.teardown().unwrap_err();
    assert_eq!(e, HcaError::PagesNotReturned { outstanding: 340 });
    assert_eq!(r.dma.live_blocks(), 1, "only the page pool is kept");
}

#[test]
fn runtime_page_requests_are_answered_from_the_pool() {
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    let async_ring = r.st.lock().unwrap().eqs[0].1;
    // Firmware posts a PAGE_REQUEST for 5 pages, then one returning 2, in pass 0 (owner 0).
    let mut eqe = [0u8; 64];
    eqe[1] = 0x0b;
    eqe[36..40].copy_from_slice(&5i32.to_be_bytes());
    assert!(r.dma.write(rdma_pmd::BusAddr(async_ring), &eqe));
    eqe[36..40].copy_from_slice(&(-2i32).to_be_bytes());
    assert!(r.dma.write(rdma_pmd::BusAddr(async_ring + 64), &eqe));
    r.fw.log.lock().unwrap().clear();
    let s = hca.poll_events().unwrap();
    assert_eq!((s.page_requests, s.pages_given, s.pages_reclaimed), (2, 5, 2));
    assert_eq!(hca.pages_lent(), 343);
    let log = r.fw.log.lock().unwrap().clone();
    assert_eq!(log.len(), 2);
    assert!(log.iter().all(|c| c.slot == crate::control::cmd::SLOT_PAGES && c.opcode == 0x108));
    // The consumer index went back to firmware, armed: eqn 5, ci 2.
    let mut db = [0u8; 4];
    r.bar.mem().read_bytes(0x1000 + 0x40, &mut db);
    assert_eq!(db, [5, 0, 0, 2]);
    assert_eq!(hca.poll_events().unwrap(), EventSummary::default());

    // A request that arrives while the driver runs a command is answered on the page slot
    // right after it, and reported by the next poll.
    eqe[36..40].copy_from_slice(&3i32.to_be_bytes());
    assert!(r.dma.write(rdma_pmd::BusAddr(async_ring + 128), &eqe));
    let q: [u8; alloc_pd_in::SIZE] = input(consts::CMD_OP_ALLOC_PD, 0);
    hca.exec("ALLOC_PD", &q, Pas::None, &mut [0u8; alloc_pd_out::SIZE]).unwrap();
    assert_eq!(hca.pages_lent(), 346);
    let s = hca.poll_events().unwrap();
    assert_eq!((s.page_requests, s.pages_given), (1, 3));
    hca.teardown().unwrap();
    assert_eq!(r.dma.live_blocks(), 0);
}

/// Bring-up against `st`, expecting a refusal.
fn refused(st: Arc<Mutex<State>>) -> (Rig, HcaError) {
    let mut r = rig(st);
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).err().expect("refused");
    // The pool's storage is borrowed by the error path only; give the rig back whole.
    (r, e)
}

#[test]
fn an_alloc_uar_index_outside_the_bar_is_a_typed_error_not_an_mmio_fault() {
    let st = default_state();
    st.lock().unwrap().uar_index = 0xff_ffff; // page 0xffffff: 0xffffff040 in a 0x44000 BAR
    let (r, e) = refused(st);
    assert_eq!(e, HcaError::BadFirmwareValue { field: "alloc_uar_out.uar", value: 0xff_ffff });
    let fault = DeviceFault::BadFirmwareValue { field: "alloc_uar_out.uar", value: 0xff_ffff };
    assert_eq!((Error::from(e), e.errno()), (fault.into(), Errno::EIO));
    let ops = r.fw.opcodes();
    assert!(!ops.contains(&0x301), "no EQ made on a UAR outside the BAR");
    assert!(ops.contains(&0x803), "the UAR firmware allocated is given back");
    assert!(r.st.lock().unwrap().held.is_empty());
    assert_eq!(r.dma.live_blocks(), 0);
}

#[test]
fn a_log_uar_page_sz_other_than_the_one_set_is_refused_before_it_is_a_shift() {
    for v in [40u64, 60, 0xffff, 1] {
        let st = default_state();
        st.lock().unwrap().caps = vec![(cmd_hca_cap::LOG_UAR_PAGE_SZ, v)];
        let (r, e) = refused(st);
        assert_eq!(
            e,
            HcaError::BadFirmwareValue { field: "cmd_hca_cap.log_uar_page_sz", value: v },
            "log_uar_page_sz {v}"
        );
        assert!(!r.fw.opcodes().contains(&0x802), "refused before ALLOC_UAR");
        assert_eq!(r.dma.live_blocks(), 0);
    }
}

#[test]
fn capabilities_too_large_for_the_fields_they_bound_are_refused() {
    let cases = [
        (cmd_hca_cap::LOG_MAX_QP_SZ, 200u64, "cmd_hca_cap.log_max_qp_sz"),
        (cmd_hca_cap::LOG_MAX_QP_SZ, 16, "cmd_hca_cap.log_max_qp_sz"),
        (cmd_hca_cap::LOG_MAX_CQ_SZ, 0xff, "cmd_hca_cap.log_max_cq_sz"),
        (cmd_hca_cap::LOG_BF_REG_SIZE, 20, "cmd_hca_cap.log_bf_reg_size"),
    ];
    for (f, v, field) in cases {
        let st = default_state();
        st.lock().unwrap().caps = vec![(f, v)];
        let (r, e) = refused(st);
        assert_eq!(e, HcaError::BadFirmwareValue { field, value: v });
        assert_eq!(r.dma.live_blocks(), 0);
    }
}

#[test]
fn query_pages_with_a_negative_count_is_refused() {
    let st = default_state();
    st.lock().unwrap().boot_pages = 0xffff_fff0; // -16 as firmware's signed num_pages
    let (r, e) = refused(st);
    assert_eq!(
        e,
        HcaError::BadFirmwareValue { field: "query_pages_out.num_pages", value: 0xffff_fff0 }
    );
    assert!(!r.fw.opcodes().contains(&0x108));
    assert_eq!(r.dma.live_blocks(), 0);
}

#[test]
fn page_requests_for_another_function_or_more_pages_than_lent_are_refused() {
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    let dma = r.dma.clone();
    let post = |func: u16, n: i32| {
        let mut st = r.st.lock().unwrap();
        st.rings[0].post(&dma, 0x0b, 0, &page_request(func, n));
    };
    r.fw.log.lock().unwrap().clear();
    post(7, 5);
    assert_eq!(
        hca.poll_events(),
        Err(HcaError::BadFirmwareValue { field: "page_request.func_id", value: 7 })
    );
    post(0, i32::MIN);
    assert_eq!(
        hca.poll_events(),
        Err(HcaError::BadFirmwareValue { field: "page_request.num_pages", value: 0x8000_0000 })
    );
    assert!(r.fw.log.lock().unwrap().is_empty(), "no MANAGE_PAGES for an absurd request");
    assert_eq!(hca.pages_lent(), 340);
    hca.teardown().unwrap();
    assert_eq!(r.dma.live_blocks(), 0);
}

#[test]
fn two_eqs_with_one_number_are_refused_and_the_ring_firmware_holds_is_kept() {
    let st = default_state();
    st.lock().unwrap().eqn_fixed = Some(5);
    let (r, e) = refused(st);
    assert_eq!(e, HcaError::BadFirmwareValue { field: "create_eq_out.eq_number", value: 5 });
    let second = r.st.lock().unwrap().eqs[1].1;
    assert!(r.dma.translate(rdma_pmd::BusAddr(second), 4096).is_some(), "second ring kept");
    assert_eq!(r.dma.live_blocks(), 1, "only the ring firmware may still write");
}

#[test]
fn an_event_queue_that_never_runs_dry_is_serviced_in_bounded_batches() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = rig(default_state());
        let pool = PagePool::new(&mut r.bitmap, 1024);
        let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
        {
            let mut st = r.st.lock().unwrap();
            st.ping_pong = true;
            st.rings[0].post(&r.dma, 0x0b, 0, &page_request(0, 1));
        }
        let first = hca.poll_events();
        r.st.lock().unwrap().ping_pong = false;
        let rest = hca.poll_events();
        let t = hca.teardown();
        tx.send((first, rest, t, r.dma.live_blocks())).unwrap();
    });
    let (first, rest, t, live) =
        rx.recv_timeout(std::time::Duration::from_secs(5)).expect("poll_events never returned");
    let s = first.unwrap();
    assert_eq!(s.page_requests, 128, "one ring's worth per call");
    assert_eq!((s.pages_given, s.pages_reclaimed), (64, 64));
    assert_eq!(rest.unwrap().page_requests, 1, "the rest is left for the next call");
    t.unwrap();
    assert_eq!(live, 0);
}

#[test]
fn a_failed_disable_hca_keeps_the_command_queue_firmware_may_still_write() {
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    r.st.lock().unwrap().fail = Some((0x105, 0x04)); // DISABLE_HCA: bad system state
    let e = hca.teardown().unwrap_err();
    assert!(matches!(e, HcaError::Cmd { step: "DISABLE_HCA", .. }), "{e:?}");
    let cmdq = (u64::from(r.bar.read_be32(0x10)) << 32) | u64::from(r.bar.read_be32(0x14) & !0xfff);
    assert!(r.dma.translate(rdma_pmd::BusAddr(cmdq), 4096).is_some(), "queue still mapped");
    // The queue page and both slots' input and output mailboxes; the pages all came back.
    assert_eq!(r.dma.live_blocks(), 5);
    assert!(r.st.lock().unwrap().held.is_empty());
}

#[test]
fn a_failed_teardown_hca_skips_cleanup_and_keeps_what_firmware_holds() {
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    r.st.lock().unwrap().fail = Some((0x103, 0x04)); // TEARDOWN_HCA
    r.fw.log.lock().unwrap().clear();
    let e = hca.teardown().unwrap_err();
    assert!(matches!(e, HcaError::Cmd { step: "TEARDOWN_HCA", .. }), "{e:?}");
    // The kernel's `mlx5_function_close`: "tear_down_hca failed, skip cleanup".
    assert_eq!(r.fw.opcodes().last(), Some(&0x103), "no reclaim, no DISABLE_HCA after it");
    assert_eq!(r.st.lock().unwrap().held.len(), 340);
    assert_eq!(r.dma.live_blocks(), 6, "queue (5 blocks) and page pool kept");
}

#[test]
fn a_failed_destroy_eq_keeps_the_ring() {
    let mut r = rig(default_state());
    let pool = PagePool::new(&mut r.bitmap, 1024);
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, pool, cfg()).unwrap();
    r.st.lock().unwrap().fail = Some((0x302, 0x04));
    let e = hca.teardown().unwrap_err();
    assert!(matches!(e, HcaError::Cmd { step: "DESTROY_EQ", .. }), "{e:?}");
    for (_, ring, _) in r.st.lock().unwrap().eqs.clone() {
        assert!(r.dma.translate(rdma_pmd::BusAddr(ring), 4096).is_some());
    }
    assert_eq!(r.dma.live_blocks(), 2, "both rings, nothing else");
}

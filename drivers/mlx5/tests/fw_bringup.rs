//! End to end: the driver brings the model's firmware up over the command interface, creates
//! every resource with firmware commands, runs RDMA WRITEs on them, and tears everything down;
//! plus the firmware faults a real HCA can show (a failing command, one that never completes,
//! firmware stuck initializing, a fatal health syndrome), each of which must surface as a typed
//! error within its bound and leave no firmware page behind; and a firmware that breaks the
//! protocol (a refused delivery, another token, an absurd value, pages never given back), each
//! of which reaches the user as the fault that names it.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bytes, pair, pattern, wait, TARGET};
use rdma_pmd::{
    BusAddr, DeviceFault, Errno, Error, FirmwareFault, Gid, Mac, Post, SendFlags, WcOpcode,
    WcStatus,
};
use rdma_pmd_hal::mem::{HeapDma, MemBar};
use rdma_pmd_hal::{Dma, StdClock};
use rdma_pmd_mlx5::control::bringup::{bitmap_words, Hca, HcaConfig, HcaError, PagePool, PortType};
use rdma_pmd_mlx5::control::cmd::status::{EBADR, ENOMSG};
use rdma_pmd_mlx5::control::cmd::{CmdConfig, CmdError, CmdStatus};
use rdma_pmd_mlx5::control::fw::FwControl;
use rdma_pmd_mlx5::control::init_seg::HealthSyndrome;
use rdma_pmd_mlx5::control::{
    Access, Control, CqParams, Cqn, MkeyParams, MtuSource, Path, QpParams, Service, Transition,
    Translation,
};
use rdma_pmd_mlx5::{Mlx5, QpConfig, SharedDma};
use rdma_pmd_mlx5_model::fw::{self, Firmware, FwConfig, HcaState, Opcode};
use rdma_pmd_mlx5_model::Model;

/// Pages in the driver's pool.
const POOL: usize = 512;
/// Command bound for the fault tests (the firmware thread answers in microseconds).
const CMD_TIMEOUT: Duration = Duration::from_millis(300);

fn cfg() -> HcaConfig {
    HcaConfig {
        cmd: CmdConfig { timeout_ns: CMD_TIMEOUT.as_nanos() as u64, ..CmdConfig::default() },
        fw_init_timeout_ns: 300_000_000,
        reclaim_timeout_ns: 300_000_000,
        ..HcaConfig::default()
    }
}

struct Rig {
    model: Model,
    fw: Firmware,
    bar: MemBar,
    dma: Arc<HeapDma>,
    clock: StdClock,
    bits: Vec<u64>,
}

fn rig(fw_cfg: FwConfig) -> Rig {
    let model = Model::new();
    let fw = Firmware::start(&model, fw_cfg).expect("firmware");
    let bar = fw.bar();
    let dma = model.dma();
    Rig { model, fw, bar, dma, clock: StdClock::default(), bits: vec![0; bitmap_words(POOL)] }
}

#[test]
fn bring_up_reports_what_firmware_said_and_teardown_returns_every_page() {
    let mut r = rig(FwConfig::default());
    let blocks_before = r.dma.live_blocks();
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    let rep = *hca.report();
    println!("{rep}");
    assert_eq!((rep.fw.major, rep.fw.minor, rep.fw.subminor), (16, 35, 1012));
    assert_eq!((rep.cmdif_rev, rep.issi), (5, 1));
    assert_eq!(r.fw.issi(), 1);
    assert_eq!((rep.boot_pages, rep.init_pages), (4, 16));
    assert_eq!(rep.pages_lent, 20);
    assert_eq!(r.fw.pages().held, 20, "firmware holds what the driver says it lent");
    assert_eq!(rep.caps.port_type, PortType::Ethernet);
    assert!(rep.caps.roce && rep.roce_enabled && r.fw.roce_enabled());
    assert_eq!(rep.caps.log_max_qp, 10);
    assert_eq!(rep.caps.log_max_pd, 10);
    assert_eq!(r.fw.state(), HcaState::Initialized);
    assert_eq!(r.fw.host_endianness()[0] >> 7, 0, "host endianness register written (he = 0)");
    assert!(r.fw.delivery_errors().is_empty(), "{:?}", r.fw.delivery_errors());
    assert!(r.fw.executed().iter().all(|e| e.status == fw::CmdStatus::Ok));

    let t = hca.teardown().expect("teardown");
    assert_eq!((t.pages_reclaimed, t.pages_outstanding), (20, 0));
    assert_eq!(r.fw.pages().held, 0);
    assert!(!r.fw.roce_enabled());
    assert_ne!(r.fw.state(), HcaState::Initialized);
    assert_eq!(r.fw.live_objects(), 0);
    assert_eq!(r.dma.live_blocks(), blocks_before, "queue, EQs and page pool given back");
    assert!(r.fw.delivery_errors().is_empty());
}

#[test]
fn every_resource_through_firmware_commands() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    let buf = r.dma.alloc(64 * 1024, 4096).unwrap();
    let db = r.dma.alloc(4096, 4096).unwrap();
    {
        let mut ctl = FwControl::new(&mut hca);
        let uar = ctl.alloc_uar().unwrap();
        let pd = ctl.alloc_pd().unwrap();
        let mtt = ctl
            .create_mkey(&MkeyParams {
                pd,
                start: 0x10_0000,
                len: 16 * 1024,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                translation: Translation::Mtt { base: buf.bus(), page_shift: 12 },
            })
            .unwrap();
        let pa = ctl
            .create_mkey(&MkeyParams {
                pd,
                start: buf.bus().0,
                len: 4096,
                access: Access::REMOTE_READ,
                translation: Translation::Physical,
            })
            .unwrap();
        assert_ne!(mtt, pa);
        let cq = ctl
            .create_cq(&CqParams {
                log_size: 6,
                buf: buf.bus().add(16 * 1024),
                dbrec: db.bus(),
                uar,
            })
            .unwrap();
        let qp = ctl
            .create_qp(&QpParams {
                service: Service::Rc,
                pd,
                send_cq: cq,
                recv_cq: cq,
                log_sq_size: 6,
                log_rq_size: Some(4),
                log_rq_stride: 5,
                buf: buf.bus().add(32 * 1024),
                dbrec: db.bus().add(64),
                uar,
            })
            .unwrap();
        assert!(r.fw.live_objects() >= 6);
        let steps = [
            Transition::RstToInit { port: 1, access: Access::REMOTE_WRITE },
            Transition::InitToRtr {
                remote_qpn: qp,
                path: Path::roce_v2(
                    Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]),
                    Mac([0x02, 0, 0, 0, 0, 1]),
                    0,
                ),
                mtu: 5,
                rq_psn: 1,
            },
            Transition::RtrToRts { sq_psn: 1, timeout: 14, retry_cnt: 7, rnr_retry: 7 },
            Transition::ToErr,
            Transition::ToRst,
        ];
        for t in &steps {
            ctl.modify_qp(qp, t).unwrap_or_else(|e| panic!("{t:?}: {e}"));
        }
        // A transition the state machine forbids (RST -> RTS) is refused as the provider does.
        let e = ctl.modify_qp(qp, &steps[2]).unwrap_err();
        assert_eq!(e.errno(), Errno::EINVAL, "{e}");
        ctl.destroy_qp(qp).unwrap();
        ctl.destroy_cq(cq).unwrap();
        ctl.destroy_mkey(pa).unwrap();
        ctl.destroy_mkey(mtt).unwrap();
        ctl.dealloc_pd(pd).unwrap();
        ctl.dealloc_uar(uar).unwrap();
        assert_eq!(ctl.dealloc_pd(pd).unwrap_err().errno(), Errno::EINVAL, "already gone");
    }
    assert!(r.fw.delivery_errors().is_empty(), "{:?}", r.fw.delivery_errors());
    hca.teardown().expect("teardown");
    assert_eq!(r.fw.live_objects(), 0);
    assert_eq!(r.fw.pages().held, 0);
    // SAFETY: the firmware objects using them were destroyed.
    unsafe {
        r.dma.free(buf);
        r.dma.free(db);
    }
}

#[test]
fn rdma_writes_run_on_resources_made_by_firmware_commands() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    {
        let dev = Mlx5::open(r.bar.clone(), SharedDma(r.dma.clone()), FwControl::new(&mut hca))
            .expect("open over firmware control");
        let src = dev.reg(1 << 14, TARGET).unwrap();
        let dst = dev.reg(1 << 14, TARGET).unwrap();
        let (mut a, _b) = pair::<_, _, 64>(&dev, &QpConfig::default());
        src.write(0, &pattern(7, 1 << 14)).unwrap();
        for (i, (off, len)) in [(0usize, 1usize), (100, 4096), (5000, 9000)].into_iter().enumerate()
        {
            dst.fill(0xee);
            a.post_writev(
                i as u64,
                &[src.slice(off, len).unwrap()],
                SendFlags::SIGNALED,
                dst.remote(8),
            )
            .unwrap();
            let c = wait(&mut a, 1);
            assert_eq!(
                (c[0].wr_id, c[0].status, c[0].opcode),
                (i as u64, WcStatus::Success, WcOpcode::RdmaWrite)
            );
            assert_eq!(bytes(&dst, 8, len), bytes(&src, off, len));
            assert_eq!(bytes(&dst, 0, 8), [0xee; 8]);
        }
        // The model checked every BAR store and WQE the driver made: nothing wrong.
        common::clean(&r.model);
    }
    assert!(r.fw.delivery_errors().is_empty(), "{:?}", r.fw.delivery_errors());
    hca.teardown().expect("teardown after the device closed");
    assert_eq!(r.fw.live_objects(), 0);
    assert_eq!(r.fw.pages().held, 0);
}

#[test]
fn a_failing_command_is_a_typed_error_and_unwinding_returns_every_page() {
    let mut r = rig(FwConfig::default());
    r.fw.fail_next(Opcode::CreateEq, fw::CmdStatus::BadParam, 0x1234_5678);
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .err()
        .expect("CREATE_EQ fails");
    assert_eq!(
        e,
        HcaError::Cmd {
            step: "CREATE_EQ",
            error: CmdError::Failed {
                opcode: 0x301,
                op_mod: 0,
                status: CmdStatus::BadParam,
                syndrome: 0x1234_5678
            }
        }
    );
    let fault = FirmwareFault {
        name: "CREATE_EQ",
        opcode: 0x301,
        status: 0x03,
        syndrome: 0x1234_5678,
        errno: Errno::EINVAL,
    };
    assert_eq!(Error::from(e), Error::Firmware(fault));
    assert_eq!(r.fw.pages().held, 0, "boot and init pages reclaimed after TEARDOWN_HCA");
    assert_eq!(r.fw.state(), HcaState::Disabled);
    assert_eq!(r.fw.live_objects(), 0, "the EQ UAR was given back");
    // The function can be brought up again afterwards.
    let mut bits = vec![0; bitmap_words(POOL)];
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut bits, POOL), cfg())
        .expect("second bring-up");
    hca.teardown().unwrap();
    assert_eq!(r.fw.pages().held, 0);
}

#[test]
fn a_failing_init_hca_unwinds_the_kernel_way_without_leaking() {
    let mut r = rig(FwConfig::default());
    r.fw.fail_next(Opcode::InitHca, fw::CmdStatus::BadSysState, 7);
    let blocks_before = r.dma.live_blocks();
    let start = Instant::now();
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .err()
        .expect("INIT_HCA fails");
    assert!(
        matches!(
            e,
            HcaError::Cmd {
                step: "INIT_HCA",
                error: CmdError::Failed { opcode: 0x102, status: CmdStatus::BadSysState, .. }
            }
        ),
        "{e:?}"
    );
    let fault = FirmwareFault {
        name: "INIT_HCA",
        opcode: 0x102,
        status: 0x04,
        syndrome: 7,
        errno: Errno::EIO,
    };
    assert_eq!(Error::from(e), Error::Firmware(fault));
    // Unwinding is the kernel's error path: every page reclaimed, then DISABLE_HCA.
    assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
    assert_eq!(r.fw.pages().held, 0, "boot and init pages reclaimed");
    assert_eq!(r.fw.state(), HcaState::Disabled);
    assert_eq!(r.dma.live_blocks(), blocks_before, "nothing leaked");
}

#[test]
fn resource_errors_carry_the_provider_errno() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    {
        let mut ctl = FwControl::new(&mut hca);
        for (status, errno) in [
            (fw::CmdStatus::ResourceBusy, Errno::EBUSY),
            (fw::CmdStatus::ExceedLim, Errno::ENOMEM),
            (fw::CmdStatus::NoResources, Errno::EAGAIN),
            (fw::CmdStatus::BadOp, Errno::EINVAL),
            (fw::CmdStatus::BadResState, Errno::EINVAL),
        ] {
            r.fw.fail_next(Opcode::AllocPd, status, 1);
            let fault = FirmwareFault {
                name: "ALLOC_PD",
                opcode: 0x800,
                status: status.into(),
                syndrome: 1,
                errno,
            };
            assert_eq!(ctl.alloc_pd().unwrap_err(), Error::Firmware(fault), "{status:?}");
        }
        let pd = ctl.alloc_pd().unwrap();
        ctl.dealloc_pd(pd).unwrap();
    }
    hca.teardown().unwrap();
}

#[test]
fn a_command_that_never_completes_times_out_within_its_bound() {
    let mut r = rig(FwConfig::default());
    r.fw.hang_next(Opcode::QueryHcaCap);
    let start = Instant::now();
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .err()
        .expect("hangs");
    let took = start.elapsed();
    assert_eq!(
        e,
        HcaError::Cmd {
            step: "QUERY_HCA_CAP",
            error: CmdError::Timeout { opcode: 0x100, waited_ns: CMD_TIMEOUT.as_nanos() as u64 }
        }
    );
    assert_eq!(Error::from(e), DeviceFault::CommandTimeout { opcode: 0x100 }.into());
    assert_eq!(Error::from(e).errno(), Errno::ETIMEDOUT);
    assert!(took >= CMD_TIMEOUT && took < CMD_TIMEOUT * 10, "gave up after {took:?}");
    assert_eq!(r.fw.hung_slots(), vec![0]);
}

#[test]
fn firmware_stuck_initializing_times_out_within_its_bound() {
    let mut r = rig(FwConfig::default());
    r.fw.set_stuck_initializing(true);
    let start = Instant::now();
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .err()
        .expect("stuck");
    assert_eq!(e, HcaError::FwInitTimeout { waited_ns: 300_000_000 });
    assert_eq!(Error::from(e), Error::Timeout("firmware initialization"));
    assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
    assert!(r.fw.executed().is_empty());
}

#[test]
fn a_fatal_health_syndrome_is_reported_with_its_syndrome() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    r.fw.set_health_syndrome(0x8, 0x0bad);
    let start = Instant::now();
    let e = FwControl::new(&mut hca).alloc_pd().unwrap_err();
    let fault = DeviceFault::Unhealthy { syndrome: 0x8, ext_syndrome: 0x0bad };
    assert_eq!((e, e.errno()), (fault.into(), Errno::EIO));
    assert!(start.elapsed() < CMD_TIMEOUT * 10, "{:?}", start.elapsed());
    let h = hca.health().expect("syndrome visible");
    assert_eq!((h.syndrome, h.ext_syndrome), (HealthSyndrome::HwUnrecoverable, 0x0bad));
    // Teardown cannot run commands on a dead function; it says so and keeps the memory the
    // firmware may still own.
    assert!(hca.teardown().is_err());
}

#[test]
fn health_syndrome_before_bring_up_is_a_typed_error() {
    let mut r = rig(FwConfig::default());
    r.fw.set_health_syndrome(0x1, 0x0001);
    let e = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .err()
        .expect("dead firmware");
    match e {
        HcaError::Cmd { step: "ENABLE_HCA", error: CmdError::Health { opcode: 0x104, health } } => {
            assert_eq!(health.syndrome, HealthSyndrome::FwError)
        }
        HcaError::Health(h) => assert_eq!(h.syndrome, HealthSyndrome::FwError),
        other => panic!("expected a health error, got {other:?}"),
    }
    // Either way the user sees the syndromes, not a bare EIO.
    let fault = DeviceFault::Unhealthy { syndrome: 0x1, ext_syndrome: 0x0001 };
    assert_eq!(Error::from(e), fault.into());
}

#[test]
fn run_time_page_requests_are_answered_and_pages_come_back_at_teardown() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    r.fw.request_pages(8).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut given = 0;
    while given < 8 {
        given += hca.poll_events().unwrap().pages_given;
        assert!(Instant::now() < deadline, "page request not seen");
    }
    assert_eq!(hca.pages_lent(), 28);
    assert_eq!(r.fw.pages().held, 28);
    r.fw.request_pages(-5).unwrap();
    let mut back = 0;
    while back < 5 {
        back += hca.poll_events().unwrap().pages_reclaimed;
        assert!(Instant::now() < deadline, "page return not seen");
    }
    assert_eq!((hca.pages_lent(), r.fw.pages().held), (23, 23));
    let t = hca.teardown().unwrap();
    assert_eq!(t.pages_outstanding, 0);
    assert_eq!(r.fw.pages().held, 0);
}

#[test]
fn a_page_request_beyond_the_pool_is_refused_without_leaking() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    r.fw.request_pages(POOL as i32).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let e = loop {
        match hca.poll_events() {
            Err(e) => break e,
            Ok(_) => assert!(Instant::now() < deadline, "page request not seen"),
        }
    };
    assert_eq!(e, HcaError::PagePoolExhausted { requested: POOL as u32, free: POOL - 20 });
    assert_eq!(Error::from(e).errno(), Errno::ENOMEM);
    assert_eq!(r.fw.pages().held, 20, "nothing half-given");
    assert!(
        r.fw.executed().iter().any(|x| x.opcode == Opcode::ManagePages && x.op_mod == 0),
        "ALLOCATION_FAIL sent"
    );
    hca.teardown().expect("teardown");
    assert_eq!(r.fw.pages().held, 0);
}

// The control path's typed errors, each injected on the model's firmware and seen through
// `FwControl` (or the `Hca` it wraps) as the value the user gets.

/// An RC QP's fields, on a UAR and PD firmware made. The CQ and the buffers are never looked
/// at: every test that uses them has firmware refuse or keep `CREATE_QP` before it executes.
fn qp_params(ctl: &mut FwControl<'_, '_>) -> QpParams {
    QpParams {
        service: Service::Rc,
        uar: ctl.alloc_uar().unwrap(),
        pd: ctl.alloc_pd().unwrap(),
        send_cq: Cqn(1),
        recv_cq: Cqn(1),
        log_sq_size: 6,
        log_rq_size: None,
        log_rq_stride: 4,
        buf: BusAddr(0x4000_0000),
        dbrec: BusAddr(0x4001_0000),
    }
}

#[test]
fn a_refused_create_qp_keeps_its_opcode_status_and_syndrome() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    let mut ctl = FwControl::new(&mut hca);
    let p = qp_params(&mut ctl);
    r.fw.fail_next(Opcode::CreateQp, fw::CmdStatus::BadParam, 0x0bad_c0de);
    let e = ctl.create_qp(&p).unwrap_err();
    let fault = FirmwareFault {
        name: "CREATE_QP",
        opcode: 0x500,
        status: 0x03,
        syndrome: 0x0bad_c0de,
        errno: Errno::EINVAL,
    };
    assert_eq!((e, e.errno()), (Error::Firmware(fault), Errno::EINVAL));
    assert_eq!(
        e.to_string(),
        "firmware: CREATE_QP(0x500) failed: status 0x3, syndrome 0xbadc0de (errno 22)"
    );
}

#[test]
fn a_command_firmware_keeps_is_a_timeout_fault_and_its_slot_stays_busy() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    let mut ctl = FwControl::new(&mut hca);
    let p = qp_params(&mut ctl);
    r.fw.hang_next(Opcode::CreateQp);
    let e = ctl.create_qp(&p).unwrap_err();
    assert_eq!(
        (e, e.errno()),
        (DeviceFault::CommandTimeout { opcode: 0x500 }.into(), Errno::ETIMEDOUT)
    );
    // The entry is still firmware's: the next command cannot be posted on it.
    let e = ctl.alloc_pd().unwrap_err();
    assert_eq!((e, e.errno()), (DeviceFault::CommandSlotBusy { slot: 0 }.into(), Errno::EBUSY));
    assert_eq!(r.fw.hung_slots(), vec![0]);
    assert!(hca.teardown().is_err(), "nothing can be torn down behind a hung command");
}

#[test]
fn a_refused_delivery_is_a_fault_with_the_kernels_errno_for_its_status() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    {
        let mut ctl = FwControl::new(&mut hca);
        for (status, raw, errno) in [
            (fw::DeliveryStatus::InLengthErr, 0x07, ENOMSG),
            (fw::DeliveryStatus::TokenErr, 0x02, EBADR),
            (fw::DeliveryStatus::OutPtrAlignErr, 0x04, Errno::EFAULT),
            (fw::DeliveryStatus::FwErr, 0x06, Errno::EIO),
        ] {
            r.fw.refuse_next(Opcode::AllocPd, status);
            let e = ctl.alloc_pd().unwrap_err();
            let fault = DeviceFault::Undelivered { opcode: 0x800, status: raw, errno };
            assert_eq!((e, e.errno()), (fault.into(), errno), "{status:?}");
        }
        // Refused entries are handed back: the queue goes on.
        let pd = ctl.alloc_pd().unwrap();
        ctl.dealloc_pd(pd).unwrap();
    }
    hca.teardown().expect("teardown");
    assert_eq!(r.fw.pages().held, 0);
}

#[test]
fn an_answer_carrying_another_token_is_a_fault_naming_both_tokens() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    // The driver never posts token 0 (tokens run 1..=255, as the kernel's).
    r.fw.answer_token_next(Opcode::AllocPd, 0);
    let e = FwControl::new(&mut hca).alloc_pd().unwrap_err();
    match e {
        Error::Fault(DeviceFault::TokenMismatch { opcode: 0x800, expected, found: 0 }) => {
            assert_ne!(expected, 0)
        }
        other => panic!("expected a token mismatch, got {other:?}"),
    }
    assert_eq!(e.errno(), Errno::EIO);
}

#[test]
fn a_uar_index_outside_the_bar_is_a_bad_firmware_value_fault() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    let objects = r.fw.live_objects();
    r.fw.answer_field_next(Opcode::AllocUar, fw::ifc::alloc_uar_out::UAR, 0xff_ffff);
    let e = FwControl::new(&mut hca).alloc_uar().unwrap_err();
    let fault = DeviceFault::BadFirmwareValue { field: "alloc_uar_out.uar", value: 0xff_ffff };
    assert_eq!((e, e.errno()), (fault.into(), Errno::EIO));
    // Firmware did allocate a UAR, under an index the driver cannot know: it stays firmware's.
    assert_eq!(r.fw.live_objects(), objects + 1);
}

#[test]
fn a_page_returned_that_was_never_lent_is_a_bad_page_return_fault() {
    let mut r = rig(FwConfig::default());
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    let deadline = Instant::now() + Duration::from_secs(5);
    r.fw.request_pages(8).unwrap();
    let mut given = 0;
    while given < 8 {
        given += hca.poll_events().unwrap().pages_given;
        assert!(Instant::now() < deadline, "page request not seen");
    }
    let bogus = 0x7fff_f000;
    r.fw.answer_field_next(Opcode::ManagePages, fw::ifc::manage_pages_out::PAS.index(0), bogus);
    r.fw.request_pages(-5).unwrap();
    let e = loop {
        match hca.poll_events() {
            Err(e) => break e,
            Ok(_) => assert!(Instant::now() < deadline, "page return not seen"),
        }
    };
    assert_eq!(e, HcaError::BadPageReturn { addr: bogus });
    let fault = DeviceFault::BadPageReturn { addr: bogus };
    assert_eq!((Error::from(e), e.errno()), (fault.into(), Errno::EIO));
}

#[test]
fn firmware_that_keeps_its_pages_at_teardown_is_a_pages_not_returned_fault() {
    let mut r = rig(FwConfig::default());
    let hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    r.fw.set_keep_pages(true);
    let start = Instant::now();
    let e = hca.teardown().unwrap_err();
    assert_eq!(e, HcaError::PagesNotReturned { outstanding: 20 });
    let fault = DeviceFault::PagesNotReturned { outstanding: 20 };
    assert_eq!((Error::from(e), e.errno()), (fault.into(), Errno::EBUSY));
    assert!(start.elapsed() < Duration::from_secs(3), "reclaim bounded: {:?}", start.elapsed());
    assert_eq!(r.fw.pages().held, 20, "the pages, and their memory, stay firmware's");
}

/// The port's addressing through firmware commands on the model: its MAC from the NIC vport
/// context, an empty GID entry, the bounds of the table, and the path MTU with where it came
/// from (the model refuses the PMTU register, so the vport context's MTU).
#[test]
fn port_addressing_through_firmware_commands() {
    let mut r = rig(FwConfig::default());
    let want = r.model.gids()[0];
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    {
        let mut ctl = FwControl::new(&mut hca);
        assert_eq!(ctl.mac().unwrap(), Mac(want.mac));
        // The model holds the entry in the IPv4-compatible form; it reads as the v4-mapped GID.
        assert_eq!(ctl.gid(0).unwrap(), Some((Gid(want.gid), Mac(want.mac))));
        assert_eq!(ctl.gid(1).unwrap(), None, "an empty entry");
        let ip = std::net::IpAddr::V4(Gid(want.gid).ipv4().unwrap().into());
        assert!(matches!(ctl.set_gid(4096, ip), Err(Error::InvalidArgument(_))));
        let mtu = ctl.port_mtu().unwrap();
        assert_eq!(mtu.source, MtuSource::NicVport, "{mtu:?}");
        assert!((1..=5).contains(&mtu.mtu));
    }
    assert!(r.fw.delivery_errors().is_empty());
    hca.teardown().expect("teardown");
}

/// The GID table written in the kernel's image (`set_roce_addr`, `mlx5_core_roce_gid_set`): an
/// IPv4 entry is its v4-mapped GID, a cleared entry says RoCE v2 and IPv6; the model, a
/// function without RoCE v1, refuses the older forms as firmware does.
#[test]
fn gid_table_in_the_kernels_image_through_firmware_commands() {
    let mut r = rig(FwConfig::default());
    let want = r.model.gids()[0];
    let mut hca = Hca::bring_up(&r.bar, &*r.dma, &r.clock, PagePool::new(&mut r.bits, POOL), cfg())
        .expect("bring-up");
    {
        let mut ctl = FwControl::new(&mut hca);
        let ip = std::net::IpAddr::V4(Gid(want.gid).ipv4().unwrap().into());
        ctl.set_gid(0, ip).expect("the configured address, in the kernel's layout");
        let other = std::net::IpAddr::V4([192, 0, 2, 1].into());
        assert!(
            matches!(ctl.set_gid(0, other), Err(Error::Firmware(_))),
            "the model's table is fixed"
        );
        ctl.clear_gid(3).unwrap();
    }
    assert!(r.fw.delivery_errors().is_empty());
    hca.teardown().expect("teardown");
}

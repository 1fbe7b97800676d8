use core::cell::Cell;
use std::vec::Vec;

use rdma_pmd::{DeviceFault, Errno, Error, FirmwareFault};
use rdma_pmd_hal::{Clock, Mmio};

use super::*;
use crate::layout::ifc::{self, consts, generated::*};
use crate::testing::fw::{FakeFw, Reply};

/// A clock that advances 1 µs per reading, so bounded waits end quickly and deterministically.
pub(crate) struct Ticks(pub Cell<u64>);
impl Clock for Ticks {
    fn now_ns(&self) -> u64 {
        let t = self.0.get() + 1_000;
        self.0.set(t);
        t
    }
}

fn cfg() -> CmdConfig {
    CmdConfig { in_blocks: 4, out_blocks: 9, timeout_ns: 5_000_000 }
}

fn enable_hca() -> [u8; enable_hca_in::SIZE] {
    let mut b = [0u8; enable_hca_in::SIZE];
    ifc::set(&mut b, enable_hca_in::OPCODE, consts::CMD_OP_ENABLE_HCA.into());
    b
}

#[test]
fn small_command_round_trip() {
    let (fw, bar, dma) = FakeFw::new(|_| Reply::ok(vec![]));
    let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
    let clock = Ticks(Cell::new(0));
    let mut out = [0xffu8; 16];
    q.exec_on(SLOT_CMD, &clock, &enable_hca(), Pas::None, &mut out).unwrap();
    assert_eq!(out, [0u8; 16]);
    assert_eq!(fw.opcodes(), vec![0x104]);
    let seen = fw.log.lock().unwrap()[0].clone();
    assert_eq!(seen.input.len(), enable_hca_in::SIZE);
    assert_eq!(seen.outlen, 16);
    assert_eq!((seen.op_mod, seen.slot), (0, SLOT_CMD));
    assert!(fw.faults.lock().unwrap().is_empty(), "{:?}", fw.faults.lock().unwrap());
    q.release(&*dma);
    assert_eq!(dma.live_blocks(), 0, "queue memory given back");
}

#[test]
fn mailbox_chains_carry_large_inputs_and_outputs() {
    // Firmware echoes a pattern across the whole 4112-byte QUERY_HCA_CAP output.
    let (fw, bar, dma) = FakeFw::new(|s| {
        let body: Vec<u8> = (0..s.outlen - 8).map(|i| (i % 251) as u8).collect();
        Reply::ok(body)
    });
    let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
    let clock = Ticks(Cell::new(0));
    // CREATE_QP fixed part (0x110 bytes) plus 100 PAS entries: 1072 bytes, three input blocks.
    let mut head = [0u8; create_qp_in::SIZE];
    ifc::set(&mut head, create_qp_in::OPCODE, consts::CMD_OP_CREATE_QP.into());
    ifc::set(&mut head, qpc::PD.within(create_qp_in::QPC), 0x12345);
    let pas = Pas::Linear { base: 0xe0_0000_0000, step: 4096, count: 100 };
    let mut out = vec![0u8; query_hca_cap_out::SIZE];
    q.exec_on(SLOT_CMD, &clock, &head, pas, &mut out).unwrap();
    let seen = fw.log.lock().unwrap()[0].clone();
    assert_eq!(seen.input.len(), 0x110 + 800);
    assert_eq!(&seen.input[..0x110], &head[..]);
    for i in 0..100 {
        let at = create_qp_in::PAS.at(i).byte();
        let v = u64::from_be_bytes(seen.input[at..at + 8].try_into().unwrap());
        assert_eq!(v, 0xe0_0000_0000 + 4096 * i as u64, "pas[{i}]");
    }
    for (i, b) in out[8..].iter().enumerate() {
        assert_eq!(*b, (i % 251) as u8, "output byte {}", i + 8);
    }
    assert!(fw.faults.lock().unwrap().is_empty(), "{:?}", fw.faults.lock().unwrap());
}

#[test]
fn failing_status_becomes_a_typed_error_with_the_provider_errno() {
    let (_fw, bar, dma) = FakeFw::new(|_| Reply::fail(0x06, 0xdead));
    let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
    let clock = Ticks(Cell::new(0));
    let mut out = [0u8; 16];
    let e = q.exec_on(SLOT_CMD, &clock, &enable_hca(), Pas::None, &mut out).unwrap_err();
    assert_eq!(
        e,
        CmdError::Failed {
            opcode: 0x104,
            op_mod: 0,
            status: CmdStatus::ResourceBusy,
            syndrome: 0xdead
        }
    );
    let fault = FirmwareFault {
        name: "",
        opcode: 0x104,
        status: 0x06,
        syndrome: 0xdead,
        errno: Errno::EBUSY,
    };
    assert_eq!(Error::from(e), Error::Firmware(fault));
    // The slot is free again: the next command goes through.
    assert!(q.post(SLOT_CMD, &enable_hca(), Pas::None, 16).is_ok());
}

#[test]
fn delivery_failure_is_reported_before_the_command_status() {
    let (_fw, bar, dma) =
        FakeFw::new(|_| Reply { delivery: 0x07, status: 0, ..Default::default() });
    let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
    let mut out = [0u8; 16];
    let e =
        q.exec_on(SLOT_CMD, &Ticks(Cell::new(0)), &enable_hca(), Pas::None, &mut out).unwrap_err();
    assert_eq!(e, CmdError::Delivery { opcode: 0x104, status: DeliveryStatus::InLength });
    assert_eq!(e.errno(), status::ENOMSG);
    let fault = DeviceFault::Undelivered { opcode: 0x104, status: 0x07, errno: status::ENOMSG };
    assert_eq!(Error::from(e), fault.into());
}

#[test]
fn a_command_that_never_completes_times_out_within_its_bound() {
    let (fw, bar, dma) = FakeFw::new(|_| Reply { hang: true, ..Default::default() });
    let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
    let clock = Ticks(Cell::new(0));
    let mut out = [0u8; 16];
    let e = q.exec_on(SLOT_CMD, &clock, &enable_hca(), Pas::None, &mut out).unwrap_err();
    assert_eq!(e, CmdError::Timeout { opcode: 0x104, waited_ns: 5_000_000 });
    assert!(clock.0.get() <= 5_000_000 + 10_000, "gave up late: {} ns", clock.0.get());
    assert_eq!(Error::from(e), DeviceFault::CommandTimeout { opcode: 0x104 }.into());
    // Firmware still owns the slot: posting again is refused, the other slot still works.
    let busy = q.post(SLOT_CMD, &enable_hca(), Pas::None, 16);
    assert_eq!(busy, Err(CmdError::SlotBusy { slot: SLOT_CMD }));
    let fault = DeviceFault::CommandSlotBusy { slot: SLOT_CMD as u8 };
    assert_eq!(busy.map_err(Error::from), Err(fault.into()));
    assert_eq!(fault.errno(), Errno::EBUSY);
    assert_eq!(fw.log.lock().unwrap().len(), 1);
}

#[test]
fn a_silent_doorbell_times_out_too() {
    let (fw, bar, dma) = FakeFw::new(|_| Reply::ok(vec![]));
    fw.silent.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
    let mut out = [0u8; 16];
    let r = q.exec_on(SLOT_CMD, &Ticks(Cell::new(0)), &enable_hca(), Pas::None, &mut out);
    assert!(matches!(r, Err(CmdError::Timeout { opcode: 0x104, .. })));
}

#[test]
fn timeout_with_a_health_syndrome_reports_the_syndrome() {
    let (_fw, bar, dma) = FakeFw::new(|_| Reply { hang: true, ..Default::default() });
    // synd 0x10 (high temperature), ext 0x0042.
    bar.write_u32(0x23c, u32::from_be_bytes([0, 0x10, 0x00, 0x42]).to_be());
    let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
    let mut out = [0u8; 16];
    let e =
        q.exec_on(SLOT_CMD, &Ticks(Cell::new(0)), &enable_hca(), Pas::None, &mut out).unwrap_err();
    match e {
        CmdError::Health { opcode: 0x104, health } => {
            assert_eq!(health.syndrome, crate::control::init_seg::HealthSyndrome::HighTemperature);
            assert_eq!(health.ext_syndrome, 0x42);
        }
        other => panic!("expected a health error, got {other:?}"),
    }
    let fault = DeviceFault::Unhealthy { syndrome: 0x10, ext_syndrome: 0x42 };
    assert_eq!((Error::from(e), e.errno()), (fault.into(), Errno::EIO));
}

#[test]
fn oversized_messages_are_refused_before_posting() {
    let (fw, bar, dma) = FakeFw::new(|_| Reply::ok(vec![]));
    let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
    let head = [0u8; create_qp_in::SIZE];
    let pas = Pas::Linear { base: 0, step: 4096, count: 1000 };
    let e = q.post(SLOT_CMD, &head, pas, 16).unwrap_err();
    assert!(matches!(e, CmdError::TooLarge { len: 8272, max: 2064, .. }), "{e:?}");
    let e = q.post(SLOT_CMD, &head, Pas::None, 16 + 10 * 512).unwrap_err();
    assert!(matches!(e, CmdError::TooLarge { .. }));
    assert!(fw.log.lock().unwrap().is_empty());
}

#[test]
fn unusable_geometry_is_refused_and_nothing_leaks() {
    let (fw, bar, dma) = FakeFw::new(|_| Reply::ok(vec![]));
    fw.set_geometry(&bar, 0, 6); // a single entry: no page slot
    assert_eq!(
        CmdQueue::new(&bar, &*dma, cfg()).err(),
        Some(CmdError::BadGeometry { log_size: 0, log_stride: 6 })
    );
    fw.set_geometry(&bar, 5, 5); // 32-byte entries
    assert!(CmdQueue::new(&bar, &*dma, cfg()).is_err());
    assert_eq!(dma.live_blocks(), 0);
}

#[test]
fn tokens_advance_and_skip_zero() {
    let (fw, bar, dma) = FakeFw::new(|_| Reply::ok(vec![]));
    let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
    q.token = 254;
    let clock = Ticks(Cell::new(0));
    let mut out = vec![0u8; 600];
    for _ in 0..3 {
        q.exec_on(SLOT_CMD, &clock, &enable_hca(), Pas::None, &mut out).unwrap();
    }
    assert_eq!(q.token, 2);
    assert!(fw.faults.lock().unwrap().is_empty(), "{:?}", fw.faults.lock().unwrap());
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any input and output length within the mailboxes crosses intact, with the chain
        /// stamped correctly (the fake firmware checks block numbers and tokens).
        #[test]
        fn messages_of_any_length_cross_the_mailboxes(
            head_len in 8usize..600,
            n_pas in 0usize..200,
            outlen in 16usize..4000,
            seed: u8,
        ) {
            let (fw, bar, dma) = FakeFw::new(|s| {
                let body: Vec<u8> = (0..s.outlen - 8).map(|i| (i * 7 % 253) as u8).collect();
                Reply::ok(body)
            });
            let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
            let head: Vec<u8> = (0..head_len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
            let pas = Pas::Linear { base: 0x1000 * seed as u64, step: 8, count: n_pas };
            let mut out = vec![0u8; outlen];
            let r = q.exec_on(SLOT_CMD, &Ticks(Cell::new(0)), &head, pas, &mut out);
            let fits = head_len + 8 * n_pas <= q.max_in() && outlen <= q.max_out();
            prop_assert_eq!(r.is_ok(), fits, "{:?}", r);
            if fits {
                let seen = fw.log.lock().unwrap()[0].clone();
                prop_assert_eq!(&seen.input[..head_len], &head[..]);
                for i in 0..n_pas {
                    let at = head_len + 8 * i;
                    let v = u64::from_be_bytes(seen.input[at..at + 8].try_into().unwrap());
                    prop_assert_eq!(v, 0x1000 * seed as u64 + 8 * i as u64);
                }
                for (i, b) in out[8..].iter().enumerate() {
                    prop_assert_eq!(*b, (i * 7 % 253) as u8);
                }
                prop_assert!(fw.faults.lock().unwrap().is_empty());
            }
        }
    }
}

#[test]
fn a_completion_carrying_another_token_is_a_typed_error() {
    let (_fw, bar, dma) = FakeFw::new(|_| Reply { token: Some(0x77), ..Default::default() });
    let mut q = CmdQueue::new(&bar, &*dma, cfg()).unwrap();
    let mut out = vec![0u8; 600]; // one output mailbox
    let e =
        q.exec_on(SLOT_CMD, &Ticks(Cell::new(0)), &enable_hca(), Pas::None, &mut out).unwrap_err();
    assert_eq!(e, CmdError::TokenMismatch { opcode: 0x104, expected: 1, found: 0x77 });
    let fault = DeviceFault::TokenMismatch { opcode: 0x104, expected: 1, found: 0x77 };
    assert_eq!((Error::from(e), e.errno()), (fault.into(), Errno::EIO));
}

//! Event queues the firmware writes: command completion, page request and completion events.
//!
//! An EQ is a ring of 64-byte EQEs (`struct mlx5_ifc_eqe_bits`) in host pages listed by
//! `CREATE_EQ`'s PAS (each `4096 << eqc.log_page_size` bytes). Entry *n* lives at byte
//! `64 * (n mod size)`; its owner bit is `(n >> log_eq_size) & 1`, so the driver, which
//! initialized every owner bit to 1 (kernel `eq.c` `init_eq_buf`), sees entry *n* as new when
//! the bit equals its own pass parity (kernel `next_eqe_sw`). The model writes the body, then,
//! after a release fence, the last byte holding the owner bit.
//!
//! The driver reports its consumer index through the EQ doorbell of the EQ's UAR page
//! (`eqn << 24 | ci`, big-endian, at 0x40 to arm or 0x48 to update only; kernel
//! `core/lib/eq.h` `MLX5_EQ_DOORBEL_OFFSET`, `eq.c` `eq_update_ci`). Once it has, an event that
//! would overwrite an entry the driver has not consumed is an overrun: the model counts it and
//! drops the event. Before the first doorbell the ring is written without that check (a
//! driver that only polls never rings).

use std::sync::atomic::{fence, Ordering};

use rdma_pmd::BusAddr;
use rdma_pmd_hal::mem::BusMemory;

use super::codes::EventType;
use super::ifc::eqe;
use super::FwError;

/// The firmware's event queues by EQ number, under their own (leaf) lock.
pub(crate) type EqTable = std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<u8, Eq>>>;

/// EQ doorbell offset in a UAR page: update the consumer index and arm.
pub const DOORBELL_ARM: usize = 0x40;
/// EQ doorbell offset in a UAR page: update the consumer index only.
pub const DOORBELL_UPDATE: usize = 0x48;

/// One event queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eq {
    /// EQ number.
    pub eqn: u8,
    /// log2 of the number of EQEs.
    pub log_size: u8,
    /// log2 of the bytes of each PAS page.
    pub page_shift: u32,
    /// Bus addresses of the pages.
    pub pages: Vec<u64>,
    /// UAR index the EQ was created with.
    pub uar: u32,
    /// `event_bitmask` as four 64-bit words (bit *t* of word *t / 64* = event type *t*).
    pub mask: [u64; 4],
    /// EQEs written so far.
    pub producer: u32,
    /// The consumer index the driver last reported (24 bits), once it has.
    pub consumer: Option<u32>,
    /// Whether the last doorbell armed the EQ (and no interrupt has fired since).
    pub armed: bool,
    /// The MSI-X vector the EQ interrupts (`eqc.intr`).
    pub intr: u16,
    /// Events dropped because the ring was full.
    pub overruns: u64,
}

impl Eq {
    /// Whether the EQ asked for events of type `t`.
    pub fn wants(&self, t: EventType) -> bool {
        let t = u8::from(t) as usize;
        self.mask[t / 64] >> (t % 64) & 1 == 1
    }

    fn slot(&self, n: u32) -> u64 {
        let off = (u64::from(n) & ((1 << self.log_size) - 1)) * 64;
        let page = (off >> self.page_shift) as usize;
        self.pages[page] + (off & ((1 << self.page_shift) - 1))
    }

    /// After an EQE was written: the vector to raise if the EQ is armed, which leaves it
    /// fired (disarmed) until the driver arms it again with a doorbell (PRM "EQ arming";
    /// kernel `eq.c` `eq_update_ci(eq, 1)` after each interrupt).
    pub fn signal(&mut self) -> Option<u16> {
        std::mem::take(&mut self.armed).then_some(self.intr)
    }

    /// Write one EQE of type `t` with `data` (the 28-byte `event_data`).
    pub fn post(&mut self, dma: &dyn BusMemory, t: EventType, data: &[u8]) -> Result<(), FwError> {
        self.post_sub(dma, t, 0, data)
    }

    /// [`post`](Self::post) with an `event_sub_type`.
    pub fn post_sub(
        &mut self,
        dma: &dyn BusMemory,
        t: EventType,
        sub: u8,
        data: &[u8],
    ) -> Result<(), FwError> {
        if let Some(ci) = self.consumer {
            let outstanding = self.producer.wrapping_sub(ci) & 0x00ff_ffff;
            if outstanding >= 1 << self.log_size {
                self.overruns += 1;
                return Err(FwError::EqOverrun);
            }
        }
        let mut e = [0u8; eqe::SIZE];
        eqe::EVENT_TYPE.set(&mut e, u64::from(u8::from(t)));
        eqe::EVENT_SUB_TYPE.set(&mut e, u64::from(sub));
        let d = eqe::EVENT_DATA;
        e[d.byte()..d.byte() + data.len().min(d.bytes())]
            .copy_from_slice(&data[..data.len().min(d.bytes())]);
        let owner = (self.producer >> self.log_size) & 1;
        eqe::OWNER.set(&mut e, u64::from(owner));
        let at = BusAddr(self.slot(self.producer));
        let last = eqe::SIZE - 1;
        let ok = dma.write(at, &e[..last]);
        // Orders the EQE body before the byte holding its owner bit.
        fence(Ordering::Release);
        let ok = ok && dma.write(at.add(last as u64), &e[last..]);
        self.producer = self.producer.wrapping_add(1);
        if ok {
            Ok(())
        } else {
            Err(FwError::DmaFault)
        }
    }
}

/// Build the 28-byte event data of a command completion for the slots in `vector`.
pub fn cmd_event(vector: u32) -> [u8; 28] {
    let mut d = [0u8; 28];
    super::ifc::cmd_inter_comp_event::COMMAND_COMPLETION_VECTOR.set(&mut d, u64::from(vector));
    d
}

/// Build the 28-byte event data of a completion event for CQ `cqn` (`comp_event.cq_number`;
/// kernel `struct mlx5_eqe_comp`, read by `mlx5_eq_comp_int`).
pub fn comp_event(cqn: u32) -> [u8; 28] {
    let mut d = [0u8; 28];
    super::ifc::comp_event::CQ_NUMBER.set(&mut d, u64::from(cqn));
    d
}

/// Build the 28-byte event data of a CQ error on CQ `cqn` (`cq_error`; kernel
/// `struct mlx5_eqe_cq_err`).
pub fn cq_error_event(cqn: u32, syndrome: u8) -> [u8; 28] {
    use super::ifc::cq_error as c;
    let mut d = [0u8; 28];
    c::CQN.set(&mut d, u64::from(cqn));
    c::SYNDROME.set(&mut d, u64::from(syndrome));
    d
}

/// Build the 28-byte event data of a port state change of port `port`
/// (`port_state_change_event.port_num`; kernel `struct mlx5_eqe_port_state`, `port >> 4`).
pub fn port_event(port: u8) -> [u8; 28] {
    let mut d = [0u8; 28];
    super::ifc::port_state_change_event::PORT_NUM.set(&mut d, u64::from(port));
    d
}

/// Build the 28-byte event data of a page request for `num_pages` (negative: pages offered).
pub fn page_event(function_id: u16, num_pages: i32) -> [u8; 28] {
    use super::ifc::pages_req_event as p;
    let mut d = [0u8; 28];
    p::FUNCTION_ID.set(&mut d, u64::from(function_id));
    p::NUM_PAGES.set(&mut d, u64::from(num_pages as u32));
    d
}

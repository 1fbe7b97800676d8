//! Event queues: where firmware reports page requests, command completions and CQ events.
//!
//! An EQ is a ring of 64-byte entries (`struct mlx5_eqe`, kernel `include/linux/mlx5/device.h`):
//! `type` at byte 1, `sub_type` at 3, 28 bytes of event data at 32..60, `owner` at 63. Firmware
//! writes entry `i` with an owner bit that flips on each pass over the ring; the entry is new
//! when `owner & 1 == (ci >> log_size) & 1` (kernel `eq.c` `next_eqe_sw`, rdma-core
//! `mlx5_vfio.c` `mlx5_eq_get_eqe`). Entries start with owner = 1, so nothing is valid on the
//! first pass until firmware writes it. The consumer index goes back to firmware through the
//! EQ doorbell of a UAR page: offset `0x40` (and re-arm) or `0x48` (update only), value
//! `eqn << 24 | ci[23:0]`, big-endian.

use rdma_pmd_hal::{barrier, Dma, DmaBuf, Mmio};

use crate::layout::be;

/// Size of an EQE.
pub const EQE_SIZE: usize = 64;
/// Offset of the EQ doorbell (arm) in a UAR page (`MLX5_EQ_DOORBEL_OFFSET`).
pub const EQ_DOORBELL_ARM: usize = 0x40;
/// Offset of the EQ doorbell without arming.
pub const EQ_DOORBELL_UPDATE: usize = 0x48;
/// Initial owner value of every entry (`MLX5_EQE_OWNER_INIT_VAL`).
const OWNER_INIT: u8 = 1;

/// Event types this driver handles (`enum mlx5_event`, kernel `include/linux/mlx5/device.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// 0x00: a CQ completion event.
    Completion,
    /// 0x01: the QP migrated to its alternate path.
    PathMig,
    /// 0x02: communication established (a packet arrived on a QP in RTR).
    CommEst,
    /// 0x03: the send queue drained (SQD).
    SqDrained,
    /// 0x04: a CQ overran or saw an access violation.
    CqError,
    /// 0x05: a work queue hit a catastrophic error (the QP is in error).
    WqCatasError,
    /// 0x07: path migration failed.
    PathMigFailed,
    /// 0x09: port state changed.
    PortChange,
    /// 0x0a: command completion.
    Command,
    /// 0x0b: firmware asks for (or returns) pages.
    PageRequest,
    /// 0x10: a work queue saw an invalid request (the QP is in error).
    WqInvalReqError,
    /// 0x11: a work queue saw a local access error (the QP is in error).
    WqAccessError,
    /// 0x12: a shared receive queue hit a catastrophic error.
    SrqCatasError,
    /// 0x13: the last WQE of an SRQ-attached QP in error was reached.
    SrqLastWqe,
    /// 0x14: an SRQ fell below its limit.
    SrqRqLimit,
    /// Anything else.
    Unknown(u8),
}

/// Every named type with its number, the one table both directions read.
const EVENT_TYPES: [(EventType, u8); 15] = [
    (EventType::Completion, 0x00),
    (EventType::PathMig, 0x01),
    (EventType::CommEst, 0x02),
    (EventType::SqDrained, 0x03),
    (EventType::CqError, 0x04),
    (EventType::WqCatasError, 0x05),
    (EventType::PathMigFailed, 0x07),
    (EventType::PortChange, 0x09),
    (EventType::Command, 0x0a),
    (EventType::PageRequest, 0x0b),
    (EventType::WqInvalReqError, 0x10),
    (EventType::WqAccessError, 0x11),
    (EventType::SrqCatasError, 0x12),
    (EventType::SrqLastWqe, 0x13),
    (EventType::SrqRqLimit, 0x14),
];

impl From<u8> for EventType {
    fn from(v: u8) -> Self {
        EVENT_TYPES.iter().find(|(_, n)| *n == v).map_or(EventType::Unknown(v), |(t, _)| *t)
    }
}

impl EventType {
    /// The raw type number (its bit in `create_eq_in.event_bitmask`).
    pub fn raw(self) -> u8 {
        match self {
            EventType::Unknown(v) => v,
            t => EVENT_TYPES.iter().find(|(e, _)| *e == t).map_or(0xff, |(_, n)| *n),
        }
    }

    /// Its bit in the first word of `create_eq_in.event_bitmask`.
    pub fn bit(self) -> u64 {
        1u64.checked_shl(self.raw().into()).unwrap_or(0)
    }
}

/// The asynchronous EQ's subscription: page requests and command completions (the kernel has
/// an EQ of its own for each) and `MLX5_ASYNC_EVENT_MASK` of the kernel's `eq.c`: path
/// migration, communication established, SQ drained, CQ error, work queue catastrophic,
/// invalid request and access errors, port change, SRQ catastrophic, last WQE and limit. The
/// capability-dependent extras of `gather_async_events_mask` (vport change, module, PPS,
/// temperature, tracer, ...) are left out: this driver has nothing to do with them.
pub const ASYNC_EVENTS: [EventType; 14] = [
    EventType::PageRequest,
    EventType::Command,
    EventType::PathMig,
    EventType::CommEst,
    EventType::SqDrained,
    EventType::CqError,
    EventType::WqCatasError,
    EventType::PathMigFailed,
    EventType::WqInvalReqError,
    EventType::WqAccessError,
    EventType::PortChange,
    EventType::SrqCatasError,
    EventType::SrqLastWqe,
    EventType::SrqRqLimit,
];

/// [`ASYNC_EVENTS`] as the first word of `create_eq_in.event_bitmask`.
pub fn async_event_mask() -> u64 {
    ASYNC_EVENTS.iter().fold(0, |m, t| m | t.bit())
}

/// `mlx5_eqe_page_req.ec_function`: the request asks for every page of the function back
/// (`RELEASE_ALL_PAGES_MASK`, kernel `pagealloc.c`; only with `cmd_hca_cap.release_all_pages`).
pub const RELEASE_ALL_PAGES: u16 = 0x4000;
/// `mlx5_eqe_page_req.ec_function`: the pages are for the embedded CPU function.
pub const EC_FUNCTION: u16 = 0x8000;

/// Which kind of queue a work queue event names (`MLX5_EVENT_QUEUE_TYPE_*`, device.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueKind {
    /// 0: a QP (its number is the QPN).
    Qp,
    /// 1: an RQ object.
    Rq,
    /// 2: an SQ object.
    Sq,
    /// 6: a DCT.
    Dct,
    /// Another value.
    Unknown(u8),
}

impl From<u8> for QueueKind {
    fn from(v: u8) -> Self {
        match v {
            0 => QueueKind::Qp,
            1 => QueueKind::Rq,
            2 => QueueKind::Sq,
            6 => QueueKind::Dct,
            v => QueueKind::Unknown(v),
        }
    }
}

/// A decoded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `struct mlx5_eqe_page_req`: firmware wants `num_pages` more pages for `func_id`, or, when
    /// negative, wants to give that many back.
    PageRequest {
        /// Function the pages are for.
        func_id: u16,
        /// Pages wanted (positive) or offered back (negative).
        num_pages: i32,
        /// `ec_function` bits: [`RELEASE_ALL_PAGES`], [`EC_FUNCTION`].
        ec_function: u16,
    },
    /// `struct mlx5_eqe_cmd`: the commands whose slots are set in `vector` completed.
    Command {
        /// Completed slots.
        vector: u32,
    },
    /// `struct mlx5_eqe_comp`: CQ `cqn` has a completion.
    Completion {
        /// The CQ.
        cqn: u32,
    },
    /// Port state change (`sub_type` is the new state).
    PortChange {
        /// `sub_type`.
        sub_type: u8,
        /// Port number (`port` in `mlx5_eqe_port_state`, bits 7:4 of data byte 8).
        port: u8,
    },
    /// `struct mlx5_eqe_cq_err`: CQ `cqn` overran (syndrome 1) or saw an access violation (2).
    CqError {
        /// The CQ (24 bits of data bytes 0..4).
        cqn: u32,
        /// `syndrome` (data byte 11).
        syndrome: u8,
    },
    /// `struct mlx5_eqe_qp_srq`: an event of a work queue (QP or SRQ) by type.
    Queue {
        /// Which event ([`EventType::WqCatasError`], [`EventType::CommEst`], ...).
        ty: EventType,
        /// What `num` names (data byte 20).
        kind: QueueKind,
        /// The QP or SRQ number (24 bits of data bytes 24..28).
        num: u32,
    },
    /// Anything else, by type.
    Other {
        /// The type.
        ty: u8,
    },
}

/// Decode a copied-out EQE.
pub fn decode(eqe: &[u8; EQE_SIZE]) -> Event {
    let data = &eqe[32..60];
    let be32 = |o: usize| be::get32(data, o);
    let ty = EventType::from(eqe[1]);
    match ty {
        EventType::PageRequest => Event::PageRequest {
            func_id: be::get16(data, 2),
            num_pages: be32(4) as i32,
            ec_function: be::get16(data, 0),
        },
        EventType::Command => Event::Command { vector: be32(0) },
        EventType::Completion => Event::Completion { cqn: be32(24) & 0xff_ffff },
        EventType::PortChange => Event::PortChange { sub_type: eqe[3], port: data[8] >> 4 },
        EventType::CqError => Event::CqError { cqn: be32(0) & 0xff_ffff, syndrome: data[11] },
        EventType::PathMig
        | EventType::CommEst
        | EventType::SqDrained
        | EventType::WqCatasError
        | EventType::PathMigFailed
        | EventType::WqInvalReqError
        | EventType::WqAccessError
        | EventType::SrqCatasError
        | EventType::SrqLastWqe
        | EventType::SrqRqLimit => {
            Event::Queue { ty, kind: QueueKind::from(data[20]), num: be32(24) & 0xff_ffff }
        }
        EventType::Unknown(ty) => Event::Other { ty },
    }
}

/// One event queue: its ring, number, consumer index and doorbell.
#[derive(Debug)]
pub struct EventQueue {
    buf: DmaBuf,
    log_size: u8,
    eqn: u8,
    ci: u32,
    doorbell: usize,
}

impl EventQueue {
    /// Allocate a ring of `1 << log_size` entries with every owner bit at its initial value.
    /// The EQ number is set by [`created`](Self::created) once `CREATE_EQ` returned it.
    pub fn alloc(dma: &dyn Dma, log_size: u8) -> Result<Self, rdma_pmd_hal::HalError> {
        let len = (EQE_SIZE << log_size).max(4096);
        let buf = dma.alloc(len, 4096)?;
        for i in 0..1usize << log_size {
            buf.write_bytes(i * EQE_SIZE + 63, &[OWNER_INIT]);
        }
        Ok(EventQueue { buf, log_size, eqn: 0, ci: 0, doorbell: 0 })
    }

    /// Record the number firmware gave and the UAR page (byte offset in BAR0) whose doorbell
    /// the EQ uses, then arm it.
    pub fn created(&mut self, bar: &dyn Mmio, eqn: u8, uar_offset: usize) {
        self.eqn = eqn;
        self.doorbell = uar_offset;
        self.update_ci(bar, true);
    }

    /// The EQ number.
    pub fn eqn(&self) -> u8 {
        self.eqn
    }

    /// log2 of the number of entries.
    pub fn log_size(&self) -> u8 {
        self.log_size
    }

    /// Bus address of the ring (page-contiguous; `pas` lists its 4 KiB pages).
    pub fn buf(&self) -> &DmaBuf {
        &self.buf
    }

    /// Number of 4 KiB pages of the ring.
    pub fn pages(&self) -> usize {
        self.buf.len().div_ceil(4096)
    }

    /// Copy out the next new entry, if any, and advance the consumer index.
    pub fn next_eqe(&mut self) -> Option<[u8; EQE_SIZE]> {
        let nent = 1u32 << self.log_size;
        let at = (self.ci & (nent - 1)) as usize * EQE_SIZE;
        let mut owner = [0u8; 1];
        self.buf.read_bytes(at + 63, &mut owner);
        let pass = u8::from(self.ci & nent != 0);
        if owner[0] & 1 != pass {
            return None;
        }
        // The body is read only after the owner byte said it is new.
        barrier::from_device();
        let mut e = [0u8; EQE_SIZE];
        self.buf.read_bytes(at, &mut e);
        self.ci = self.ci.wrapping_add(1);
        Some(e)
    }

    /// Tell firmware the consumer index (and re-arm if `arm`).
    pub fn update_ci(&self, bar: &dyn Mmio, arm: bool) {
        let off = self.doorbell + if arm { EQ_DOORBELL_ARM } else { EQ_DOORBELL_UPDATE };
        // Entries consumed are done with before firmware may overwrite them.
        barrier::to_device();
        bar.write_be32(off, (self.ci & 0xff_ffff) | (self.eqn as u32) << 24);
    }

    /// Leave the ring to firmware for good: it may still write it (`DESTROY_EQ` failed, or
    /// which EQ it names is unknown), so the memory is never given back. `DmaBuf` has no
    /// destructor; this names the intent where a ring is dropped on purpose.
    pub(crate) fn keep(self) {}

    /// Give the ring back. Only after `DESTROY_EQ` succeeded (or before `CREATE_EQ`).
    pub(crate) fn release(self, dma: &dyn Dma) {
        // SAFETY: the caller destroyed the EQ (or never created it): firmware no longer writes
        // the ring.
        unsafe { dma.free(self.buf) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_pmd_hal::mem::{HeapDma, MemBar};

    fn eqe(ty: u8, data: &[u8], owner: u8) -> [u8; EQE_SIZE] {
        let mut e = [0u8; EQE_SIZE];
        e[1] = ty;
        e[32..32 + data.len()].copy_from_slice(data);
        e[63] = owner;
        e
    }

    #[test]
    fn decodes_device_h_event_layouts() {
        // mlx5_eqe_page_req: ec_function, func_id = 0, num_pages = -3.
        let e = eqe(0x0b, &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfd], 0);
        assert_eq!(decode(&e), Event::PageRequest { func_id: 0, num_pages: -3, ec_function: 0 });
        let e = eqe(0x0a, &[0, 0, 0, 0b11], 0);
        assert_eq!(decode(&e), Event::Command { vector: 3 });
        let mut d = [0u8; 28];
        d[24..28].copy_from_slice(&[0, 0, 0x12, 0x34]);
        assert_eq!(decode(&eqe(0x00, &d, 0)), Event::Completion { cqn: 0x1234 });
        assert_eq!(decode(&eqe(0x3f, &[], 0)), Event::Other { ty: 0x3f });
    }

    #[test]
    fn decodes_the_error_events_of_device_h() {
        // mlx5_eqe_cq_err: cqn (24 bits) in data bytes 0..4, syndrome at byte 11.
        let mut d = [0u8; 28];
        d[0..4].copy_from_slice(&[0xaa, 0x00, 0x01, 0x07]);
        d[11] = 1;
        assert_eq!(decode(&eqe(0x04, &d, 0)), Event::CqError { cqn: 0x107, syndrome: 1 });
        // mlx5_eqe_qp_srq: type at data byte 20, qp_srq_n (24 bits) at 24..28.
        let mut d = [0u8; 28];
        d[20] = 0;
        d[24..28].copy_from_slice(&[0xff, 0x00, 0x00, 0x99]);
        let q = |ty| Event::Queue { ty, kind: QueueKind::Qp, num: 0x99 };
        assert_eq!(decode(&eqe(0x05, &d, 0)), q(EventType::WqCatasError));
        assert_eq!(decode(&eqe(0x10, &d, 0)), q(EventType::WqInvalReqError));
        assert_eq!(decode(&eqe(0x11, &d, 0)), q(EventType::WqAccessError));
        assert_eq!(decode(&eqe(0x02, &d, 0)), q(EventType::CommEst));
        d[20] = 2;
        let sq = Event::Queue { ty: EventType::WqCatasError, kind: QueueKind::Sq, num: 0x99 };
        assert_eq!(decode(&eqe(0x05, &d, 0)), sq);
        // mlx5_eqe_page_req.ec_function carries RELEASE_ALL_PAGES_MASK.
        let e = eqe(0x0b, &[0x40, 0, 0, 0, 0, 0, 0, 0], 0);
        let all = Event::PageRequest { func_id: 0, num_pages: 0, ec_function: RELEASE_ALL_PAGES };
        assert_eq!(decode(&e), all);
    }

    #[test]
    fn the_async_mask_is_the_kernels_plus_pages_and_commands() {
        // MLX5_ASYNC_EVENT_MASK (eq.c): types 0x01 0x02 0x03 0x04 0x05 0x07 0x09 0x10 0x11
        // 0x12 0x13 0x14; plus MLX5_EVENT_TYPE_CMD (0x0a) and _PAGE_REQUEST (0x0b).
        let kernel: u64 =
            [0x01u32, 0x02, 0x03, 0x04, 0x05, 0x07, 0x09, 0x10, 0x11, 0x12, 0x13, 0x14]
                .iter()
                .fold(0, |m, t| m | 1 << t);
        assert_eq!(async_event_mask(), kernel | 1 << 0x0a | 1 << 0x0b);
        assert_eq!(async_event_mask() & 0xe00, 0xe00, "the old three are still there");
        for (t, n) in EVENT_TYPES {
            assert_eq!((EventType::from(n), t.raw()), (t, n));
        }
    }

    #[test]
    fn ownership_flips_each_pass_and_the_doorbell_carries_eqn_and_ci() {
        let dma = HeapDma::new();
        let bar = MemBar::new(0x3000);
        let mut eq = EventQueue::alloc(&*dma, 1).unwrap(); // two entries
        eq.created(&bar, 7, 0x2000);
        assert!(eq.next_eqe().is_none(), "initial owner 1 means not yet written on pass 0");
        // Firmware writes entry 0 and 1 with owner 0 (pass 0).
        dma.write(eq.buf().bus(), &eqe(0x0b, &[0, 0, 0, 1, 0, 0, 0, 2], 0));
        dma.write(eq.buf().bus().add(64), &eqe(0x0a, &[0, 0, 0, 1], 0));
        assert_eq!(
            decode(&eq.next_eqe().unwrap()),
            Event::PageRequest { func_id: 1, num_pages: 2, ec_function: 0 }
        );
        assert_eq!(decode(&eq.next_eqe().unwrap()), Event::Command { vector: 1 });
        assert!(eq.next_eqe().is_none(), "entry 0 still carries pass-0 owner");
        // Pass 1: owner 1 is new.
        dma.write(eq.buf().bus(), &eqe(0x0a, &[0, 0, 0, 2], 1));
        assert_eq!(decode(&eq.next_eqe().unwrap()), Event::Command { vector: 2 });
        eq.update_ci(&bar, false);
        let mut b = [0u8; 4];
        bar.mem().read_bytes(0x2048, &mut b);
        assert_eq!(b, [7, 0, 0, 3]);
        bar.mem().read_bytes(0x2040, &mut b);
        assert_eq!(b, [7, 0, 0, 0], "armed at creation with ci 0");
        eq.release(&*dma);
        assert_eq!(dma.live_blocks(), 0);
    }
}

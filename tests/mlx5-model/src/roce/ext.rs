//! The extension transport headers that follow the BTH (IBTA vol 1 §9.3, §9.4, §9.5; the
//! kernel's `rxe_hdr.h`: `struct rxe_reth`, `rxe_aeth`, `rxe_atmeth`, `rxe_atmack`,
//! `rxe_immdt`, `rxe_ieth`, `rxe_deth`; `include/rdma/ib_pack.h`).
//!
//! All big-endian:
//!
//! | header | bytes | layout |
//! |---|---|---|
//! | RETH | 16 | VA 0..8, R_Key 8..12, DMA length 12..16 |
//! | AETH | 4 | syndrome 0, MSN 1..4 (24 bits) |
//! | AtomicETH | 28 | VA 0..8, R_Key 8..12, swap (or add) data 12..20, compare data 20..28 |
//! | AtomicAckETH | 8 | original remote data 0..8 |
//! | ImmDt | 4 | immediate data |
//! | IETH | 4 | R_Key to invalidate |
//! | DETH | 8 | Q_Key 0..4, reserved 4, source QP 5..8 (24 bits) |
//!
//! An AETH syndrome's bits 7:5 give its class (`AETH_TYPE_MASK`): 000 ACK (bits 4:0 the
//! credit count; rxe sends 0x1f, "invalid"/unlimited), 001 RNR NAK (bits 4:0 the timer
//! code), 011 NAK (bits 4:0 the code: 0 PSN sequence error, 1 invalid request, 2 remote
//! access error, 3 remote operational error, 4 invalid RD request); 010 is reserved.

use rdma_pmd::code_enum;

use super::bth::Headers;
use super::{need, Layer, Malformed};
use crate::be::{get32, get64, put32, put64};

/// Bytes of a RETH.
pub const RETH_LEN: usize = 16;
/// Bytes of an AETH.
pub const AETH_LEN: usize = 4;
/// Bytes of an AtomicETH.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Bytes of an AtomicAckETH.
pub const ATOMIC_ACK_LEN: usize = 8;
/// Bytes of an ImmDt.
pub const IMMDT_LEN: usize = 4;
/// Bytes of an IETH.
pub const IETH_LEN: usize = 4;
/// Bytes of a DETH.
pub const DETH_LEN: usize = 8;

/// RDMA extended transport header: where a WRITE or READ goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole message (2^31 at most, rxe `check_length`).
    pub dma_len: u32,
}

impl Reth {
    /// Read from the first 16 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Reth, Malformed> {
        need(b, RETH_LEN, Layer::Extension)?;
        Ok(Reth { va: get64(b, 0), rkey: get32(b, 8), dma_len: get32(b, 12) })
    }
    /// Write into the first 16 bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        put64(b, 0, self.va);
        put32(b, 8, self.rkey);
        put32(b, 12, self.dma_len);
    }
}

code_enum! {
    /// A NAK's code: syndrome bits 4:0 when bits 7:5 are 011 (`AETH_NAK_*`, rxe_hdr.h).
    NakCode: u8 {
        /// `AETH_NAK_PSN_SEQ_ERROR`: a PSN ahead of the expected one.
        PsnSequence = 0,
        /// `AETH_NAK_INVALID_REQ`.
        InvalidRequest = 1,
        /// `AETH_NAK_REM_ACC_ERR`: R_Key, bounds or rights.
        RemoteAccess = 2,
        /// `AETH_NAK_REM_OP_ERR`.
        RemoteOperational = 3,
        /// `AETH_NAK_INV_RD_REQ`.
        InvalidRdRequest = 4,
    }
}

/// An AETH syndrome by class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syndrome {
    /// ACK with a credit count (5 bits; 0x1f: not flow-controlled).
    Ack {
        /// Credit code.
        credits: u8,
    },
    /// RNR NAK with a timer code (5 bits).
    RnrNak {
        /// RNR NAK timer code.
        timer: u8,
    },
    /// NAK.
    Nak(NakCode),
    /// The reserved class 010, kept verbatim.
    Reserved(u8),
}

impl Syndrome {
    /// The class of a syndrome byte.
    pub fn from_byte(b: u8) -> Syndrome {
        let low = b & 0x1f;
        match b >> 5 {
            0 => Syndrome::Ack { credits: low },
            1 => Syndrome::RnrNak { timer: low },
            3 => Syndrome::Nak(NakCode::from(low)),
            _ => Syndrome::Reserved(b),
        }
    }
    /// The syndrome byte.
    pub fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(code) => 0x60 | (code.raw() & 0x1f),
            Syndrome::Reserved(b) => b,
        }
    }
}

/// ACK extended transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aeth {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// Read from the first 4 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Aeth, Malformed> {
        need(b, AETH_LEN, Layer::Extension)?;
        let w = get32(b, 0);
        Ok(Aeth { syndrome: Syndrome::from_byte((w >> 24) as u8), msn: w & 0x00ff_ffff })
    }
    /// Write into the first 4 bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, (u32::from(self.syndrome.to_byte()) << 24) | (self.msn & 0x00ff_ffff));
    }
}

/// Atomic extended transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicEth {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value (compare-and-swap) or addend (fetch-and-add).
    pub swap_add: u64,
    /// Compare value (compare-and-swap; ignored by fetch-and-add).
    pub compare: u64,
}

impl AtomicEth {
    /// Read from the first 28 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<AtomicEth, Malformed> {
        need(b, ATOMIC_ETH_LEN, Layer::Extension)?;
        Ok(AtomicEth {
            va: get64(b, 0),
            rkey: get32(b, 8),
            swap_add: get64(b, 12),
            compare: get64(b, 20),
        })
    }
    /// Write into the first 28 bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        put64(b, 0, self.va);
        put32(b, 8, self.rkey);
        put64(b, 12, self.swap_add);
        put64(b, 20, self.compare);
    }
}

/// Datagram extended transport header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deth {
    /// Queue key.
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

impl Deth {
    /// Read from the first 8 bytes of `b` (the reserved byte is ignored).
    pub fn parse(b: &[u8]) -> Result<Deth, Malformed> {
        need(b, DETH_LEN, Layer::Extension)?;
        Ok(Deth { qkey: get32(b, 0), src_qp: get32(b, 4) & 0x00ff_ffff })
    }
    /// Write into the first 8 bytes of `b` (reserved byte 0).
    pub fn emit(&self, b: &mut [u8]) {
        put32(b, 0, self.qkey);
        put32(b, 4, self.src_qp & 0x00ff_ffff);
    }
}

fn word(b: &[u8]) -> Result<u32, Malformed> {
    need(b, 4, Layer::Extension)?;
    Ok(get32(b, 0))
}

/// The extension headers of one packet, each present as the opcode's [`Headers`] say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtRepr {
    /// DETH (UD).
    pub deth: Option<Deth>,
    /// RETH (WRITE FIRST/ONLY, READ request).
    pub reth: Option<Reth>,
    /// AtomicETH (compare-and-swap, fetch-and-add).
    pub atomic_eth: Option<AtomicEth>,
    /// AETH (ACK, READ response FIRST/LAST/ONLY, atomic ACK).
    pub aeth: Option<Aeth>,
    /// AtomicAckETH: the original remote value.
    pub atomic_ack: Option<u64>,
    /// ImmDt (big-endian on the wire; kept as the 32-bit value).
    pub immdt: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtRepr {
    /// Parse the headers `h` names from the start of `b`, in wire order.
    pub fn parse(h: &Headers, b: &[u8]) -> Result<ExtRepr, Malformed> {
        need(b, h.len(), Layer::Extension)?;
        let mut off = 0;
        let mut take = |present: bool, n: usize| {
            let at = off;
            if present {
                off += n;
            }
            present.then(|| &b[at..at + n])
        };
        let deth = take(h.deth, DETH_LEN).map(Deth::parse).transpose()?;
        let reth = take(h.reth, RETH_LEN).map(Reth::parse).transpose()?;
        let atomic_eth = take(h.atomic_eth, ATOMIC_ETH_LEN).map(AtomicEth::parse).transpose()?;
        let aeth = take(h.aeth, AETH_LEN).map(Aeth::parse).transpose()?;
        let atomic_ack = take(h.atomic_ack, ATOMIC_ACK_LEN).map(|s| get64(s, 0));
        let immdt = take(h.immdt, IMMDT_LEN).map(word).transpose()?;
        let ieth = take(h.ieth, IETH_LEN).map(word).transpose()?;
        Ok(ExtRepr { deth, reth, atomic_eth, aeth, atomic_ack, immdt, ieth })
    }

    /// The [`Headers`] shape of the headers present (payload not set).
    pub fn shape(&self) -> Headers {
        Headers {
            deth: self.deth.is_some(),
            reth: self.reth.is_some(),
            atomic_eth: self.atomic_eth.is_some(),
            aeth: self.aeth.is_some(),
            atomic_ack: self.atomic_ack.is_some(),
            immdt: self.immdt.is_some(),
            ieth: self.ieth.is_some(),
            payload: false,
        }
    }

    /// Write the present headers in wire order from the start of `b`; returns the bytes
    /// written.
    pub fn emit(&self, b: &mut [u8]) -> usize {
        let mut off = 0;
        if let Some(d) = self.deth {
            d.emit(&mut b[off..]);
            off += DETH_LEN;
        }
        if let Some(r) = self.reth {
            r.emit(&mut b[off..]);
            off += RETH_LEN;
        }
        if let Some(a) = self.atomic_eth {
            a.emit(&mut b[off..]);
            off += ATOMIC_ETH_LEN;
        }
        if let Some(a) = self.aeth {
            a.emit(&mut b[off..]);
            off += AETH_LEN;
        }
        if let Some(v) = self.atomic_ack {
            put64(b, off, v);
            off += ATOMIC_ACK_LEN;
        }
        if let Some(v) = self.immdt {
            put32(b, off, v);
            off += IMMDT_LEN;
        }
        if let Some(v) = self.ieth {
            put32(b, off, v);
            off += IETH_LEN;
        }
        off
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes_by_class() {
        assert_eq!(Syndrome::from_byte(0x1f), Syndrome::Ack { credits: 31 });
        assert_eq!(Syndrome::from_byte(0x2e), Syndrome::RnrNak { timer: 14 });
        assert_eq!(Syndrome::from_byte(0x60), Syndrome::Nak(NakCode::PsnSequence));
        assert_eq!(Syndrome::from_byte(0x61), Syndrome::Nak(NakCode::InvalidRequest));
        assert_eq!(Syndrome::from_byte(0x62), Syndrome::Nak(NakCode::RemoteAccess));
        assert_eq!(Syndrome::from_byte(0x63), Syndrome::Nak(NakCode::RemoteOperational));
        assert_eq!(Syndrome::from_byte(0x6a), Syndrome::Nak(NakCode::Unknown(10)));
        assert_eq!(Syndrome::from_byte(0x41), Syndrome::Reserved(0x41));
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b);
        }
    }

    #[test]
    fn layouts_from_known_bytes() {
        let reth = [1, 2, 3, 4, 5, 6, 7, 8, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0x10, 0];
        let r = Reth::parse(&reth).unwrap();
        assert_eq!(r, Reth { va: 0x0102030405060708, rkey: 0xaabbccdd, dma_len: 4096 });
        let mut out = [0xa5; 16];
        r.emit(&mut out);
        assert_eq!(out, reth);

        let a = Aeth::parse(&[0x62, 0x00, 0x01, 0x02]).unwrap();
        assert_eq!(a, Aeth { syndrome: Syndrome::Nak(NakCode::RemoteAccess), msn: 0x102 });

        let mut at = [0u8; 28];
        at[..8].copy_from_slice(&0x1000u64.to_be_bytes());
        at[8..12].copy_from_slice(&7u32.to_be_bytes());
        at[12..20].copy_from_slice(&2u64.to_be_bytes());
        at[20..28].copy_from_slice(&1u64.to_be_bytes());
        let e = AtomicEth::parse(&at).unwrap();
        assert_eq!(e, AtomicEth { va: 0x1000, rkey: 7, swap_add: 2, compare: 1 });

        let d = Deth::parse(&[0x80, 0x01, 0x00, 0x00, 0xee, 0x00, 0x00, 0x01]).unwrap();
        assert_eq!(d, Deth { qkey: 0x8001_0000, src_qp: 1 });
        let mut out = [0xa5; 8];
        d.emit(&mut out);
        assert_eq!(out, [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01]);
    }

    #[test]
    fn ext_repr_round_trip_and_short_input() {
        let h = Headers { aeth: true, atomic_ack: true, ..Headers::default() };
        let e = ExtRepr {
            aeth: Some(Aeth { syndrome: Syndrome::Ack { credits: 0x1f }, msn: 9 }),
            atomic_ack: Some(0x1122_3344_5566_7788),
            ..ExtRepr::default()
        };
        let mut b = [0xa5u8; 12];
        assert_eq!(e.emit(&mut b), 12);
        assert_eq!(&b[..4], &[0x1f, 0, 0, 9]);
        assert_eq!(ExtRepr::parse(&h, &b).unwrap(), e);
        assert_eq!(e.shape(), h);
        assert_eq!(ExtRepr::parse(&h, &b[..11]), Err(Malformed::Truncated(Layer::Extension)));
    }
}

//! The scripted firmware: the one firmware fake of the unit tests of the command queue, the
//! bring-up sequence, the firmware-backed control seam and the hostile-firmware suite (the PRM
//! device model, with its own firmware, is a separate crate).
//!
//! [`FakeFw`] is the firmware side of the command interface. It answers the doorbell the way the PRM describes (reads the entry and the input mailbox
//! chain through the IOMMU of [`HeapDma`], writes the output inline and into the output chain,
//! returns ownership), and lets each test decide what a command answers. It checks what the
//! driver must get right on the wire (entry type, token stamped on every block, block numbers,
//! lengths) and records every command. What a command answers is the script's: [`script`]
//! runs the default one ([`State`]: pages lent, objects numbered, capabilities, injected
//! failures and hangs, and the EQ rings it writes events into with [`Ring`]); a test may
//! instead pass its own reply function to [`FakeFw::new`] (the hostile suite draws its answers
//! from a seed).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::vec::Vec;

use rdma_pmd::BusAddr;
use rdma_pmd_hal::mem::{BarHandler, BarMem, HeapDma, MemBar};

use crate::layout::cmd::{Block, Entry, BLOCK_DATA, BLOCK_SIZE, CMD_TYPE_PCI, ENTRY_SIZE, INLINE};

mod script;

pub use script::{default_state, example_caps, general_caps, page_request, script, Ring, State};

/// One command as firmware saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Opcode.
    pub opcode: u16,
    /// op_mod.
    pub op_mod: u16,
    /// The whole input message.
    pub input: Vec<u8>,
    /// Output length asked for.
    pub outlen: usize,
    /// Slot.
    pub slot: usize,
}

/// What a command answers.
#[derive(Clone, Debug, Default)]
pub struct Reply {
    /// Delivery status (0: delivered).
    pub delivery: u8,
    /// Command status.
    pub status: u8,
    /// Syndrome.
    pub syndrome: u32,
    /// Output bytes from offset 8 on (after status and syndrome); zero-padded to `outlen`.
    pub body: Vec<u8>,
    /// Leave the entry owned by hardware (a command that never completes).
    pub hang: bool,
    /// Answer with this token in the entry and in every output mailbox (firmware answering
    /// some other command, or scribbling over the control fields).
    pub token: Option<u8>,
}

impl Reply {
    /// Success with this output body (bytes from offset 8).
    pub fn ok(body: Vec<u8>) -> Self {
        Reply { body, ..Default::default() }
    }
    /// Failure with a command status.
    pub fn fail(status: u8, syndrome: u32) -> Self {
        Reply { status, syndrome, ..Default::default() }
    }
}

type Handler = Box<dyn FnMut(&Seen) -> Reply + Send>;

/// The scripted firmware.
pub struct FakeFw {
    dma: Arc<HeapDma>,
    handler: Mutex<Handler>,
    /// Every command answered (or hung), in order.
    pub log: Mutex<Vec<Seen>>,
    /// `cmdq_addr_l_sz[7:0]` firmware reports (log size << 4 | log stride).
    geometry: AtomicU32,
    /// Problems found in what the driver posted.
    pub faults: Mutex<Vec<String>>,
    /// Set to stop answering doorbells.
    pub silent: AtomicBool,
    /// Set to raise `initializing` (and keep it) once the queue address is written.
    pub init_after_addr: AtomicBool,
}

/// BAR0 size the tests use.
pub const BAR_SIZE: usize = 0x4000 + 64 * 4096;

impl FakeFw {
    /// A firmware answering with `handler`, its BAR (cmdif 5, fw 16.28.1002, 32 entries of
    /// 64 bytes) and the DMA space it reaches.
    pub fn new(
        handler: impl FnMut(&Seen) -> Reply + Send + 'static,
    ) -> (Arc<FakeFw>, MemBar, Arc<HeapDma>) {
        let dma = HeapDma::new();
        let fw = Arc::new(FakeFw {
            dma: dma.clone(),
            handler: Mutex::new(Box::new(handler)),
            log: Mutex::new(Vec::new()),
            geometry: AtomicU32::new(0x56),
            faults: Mutex::new(Vec::new()),
            silent: AtomicBool::new(false),
            init_after_addr: AtomicBool::new(false),
        });
        let bar = MemBar::with_handler(BAR_SIZE, fw.clone());
        let m = bar.mem();
        m.write_u32(0x0, 0x001c_0010u32.to_be());
        m.write_u32(0x4, 0x0005_03eau32.to_be());
        m.write_u32(0x14, 0x56u32.to_be());
        (fw, bar, dma)
    }

    /// Report a different queue geometry.
    pub fn set_geometry(&self, bar: &MemBar, log_size: u8, log_stride: u8) {
        let g = ((log_size as u32) << 4) | log_stride as u32;
        self.geometry.store(g, Ordering::SeqCst);
        bar.mem().write_u32(0x14, g.to_be());
    }

    /// Opcodes seen, in order.
    pub fn opcodes(&self) -> Vec<u16> {
        self.log.lock().unwrap().iter().map(|s| s.opcode).collect()
    }

    fn fault(&self, what: String) {
        self.faults.lock().unwrap().push(what);
    }

    fn read(&self, bus: u64, len: usize) -> Option<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.dma.read(BusAddr(bus), &mut v).then_some(v)
    }

    /// Follow a mailbox chain from `ptr`, checking block numbers and tokens; returns the
    /// blocks' bus addresses.
    fn chain(&self, mut ptr: u64, n: usize, token: u8, what: &str) -> Option<Vec<u64>> {
        let mut out = Vec::new();
        for i in 0..n {
            if ptr == 0 || !ptr.is_multiple_of(1024) {
                self.fault(format!("{what} block {i} at {ptr:#x}"));
                return None;
            }
            let raw = self.read(ptr, BLOCK_SIZE)?;
            let b = Block::new_checked(&raw[..]).unwrap();
            if b.block_num() != i as u32 || b.token() != token {
                self.fault(format!(
                    "{what} block {i}: block_num {} token {} (entry token {token})",
                    b.block_num(),
                    b.token()
                ));
            }
            out.push(ptr);
            ptr = b.next();
        }
        Some(out)
    }

    fn answer(&self, mem: &BarMem, slot: usize) {
        let addr = ((u32::from_be(mem.read_u32(0x10)) as u64) << 32)
            | (u32::from_be(mem.read_u32(0x14)) & 0xffff_f000) as u64;
        let stride = 1usize << (self.geometry.load(Ordering::SeqCst) & 0xf);
        let ent_bus = addr + (slot * stride) as u64;
        let Some(raw) = self.read(ent_bus, ENTRY_SIZE) else {
            return self.fault(format!("entry {slot} at {ent_bus:#x} unreachable"));
        };
        let e = Entry::new_checked(&raw[..]).unwrap();
        if e.cmd_type() != CMD_TYPE_PCI || !e.hw_owned() {
            self.fault(format!("entry {slot}: type {} owned {}", e.cmd_type(), e.hw_owned()));
        }
        let (inlen, outlen, token) = (e.inlen() as usize, e.outlen() as usize, e.token());
        let nin = inlen.saturating_sub(INLINE).div_ceil(BLOCK_DATA);
        let nout = outlen.saturating_sub(INLINE).div_ceil(BLOCK_DATA);
        let mut input = e.inline_in().to_vec();
        let Some(inb) = self.chain(e.in_ptr(), nin, token, "input") else { return };
        for b in &inb {
            input.extend_from_slice(&self.read(*b, BLOCK_DATA).unwrap());
        }
        input.truncate(inlen);
        let Some(outb) = self.chain(e.out_ptr(), nout, token, "output") else { return };
        let seen = Seen {
            opcode: u16::from_be_bytes([input[0], input[1]]),
            op_mod: u16::from_be_bytes([input[6], input[7]]),
            input,
            outlen,
            slot,
        };
        let reply = (self.handler.lock().unwrap())(&seen);
        self.log.lock().unwrap().push(seen);
        if reply.hang {
            return;
        }
        let mut out = vec![0u8; outlen.max(16)];
        out[0] = reply.status;
        out[4..8].copy_from_slice(&reply.syndrome.to_be_bytes());
        let n = reply.body.len().min(out.len() - 8);
        out[8..8 + n].copy_from_slice(&reply.body[..n]);
        self.dma.write(BusAddr(ent_bus + 32), &out[..16]);
        for (i, b) in outb.iter().enumerate() {
            let from = INLINE + i * BLOCK_DATA;
            let to = (from + BLOCK_DATA).min(outlen);
            if from < to {
                self.dma.write(BusAddr(*b), &out[from..to]);
            }
        }
        if let Some(t) = reply.token {
            self.dma.write(BusAddr(ent_bus + 60), &[t]);
            for b in &outb {
                self.dma.write(BusAddr(*b + 573), &[t]);
            }
        }
        // Ownership returns last.
        self.dma.write(BusAddr(ent_bus + 63), &[reply.delivery << 1]);
    }
}

impl BarHandler for FakeFw {
    fn on_write(&self, mem: &BarMem, off: usize, _len: usize) {
        match off {
            // cmdq_addr_l_sz: the geometry bits are read-only.
            0x14 => {
                let v = u32::from_be(mem.read_u32(0x14));
                let g = self.geometry.load(Ordering::SeqCst);
                mem.write_u32(0x14, ((v & 0xffff_f000) | g).to_be());
                if self.init_after_addr.load(Ordering::SeqCst) {
                    mem.write_u32(0x1fc, 0x8000_0000u32.to_be());
                }
            }
            0x18 if !self.silent.load(Ordering::SeqCst) => {
                let mask = u32::from_be(mem.read_u32(0x18));
                for slot in 0..32 {
                    if mask & (1 << slot) != 0 {
                        self.answer(mem, slot);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Every set bit of `buf` lies inside one of `fields`: reserved bits are clear, as firmware
/// requires (delivery status "reserved fields not cleared").
pub fn only_fields(buf: &[u8], fields: &[crate::layout::ifc::Field]) {
    for bit in 0..buf.len() * 8 {
        let set = buf[bit / 8] & (0x80 >> (bit % 8)) != 0;
        let covered =
            fields.iter().any(|f| (f.bit as usize..(f.bit + f.width) as usize).contains(&bit));
        assert!(
            !set || covered,
            "bit {bit:#x} (byte {:#x}) set outside the fields written",
            bit / 8
        );
    }
}

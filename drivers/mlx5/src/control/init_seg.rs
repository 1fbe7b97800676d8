//! The initialization segment: the first 4 KiB of BAR0 (`struct mlx5_init_seg`, kernel
//! `include/linux/mlx5/device.h`; PRM "Initialization Segment").
//!
//! Every register is a big-endian 32-bit word:
//!
//! | bytes | register | meaning |
//! |---|---|---|
//! | `0x000..0x004` | `fw_rev` | `[31:16]` minor, `[15:0]` major firmware revision |
//! | `0x004..0x008` | `cmdif_rev_fw_sub` | `[31:16]` command interface revision (5), `[15:0]` firmware subminor |
//! | `0x010..0x014` | `cmdq_addr_h` | command queue bus address, high 32 bits |
//! | `0x014..0x018` | `cmdq_addr_l_sz` | address low 32 bits (`[31:12]`), `[10:8]` NIC interface state, `[7:4]` log2 entries, `[3:0]` log2 entry stride |
//! | `0x018..0x01c` | `cmd_dbell` | command doorbell: bit `i` posts entry `i` |
//! | `0x1fc..0x200` | `initializing` | bit 31 set while firmware initializes |
//! | `0x200..0x240` | `health` | health buffer (`struct health_buffer`), syndrome at byte `0x23d` |
//! | `0x1010..0x1014` | `health_counter` | `[23:0]` heartbeat |
//!
//! [`InitSeg`] reads and writes them through [`Mmio`], never forming a reference into the BAR.

use core::fmt;

use rdma_pmd::DeviceFault;
use rdma_pmd_hal::{Clock, Deadline, Mmio};

/// Byte offsets of the registers this driver uses.
pub mod off {
    /// `fw_rev`.
    pub const FW_REV: usize = 0x000;
    /// `cmdif_rev_fw_sub`.
    pub const CMDIF_REV_FW_SUB: usize = 0x004;
    /// `cmdq_addr_h`.
    pub const CMDQ_ADDR_H: usize = 0x010;
    /// `cmdq_addr_l_sz`.
    pub const CMDQ_ADDR_L_SZ: usize = 0x014;
    /// `cmd_dbell`.
    pub const CMD_DBELL: usize = 0x018;
    /// `initializing`.
    pub const INITIALIZING: usize = 0x1fc;
    /// `health` (64 bytes).
    pub const HEALTH: usize = 0x200;
    /// `health.assert_var[0..6]`.
    pub const HEALTH_ASSERT_VAR: usize = HEALTH;
    /// `health.fw_ver`.
    pub const HEALTH_FW_VER: usize = HEALTH + 0x30;
    /// `health.hw_id`.
    pub const HEALTH_HW_ID: usize = HEALTH + 0x34;
    /// Word holding `rfr_severity` (byte 0x38 of the buffer).
    pub const HEALTH_RFR_WORD: usize = HEALTH + 0x38;
    /// Word holding `irisc_index`, `synd`, `ext_synd` (bytes 0x3c..0x40).
    pub const HEALTH_SYND_WORD: usize = HEALTH + 0x3c;
    /// `health_counter`.
    pub const HEALTH_COUNTER: usize = 0x1010;
    /// Size of the segment the driver touches.
    pub const SIZE: usize = 0x1014;
}

/// The command interface revision this driver speaks (`CMD_IF_REV` in the kernel's `cmd.c`).
pub const CMDIF_REV: u16 = 5;

/// Bit of `initializing` set while firmware is still initializing.
const INITIALIZING_BIT: u32 = 1 << 31;

/// Firmware revision `major.minor.subminor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FwVersion {
    /// Major.
    pub major: u16,
    /// Minor.
    pub minor: u16,
    /// Subminor.
    pub subminor: u16,
}

impl fmt::Display for FwVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.subminor)
    }
}

/// Health buffer syndromes (`MLX5_HEALTH_SYNDR_*`, kernel `health.c`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthSyndrome {
    /// 0x1: firmware internal error.
    FwError,
    /// 0x7: IRISC not responding.
    IriscError,
    /// 0x8: unrecoverable hardware error.
    HwUnrecoverable,
    /// 0x9: firmware CRC error.
    CrcError,
    /// 0xa: ICM fetch PCI error.
    FetchPciError,
    /// 0xb: hardware fatal error.
    HwFatal,
    /// 0xc: asynchronous EQ buffer overrun.
    AsyncEqOverrun,
    /// 0xd: EQ error.
    EqError,
    /// 0xe: invalid EQ referenced.
    EqInvalid,
    /// 0xf: FFSER error.
    FfserError,
    /// 0x10: high temperature.
    HighTemperature,
    /// Any other value.
    Unknown(u8),
}

impl From<u8> for HealthSyndrome {
    fn from(v: u8) -> Self {
        match v {
            0x1 => HealthSyndrome::FwError,
            0x7 => HealthSyndrome::IriscError,
            0x8 => HealthSyndrome::HwUnrecoverable,
            0x9 => HealthSyndrome::CrcError,
            0xa => HealthSyndrome::FetchPciError,
            0xb => HealthSyndrome::HwFatal,
            0xc => HealthSyndrome::AsyncEqOverrun,
            0xd => HealthSyndrome::EqError,
            0xe => HealthSyndrome::EqInvalid,
            0xf => HealthSyndrome::FfserError,
            0x10 => HealthSyndrome::HighTemperature,
            other => HealthSyndrome::Unknown(other),
        }
    }
}

impl From<HealthSyndrome> for u8 {
    fn from(s: HealthSyndrome) -> u8 {
        match s {
            HealthSyndrome::FwError => 0x1,
            HealthSyndrome::IriscError => 0x7,
            HealthSyndrome::HwUnrecoverable => 0x8,
            HealthSyndrome::CrcError => 0x9,
            HealthSyndrome::FetchPciError => 0xa,
            HealthSyndrome::HwFatal => 0xb,
            HealthSyndrome::AsyncEqOverrun => 0xc,
            HealthSyndrome::EqError => 0xd,
            HealthSyndrome::EqInvalid => 0xe,
            HealthSyndrome::FfserError => 0xf,
            HealthSyndrome::HighTemperature => 0x10,
            HealthSyndrome::Unknown(raw) => raw,
        }
    }
}

/// What the health buffer says when its syndrome is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Health {
    /// `synd`.
    pub syndrome: HealthSyndrome,
    /// `ext_synd`.
    pub ext_syndrome: u16,
    /// `irisc_index`.
    pub irisc_index: u8,
    /// `assert_var[0]`.
    pub assert_var0: u32,
    /// `hw_id`.
    pub hw_id: u32,
}

impl Health {
    /// The core fault: firmware stopped, with its syndromes.
    pub fn fault(&self) -> DeviceFault {
        DeviceFault::Unhealthy { syndrome: self.syndrome.into(), ext_syndrome: self.ext_syndrome }
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "health syndrome {:?} (ext {:#06x}, irisc {}, assert_var[0] {:#010x}, hw_id {:#x})",
            self.syndrome, self.ext_syndrome, self.irisc_index, self.assert_var0, self.hw_id
        )
    }
}

/// How the initializing wait ended badly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitWaitError {
    /// Still initializing when the bound ran out.
    Timeout {
        /// The bound, in nanoseconds.
        waited_ns: u64,
    },
    /// The health buffer reported a syndrome.
    Health(Health),
}

/// Typed access to the initialization segment of a BAR.
pub struct InitSeg<'a, M: Mmio + ?Sized> {
    bar: &'a M,
}

impl<'a, M: Mmio + ?Sized> InitSeg<'a, M> {
    /// The segment at the start of `bar`. Panics if the BAR is smaller than the segment.
    pub fn new(bar: &'a M) -> Self {
        assert!(bar.size() >= off::SIZE, "BAR0 smaller than the initialization segment");
        InitSeg { bar }
    }

    /// `fw_rev` and `cmdif_rev_fw_sub`.
    pub fn fw_version(&self) -> FwVersion {
        let rev = self.bar.read_be32(off::FW_REV);
        let sub = self.bar.read_be32(off::CMDIF_REV_FW_SUB);
        FwVersion { major: rev as u16, minor: (rev >> 16) as u16, subminor: sub as u16 }
    }

    /// Command interface revision (`cmdif_rev_fw_sub[31:16]`).
    pub fn cmdif_rev(&self) -> u16 {
        (self.bar.read_be32(off::CMDIF_REV_FW_SUB) >> 16) as u16
    }

    /// `(log2 entries, log2 entry stride)` of the command queue, as firmware reports them in
    /// `cmdq_addr_l_sz[7:0]`.
    pub fn cmdq_geometry(&self) -> (u8, u8) {
        let l = self.bar.read_be32(off::CMDQ_ADDR_L_SZ);
        (((l >> 4) & 0xf) as u8, (l & 0xf) as u8)
    }

    /// NIC interface state (`cmdq_addr_l_sz[10:8]`; 1 = disabled, 7 = software reset).
    pub fn nic_interface(&self) -> u8 {
        ((self.bar.read_be32(off::CMDQ_ADDR_L_SZ) >> 8) & 7) as u8
    }

    /// Tell firmware where the command queue is. `bus` must be 4 KiB aligned. The high word is
    /// written first: firmware latches the address when the low word is written.
    pub fn set_cmdq_addr(&self, bus: u64) {
        assert!(bus & 0xfff == 0, "command queue at {bus:#x} is not 4 KiB aligned");
        self.bar.write_be32(off::CMDQ_ADDR_H, (bus >> 32) as u32);
        self.bar.write_be32(off::CMDQ_ADDR_L_SZ, bus as u32);
    }

    /// Ring the command doorbell for the entries in `mask`.
    pub fn ring_cmd_doorbell(&self, mask: u32) {
        self.bar.write_be32(off::CMD_DBELL, mask);
    }

    /// Whether firmware is still initializing (`initializing[31]`).
    pub fn initializing(&self) -> bool {
        self.bar.read_be32(off::INITIALIZING) & INITIALIZING_BIT != 0
    }

    /// The health buffer, if its syndrome is set (nothing is wrong otherwise).
    pub fn health(&self) -> Option<Health> {
        let w = self.bar.read_be32(off::HEALTH_SYND_WORD);
        let synd = (w >> 16) as u8;
        if synd == 0 {
            return None;
        }
        Some(Health {
            syndrome: synd.into(),
            ext_syndrome: w as u16,
            irisc_index: (w >> 24) as u8,
            assert_var0: self.bar.read_be32(off::HEALTH_ASSERT_VAR),
            hw_id: self.bar.read_be32(off::HEALTH_HW_ID),
        })
    }

    /// `health_counter[23:0]`, the firmware heartbeat.
    pub fn health_counter(&self) -> u32 {
        self.bar.read_be32(off::HEALTH_COUNTER) & 0xff_ffff
    }

    /// Wait until firmware clears `initializing`, at most `timeout_ns` on `clock`
    /// (the kernel's `wait_fw_init`, rdma-core's `wait_fw_init` in `mlx5_vfio.c`). A health
    /// syndrome ends the wait early.
    pub fn wait_initialized(
        &self,
        clock: &(impl Clock + ?Sized),
        timeout_ns: u64,
    ) -> Result<(), InitWaitError> {
        let deadline = Deadline::after(clock, timeout_ns);
        loop {
            if !self.initializing() {
                return Ok(());
            }
            if let Some(h) = self.health() {
                return Err(InitWaitError::Health(h));
            }
            if deadline.expired(clock) {
                return Err(InitWaitError::Timeout { waited_ns: timeout_ns });
            }
            core::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;
    use rdma_pmd_hal::mem::MemBar;

    /// A clock that advances 1 µs per reading.
    struct Ticks(Cell<u64>);
    impl Clock for Ticks {
        fn now_ns(&self) -> u64 {
            let t = self.0.get() + 1_000;
            self.0.set(t);
            t
        }
    }

    fn put(bar: &MemBar, off: usize, bytes: &[u8]) {
        // Registers are big-endian words: store each as the bytes in memory order.
        for (i, w) in bytes.chunks(4).enumerate() {
            bar.write_u32(off + 4 * i, u32::from_ne_bytes(w.try_into().unwrap()));
        }
    }

    #[test]
    fn registers_decode_as_device_h_describes() {
        let bar = MemBar::new(0x2000);
        // fw_rev = minor 28 (0x1c) << 16 | major 16; cmdif 5, subminor 1002 (0x3ea).
        put(&bar, 0x0, &[0x00, 0x1c, 0x00, 0x10, 0x00, 0x05, 0x03, 0xea]);
        // cmdq_addr_l_sz: log_sz 5, log_stride 6, NIC interface 0.
        put(&bar, 0x14, &[0x00, 0x00, 0x00, 0x56]);
        let seg = InitSeg::new(&bar);
        assert_eq!(seg.fw_version(), FwVersion { major: 16, minor: 28, subminor: 1002 });
        assert_eq!(seg.cmdif_rev(), 5);
        assert_eq!(seg.cmdq_geometry(), (5, 6));
        seg.set_cmdq_addr(0x0000_00e0_1234_5000);
        let mut b = [0u8; 8];
        bar.mem().read_bytes(0x10, &mut b);
        assert_eq!(b, [0x00, 0x00, 0x00, 0xe0, 0x12, 0x34, 0x50, 0x00]);
        seg.ring_cmd_doorbell(1 << 3);
        let mut d = [0u8; 4];
        bar.mem().read_bytes(0x18, &mut d);
        assert_eq!(d, [0, 0, 0, 8]);
    }

    #[test]
    fn health_buffer_syndrome_is_reported() {
        let bar = MemBar::new(0x2000);
        let seg = InitSeg::new(&bar);
        assert_eq!(seg.health(), None);
        // irisc_index 2, synd 0x8, ext_synd 0x1234 at bytes 0x23c..0x240.
        put(&bar, 0x23c, &[0x02, 0x08, 0x12, 0x34]);
        put(&bar, 0x200, &[0xde, 0xad, 0xbe, 0xef]);
        let h = seg.health().unwrap();
        assert_eq!(h.syndrome, HealthSyndrome::HwUnrecoverable);
        assert_eq!(h.ext_syndrome, 0x1234);
        assert_eq!(h.irisc_index, 2);
        assert_eq!(h.assert_var0, 0xdead_beef);
    }

    #[test]
    fn stuck_initializing_times_out_within_the_bound() {
        let bar = MemBar::new(0x2000);
        put(&bar, 0x1fc, &[0x80, 0, 0, 0]);
        let clock = Ticks(Cell::new(0));
        let seg = InitSeg::new(&bar);
        assert!(seg.initializing());
        let r = seg.wait_initialized(&clock, 50_000);
        assert_eq!(r, Err(InitWaitError::Timeout { waited_ns: 50_000 }));
        assert!(clock.0.get() <= 60_000, "gave up late: {} ns", clock.0.get());
        put(&bar, 0x1fc, &[0, 0, 0, 0]);
        assert_eq!(seg.wait_initialized(&clock, 50_000), Ok(()));
    }

    #[test]
    fn health_syndrome_ends_the_initializing_wait() {
        let bar = MemBar::new(0x2000);
        put(&bar, 0x1fc, &[0x80, 0, 0, 0]);
        put(&bar, 0x23c, &[0, 0x01, 0, 0]);
        let clock = Ticks(Cell::new(0));
        let r = InitSeg::new(&bar).wait_initialized(&clock, 1_000_000_000);
        assert!(
            matches!(r, Err(InitWaitError::Health(h)) if h.syndrome == HealthSyndrome::FwError)
        );
    }
}

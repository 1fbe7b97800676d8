//! The initialization segment: the firmware's registers at the start of BAR0.
//!
//! Layout (`struct mlx5_init_seg` and `struct health_buffer` of the kernel's
//! `include/linux/mlx5/device.h`; all registers big-endian):
//!
//! | offset | register | who writes | meaning |
//! |---|---|---|---|
//! | 0x000 | `fw_rev` | firmware | `minor << 16 \| major` |
//! | 0x004 | `cmdif_rev_fw_sub` | firmware | `cmdif_rev << 16 \| subminor` (cmdif rev 5) |
//! | 0x010 | `cmdq_addr_h` | driver | command queue bus address, bits 63:32 |
//! | 0x014 | `cmdq_addr_l_sz` | both | driver: address bits 31:12; firmware: `nic_interface` (bits 10:8), `log_cmdq_size` (7:4), `log_cmdq_stride` (3:0) |
//! | 0x018 | `cmd_dbell` | driver | bit *i* executes command slot *i* |
//! | 0x1fc | `initializing` | firmware | bit 31: firmware still booting; the driver waits for 0 |
//! | 0x200 | `health` | firmware | `struct health_buffer` (64 bytes); `synd` at 0x23d, `ext_synd` at 0x23e |
//! | 0xff8 | `cmd_exec_to` | firmware | command execution timeout (ms) |
//! | 0xffc | `cmd_q_init_to` | firmware | command queue init timeout (ms) |
//! | 0x1000 | `internal_timer_h/l` | firmware | free-running timer: device clock cycles since start, at [`DEVICE_FREQUENCY_KHZ`] |
//! | 0x1010 | `health_counter` | firmware | advances while the firmware is alive |
//!
//! The registers the firmware owns are refreshed before every load the driver makes (the
//! BAR handler's `on_read`), so they always read current; what the driver stores lands in the
//! BAR memory and is latched by `on_write`.

use rdma_pmd_hal::mem::BarMem;

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
/// Bit 31 of `initializing`: the firmware is not ready for commands.
pub const INITIALIZING_BIT: u32 = 1 << 31;
/// `health` (`struct health_buffer`).
pub const HEALTH: usize = 0x200;
/// Size of `struct health_buffer`.
pub const HEALTH_SIZE: usize = 64;
/// `health.fw_ver`.
pub const HEALTH_FW_VER: usize = HEALTH + 0x30;
/// `health.hw_id`.
pub const HEALTH_HW_ID: usize = HEALTH + 0x34;
/// `health.rfr_severity` (byte).
pub const HEALTH_RFR_SEVERITY: usize = HEALTH + 0x38;
/// `health.irisc_index` (byte).
pub const HEALTH_IRISC_INDEX: usize = HEALTH + 0x3c;
/// `health.synd` (byte): non-zero = the firmware hit a fatal error.
pub const HEALTH_SYND: usize = HEALTH + 0x3d;
/// `health.ext_synd` (big-endian 16 bits).
pub const HEALTH_EXT_SYND: usize = HEALTH + 0x3e;
/// `cmd_exec_to`.
pub const CMD_EXEC_TO: usize = 0xff8;
/// `cmd_q_init_to`.
pub const CMD_Q_INIT_TO: usize = 0xffc;
/// `internal_timer_h`.
pub const INTERNAL_TIMER_H: usize = 0x1000;
/// `internal_timer_l`.
pub const INTERNAL_TIMER_L: usize = 0x1004;
/// `health_counter`.
pub const HEALTH_COUNTER: usize = 0x1010;
/// Bytes of BAR0 the firmware model owns (page 0 and the timer/health words of page 1).
pub const FW_WINDOW_END: usize = 0x1014;

/// The device clock the general capability `device_frequency_khz` reports and
/// `internal_timer` counts: 156.25 MHz, what ConnectX parts report (`ibv_devinfo -v` prints
/// it as `hca_core_clock: 156250kHZ`, e.g. a ConnectX-6 with firmware 20.37.1700 in a UCX
/// issue report). The kernel's `mlx5_init_clock` (`lib/clock.c`) refuses to set up its PTP
/// clock when the capability is 0, and converts `internal_timer` cycles to nanoseconds with it.
pub const DEVICE_FREQUENCY_KHZ: u32 = 156_250;

/// `internal_timer` after `ns` nanoseconds: cycles of a [`DEVICE_FREQUENCY_KHZ`] clock.
pub fn timer_cycles(ns: u64) -> u64 {
    (u128::from(ns) * u128::from(DEVICE_FREQUENCY_KHZ) / 1_000_000) as u64
}

/// Whether a BAR access at `off` of `len` bytes touches a firmware register (rather than a UAR
/// page the device model handles).
pub fn is_firmware_register(off: usize, len: usize) -> bool {
    off < 0x1000 || (off >= INTERNAL_TIMER_H && off + len <= FW_WINDOW_END)
}

/// The values of the firmware-owned registers at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registers {
    /// `fw_rev` major, minor, subminor.
    pub fw_rev: (u16, u16, u16),
    /// Command interface revision.
    pub cmdif_rev: u16,
    /// log2 of the number of command slots.
    pub log_cmdq_size: u8,
    /// log2 of the bytes between command slots.
    pub log_cmdq_stride: u8,
    /// `nic_interface` field of `cmdq_addr_l_sz` (0: full driver).
    pub nic_interface: u8,
    /// Whether the `initializing` bit is set.
    pub initializing: bool,
    /// `health.synd`.
    pub health_syndrome: u8,
    /// `health.ext_synd`.
    pub health_ext_syndrome: u16,
    /// `cmd_exec_to` in milliseconds.
    pub cmd_exec_timeout_ms: u32,
    /// `cmd_q_init_to` in milliseconds.
    pub cmd_q_init_timeout_ms: u32,
    /// Nanoseconds since the firmware started (`internal_timer` shows them as cycles).
    pub timer_ns: u64,
    /// `health_counter`.
    pub health_counter: u32,
}

impl Registers {
    /// Store the registers the firmware owns into the BAR memory. `cmdq_addr_l_sz` keeps the
    /// address bits the driver stored.
    pub fn store(&self, mem: &BarMem) {
        let be = |off: usize, v: u32| mem.write_u32(off, v.to_be());
        be(FW_REV, u32::from(self.fw_rev.1) << 16 | u32::from(self.fw_rev.0));
        be(CMDIF_REV_FW_SUB, u32::from(self.cmdif_rev) << 16 | u32::from(self.fw_rev.2));
        let addr_l = u32::from_be(mem.read_u32(CMDQ_ADDR_L_SZ)) & !0xfff;
        be(
            CMDQ_ADDR_L_SZ,
            addr_l
                | u32::from(self.nic_interface & 7) << 8
                | u32::from(self.log_cmdq_size & 0xf) << 4
                | u32::from(self.log_cmdq_stride & 0xf),
        );
        be(INITIALIZING, if self.initializing { INITIALIZING_BIT } else { 0 });
        // rfr_severity, rsvd2[3] | irisc_index, synd, ext_synd: two words.
        be(HEALTH_RFR_SEVERITY, 0);
        be(
            HEALTH_IRISC_INDEX,
            u32::from(self.health_syndrome) << 16 | u32::from(self.health_ext_syndrome),
        );
        be(CMD_EXEC_TO, self.cmd_exec_timeout_ms);
        be(CMD_Q_INIT_TO, self.cmd_q_init_timeout_ms);
        let cycles = timer_cycles(self.timer_ns);
        be(INTERNAL_TIMER_H, (cycles >> 32) as u32);
        be(INTERNAL_TIMER_L, cycles as u32);
        be(HEALTH_COUNTER, self.health_counter);
    }
}

/// The command queue address the driver stored: `cmdq_addr_h << 32 | cmdq_addr_l_sz & !0xfff`.
pub fn cmdq_address(mem: &BarMem) -> u64 {
    let h = u32::from_be(mem.read_u32(CMDQ_ADDR_H));
    let l = u32::from_be(mem.read_u32(CMDQ_ADDR_L_SZ));
    u64::from(h) << 32 | u64::from(l & !0xfff)
}

/// The doorbell bits the driver stored in `cmd_dbell`.
pub fn doorbell(mem: &BarMem) -> u32 {
    u32::from_be(mem.read_u32(CMD_DBELL))
}

//! What `mlx5_ib` asks of an Ethernet (RoCE) function beyond the queues: XRC domains
//! (`ALLOC_XRCD`, `DEALLOC_XRCD`) and the P_Key table (`QUERY_HCA_VPORT_PKEY`).
//!
//! Kernel 6.12 `drivers/infiniband/hw/mlx5/main.c` `mlx5_ib_dev_res_init` allocates two XRC
//! domains when the `xrc` capability is set; `mlx5_ib_query_pkey` reads the P_Key table
//! through `mlx5_query_hca_vport_pkey` (`core/vport.c`) on RoCE ports too: a RoCE port has
//! the one default P_Key, 0xffff, at index 0.

use super::{limit, no_such};
use crate::fw::codes::{syndrome as syn, CmdStatus};
use crate::fw::hca::{fail, Hca, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen};

/// The default P_Key (full membership of the default partition), index 0 of every table.
pub(crate) const DEFAULT_PKEY: u16 = 0xffff;
/// `pkey_index` asking for the whole table (kernel `vport.c` `mlx5_query_hca_vport_pkey`:
/// 0xffff, answered with `128 << pkey_table_size` entries).
pub(crate) const ALL_PKEYS: u16 = 0xffff;

impl Hca {
    pub(super) fn alloc_xrcd(&mut self, out: &mut [u8]) -> Res {
        limit(self.xrcds.len(), self.cap(gen::LOG_MAX_XRCD))?;
        let max = 1u32 << 24;
        let xrcd = (1..max)
            .find(|n| !self.xrcds.contains(n))
            .ok_or_else(|| fail(CmdStatus::ExceedLim, syn::OBJECT_LIMIT))?;
        self.xrcds.insert(xrcd);
        ifc::alloc_xrcd_out::XRCD.set(out, u64::from(xrcd));
        Ok(())
    }

    pub(super) fn dealloc_xrcd(&mut self, inp: &[u8]) -> Res {
        let xrcd = ifc::dealloc_xrcd_in::XRCD.get(inp) as u32;
        if !self.xrcds.remove(&xrcd) {
            return Err(no_such());
        }
        Ok(())
    }

    /// Entries in the P_Key table: `128 << pkey_table_size` (kernel `mlx5_to_sw_pkey_sz`).
    fn pkey_table_len(&self) -> usize {
        128usize << self.cap(gen::PKEY_TABLE_SIZE).min(5)
    }

    pub(super) fn query_hca_vport_pkey(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::query_hca_vport_pkey_in as i;
        if i::OTHER_VPORT.get(inp) != 0 || i::VPORT_NUMBER.get(inp) != 0 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_FUNCTION));
        }
        // One port: `port_num` is 0 (the kernel sets it only on dual-port devices) or 1.
        if i::PORT_NUM.get(inp) > 1 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_PORT));
        }
        let index = i::PKEY_INDEX.get(inp) as u16;
        let table = self.pkey_table_len();
        let (first, n) = match index {
            ALL_PKEYS => (0, table),
            k if usize::from(k) < table => (usize::from(k), 1),
            _ => return Err(fail(CmdStatus::BadIndex, syn::INDEX_RANGE)),
        };
        let at = ifc::query_hca_vport_pkey_out::SIZE;
        if out.len() < at + n * ifc::pkey::SIZE {
            return Err(fail(CmdStatus::BadOutputLen, syn::OUTPUT_TOO_SHORT));
        }
        for k in 0..n {
            let pkey = if first + k == 0 { DEFAULT_PKEY } else { 0 };
            let e = &mut out[at + k * ifc::pkey::SIZE..at + (k + 1) * ifc::pkey::SIZE];
            ifc::pkey::PKEY.set(e, u64::from(pkey));
        }
        Ok(())
    }
}

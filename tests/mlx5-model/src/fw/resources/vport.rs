//! The NIC vport: `MODIFY_NIC_VPORT_CONTEXT`, `QUERY_NIC_VPORT_CONTEXT`,
//! `QUERY_VPORT_STATE`, and the RoCE address (GID) table: `QUERY_ROCE_ADDRESS`,
//! `SET_ROCE_ADDRESS`.

use std::net::Ipv6Addr;

use crate::fw::codes::{self, syndrome as syn, CmdStatus};
use crate::fw::decoded::{
    ModifyNicVportContext, QueryNicVportContext, QueryRoceAddress, QueryVportState, SetRoceAddress,
};
use crate::fw::hca::{fail, Fail, Hca, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen, nic_vport_context as nvc, Field};

/// Only the function's own vport (`other_vport` clear, vport 0) is modelled.
fn own_vport(other_vport: bool, vport_number: u16) -> Res {
    if other_vport || vport_number != 0 {
        return Err(fail(CmdStatus::BadParam, syn::BAD_FUNCTION));
    }
    Ok(())
}

/// Store a MAC address into a layout's `_47_32` and `_31_0` halves.
fn set_mac(out: &mut [u8], hi: Field, lo: Field, mac: [u8; 6]) {
    let mut m = [0u8; 8];
    m[2..].copy_from_slice(&mac);
    let mac = u64::from_be_bytes(m);
    hi.set(out, mac >> 32);
    lo.set(out, mac & 0xffff_ffff);
}

impl Hca {
    pub(super) fn modify_vport(&mut self, d: &ModifyNicVportContext) -> Res {
        own_vport(d.other_vport, d.vport_number)?;
        let ctx = &d.nic_vport_context;
        if d.field_select_roce_en {
            let on = ctx.roce_en;
            if on && self.cap(gen::ROCE) == 0 {
                return Err(fail(CmdStatus::BadParam, syn::CAP_ABOVE_MAX));
            }
            self.roce_en = on;
        }
        if d.field_select_mtu {
            self.vport_mtu = ctx.mtu;
        }
        Ok(())
    }

    pub(super) fn query_vport(&mut self, d: &QueryNicVportContext, out: &mut [u8]) -> Res {
        own_vport(d.other_vport, d.vport_number)?;
        let at = ifc::query_nic_vport_context_out::NIC_VPORT_CONTEXT;
        nvc::ROCE_EN.at(at).set(out, u64::from(self.roce_en));
        nvc::MTU.at(at).set(out, u64::from(self.vport_mtu));
        if let Some(g) = self.shared.gids.first() {
            set_mac(out, nvc::MAC_47_32.at(at), nvc::MAC_31_0.at(at), g.mac);
        }
        Ok(())
    }

    pub(super) fn query_vport_state(&mut self, d: &QueryVportState, out: &mut [u8]) -> Res {
        own_vport(d.other_vport, d.vport_number)?;
        let up = u64::from(codes::VPORT_STATE_UP);
        ifc::query_vport_state_out::STATE.set(out, up);
        ifc::query_vport_state_out::ADMIN_STATE.set(out, up);
        Ok(())
    }

    /// Check a GID table index (and port) against `roce_address_table_size`.
    fn gid_index(&self, index: u16, port: u8) -> Result<usize, Fail> {
        if port > 1 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_PORT));
        }
        if u64::from(index) >= ifc::roce_cap::ROCE_ADDRESS_TABLE_SIZE.get(&self.roce_cur) {
            return Err(fail(CmdStatus::BadIndex, syn::INDEX_RANGE));
        }
        Ok(usize::from(index))
    }

    /// An entry of the model's GID table answers in [`roce_entry`]'s form; entries past its end,
    /// inside `roce_address_table_size`, were never written and read as zeros.
    pub(super) fn query_roce_address(&mut self, d: &QueryRoceAddress, out: &mut [u8]) -> Res {
        let index = self.gid_index(d.roce_address_index, d.vhca_port_num)?;
        if let Some(g) = self.shared.gids.get(index) {
            let at = ifc::query_roce_address_out::ROCE_ADDRESS;
            let entry = roce_entry(Some(g));
            out[at.byte()..at.byte() + entry.len()].copy_from_slice(&entry);
        }
        Ok(())
    }

    /// The model's GID table is fixed by its configuration (the engine routes by it): a write
    /// must be [`roce_entry`] of the configured GID, and entries past the table's end may
    /// only be cleared ([`roce_entry`] of none). Before that, the entry's `roce_version` must
    /// be one the function has (`roce_cap.roce_version`, bit `1 << version`): the model is a
    /// function without RoCE v1 (its capabilities list only `MLX5_ROCE_VERSION_2_CAP`, and
    /// its engine speaks only RoCE v2), like the subfunctions of the kernel's April 2021 fix
    /// "IB/mlx5: Set right RoCE l3 type and roce version while deleting GID", whose firmware
    /// refuses the old all-zero clear (version 0) with `BAD_PARAM`, syndrome 0x12822d.
    pub(super) fn set_roce_address(&mut self, d: &SetRoceAddress) -> Res {
        let index = self.gid_index(d.roce_address_index, d.vhca_port_num)?;
        let version = ifc::roce_addr_layout::ROCE_VERSION.get(&d.roce_address);
        if !roce_version_supported(&self.roce_cur, version) {
            return Err(fail(CmdStatus::BadParam, syn::ROCE_VERSION_UNSUPPORTED));
        }
        // VLANs are not modelled; the vlan fields must be clear either way.
        if d.roce_address != roce_entry(self.shared.gids.get(index)) {
            return Err(fail(CmdStatus::BadParam, syn::GID_MISMATCH));
        }
        Ok(())
    }
}

/// Whether `roce_cap.roce_version` lists `version` (`MLX5_ROCE_VERSION_1_CAP` is
/// `1 << MLX5_ROCE_VERSION_1`, `MLX5_ROCE_VERSION_2_CAP` is `1 << MLX5_ROCE_VERSION_2`,
/// device.h).
fn roce_version_supported(roce_caps: &[u8], version: u64) -> bool {
    version < 8 && ifc::roce_cap::ROCE_VERSION.get(roce_caps) & (1 << version) != 0
}

/// The form of a RoCE v2 address table entry (`roce_addr_layout`), as the kernel's
/// `set_roce_addr` (`drivers/infiniband/hw/mlx5/main.c`) and `mlx5_core_roce_gid_set`
/// (`mlx5/core/lib/gid.c`) write it and the model answers it; the one place that states it.
///
/// * `Some(g)`: `source_l3_address` is the whole 16-byte GID (for IPv4 the IPv4-mapped GID
///   `::ffff:a.b.c.d`, never the deprecated IPv4-compatible `::a.b.c.d`), the MAC,
///   `roce_l3_type` IPv4 when the GID is IPv4-mapped (`ipv6_addr_v4mapped`) else IPv6, no
///   VLAN, `roce_version` 2.
/// * `None`, a clear (`mlx5_ib_del_gid` of a RoCE v2 GID): no address, no MAC, but still
///   `roce_version` 2 and, without a GID to be v4-mapped, `roce_l3_type` IPv6.
fn roce_entry(g: Option<&crate::model::Gid>) -> [u8; ifc::roce_addr_layout::SIZE] {
    use ifc::roce_addr_layout as r;
    let mut e = [0u8; r::SIZE];
    let mut l3 = codes::ROCE_L3_TYPE_IPV6;
    if let Some(g) = g {
        r::SOURCE_L3_ADDRESS.slice_mut(&mut e).copy_from_slice(&g.gid);
        set_mac(&mut e, r::SOURCE_MAC_47_32, r::SOURCE_MAC_31_0, g.mac);
        if Ipv6Addr::from(g.gid).to_ipv4_mapped().is_some() {
            l3 = codes::ROCE_L3_TYPE_IPV4;
        }
    }
    r::ROCE_L3_TYPE.set(&mut e, u64::from(l3));
    r::ROCE_VERSION.set(&mut e, u64::from(codes::ROCE_VERSION_2));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The version check reads the capability: version 0 (RoCE v1) passes only where
    /// `MLX5_ROCE_VERSION_1_CAP` (bit 0) is set; the model's own caps have bit 2 alone.
    #[test]
    fn roce_versions_follow_the_capability_bits() {
        let mut caps = vec![0u8; ifc::roce_cap::ROCE_VERSION.byte() + 1];
        ifc::roce_cap::ROCE_VERSION.set(&mut caps, 1 << 2);
        let v2_only: Vec<bool> = (0..10).map(|v| roce_version_supported(&caps, v)).collect();
        assert_eq!(v2_only, [false, false, true, false, false, false, false, false, false, false]);
        ifc::roce_cap::ROCE_VERSION.set(&mut caps, 1 << 0 | 1 << 2);
        assert!(roce_version_supported(&caps, 0) && roce_version_supported(&caps, 2));
        assert!(!roce_version_supported(&caps, 1) && !roce_version_supported(&caps, 255));
    }
}

//! The NIC vport: `MODIFY_NIC_VPORT_CONTEXT`, `QUERY_NIC_VPORT_CONTEXT`,
//! `QUERY_VPORT_STATE`, and the RoCE address (GID) table: `QUERY_ROCE_ADDRESS`,
//! `SET_ROCE_ADDRESS`.

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

    /// Entries past the model's GIDs, inside `roce_address_table_size`, read as empty.
    pub(super) fn query_roce_address(&mut self, d: &QueryRoceAddress, out: &mut [u8]) -> Res {
        let index = self.gid_index(d.roce_address_index, d.vhca_port_num)?;
        let at = ifc::query_roce_address_out::ROCE_ADDRESS;
        let entry = roce_entry(self.shared.gids.get(index));
        out[at.byte()..at.byte() + entry.len()].copy_from_slice(&entry);
        Ok(())
    }

    /// The model's GID table is fixed by its configuration (the engine routes by it): a write
    /// must agree with it, and entries past its end may only be cleared.
    pub(super) fn set_roce_address(&mut self, d: &SetRoceAddress) -> Res {
        let index = self.gid_index(d.roce_address_index, d.vhca_port_num)?;
        let want = roce_entry(self.shared.gids.get(index));
        // VLANs are not modelled; the vlan fields must be clear either way.
        if d.roce_address != want {
            return Err(fail(CmdStatus::BadParam, syn::GID_MISMATCH));
        }
        Ok(())
    }
}

/// A `roce_addr_layout` for a GID table entry (zeros for an empty one).
fn roce_entry(g: Option<&crate::model::Gid>) -> [u8; ifc::roce_addr_layout::SIZE] {
    use ifc::roce_addr_layout as r;
    let mut e = [0u8; r::SIZE];
    let Some(g) = g else { return e };
    let v4 = g.gid[..10].iter().all(|b| *b == 0) && g.gid[10..12] == [0xff, 0xff];
    // An IPv4 entry holds the address in the last four bytes, the rest zero (the kernel's
    // `mlx5_core_roce_gid_set` for RoCE v2 over IPv4); IPv6 holds all sixteen.
    let l3 = r::SOURCE_L3_ADDRESS.slice_mut(&mut e);
    if v4 {
        l3[12..].copy_from_slice(&g.gid[12..]);
    } else {
        l3.copy_from_slice(&g.gid);
    }
    set_mac(&mut e, r::SOURCE_MAC_47_32, r::SOURCE_MAC_31_0, g.mac);
    let l3 = if v4 { codes::ROCE_L3_TYPE_IPV4 } else { codes::ROCE_L3_TYPE_IPV6 };
    r::ROCE_L3_TYPE.set(&mut e, u64::from(l3));
    r::ROCE_VERSION.set(&mut e, u64::from(codes::ROCE_VERSION_2));
    e
}

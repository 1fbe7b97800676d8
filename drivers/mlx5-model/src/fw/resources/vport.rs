//! The NIC vport: `MODIFY_NIC_VPORT_CONTEXT`, `QUERY_NIC_VPORT_CONTEXT`,
//! `QUERY_VPORT_STATE`, and the RoCE address (GID) table: `QUERY_ROCE_ADDRESS`,
//! `SET_ROCE_ADDRESS`.

use crate::fw::codes::{self, syndrome as syn, CmdStatus};
use crate::fw::hca::{fail, Fail, Hca, Res};
use crate::fw::ifc::{self, cmd_hca_cap as gen, nic_vport_context as nvc, Field};

impl Hca {
    pub(super) fn modify_vport(&mut self, inp: &[u8]) -> Res {
        use ifc::modify_nic_vport_context_in as i;
        if i::OTHER_VPORT.get(inp) != 0 || i::VPORT_NUMBER.get(inp) != 0 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_FUNCTION));
        }
        let ctx = |f: Field| f.at(i::NIC_VPORT_CONTEXT).get(inp);
        if i::FIELD_SELECT_ROCE_EN.get(inp) == 1 {
            let on = ctx(nvc::ROCE_EN) == 1;
            if on && self.cap(gen::ROCE) == 0 {
                return Err(fail(CmdStatus::BadParam, syn::CAP_ABOVE_MAX));
            }
            self.roce_en = on;
        }
        if i::FIELD_SELECT_MTU.get(inp) == 1 {
            self.vport_mtu = ctx(nvc::MTU) as u16;
        }
        Ok(())
    }

    pub(super) fn query_vport(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::query_nic_vport_context_in as i;
        if i::OTHER_VPORT.get(inp) != 0 || i::VPORT_NUMBER.get(inp) != 0 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_FUNCTION));
        }
        let at = ifc::query_nic_vport_context_out::NIC_VPORT_CONTEXT;
        nvc::ROCE_EN.at(at).set(out, u64::from(self.roce_en));
        nvc::MTU.at(at).set(out, u64::from(self.vport_mtu));
        if let Some(g) = self.shared.gids.first() {
            let mut m = [0u8; 8];
            m[2..].copy_from_slice(&g.mac);
            let mac = u64::from_be_bytes(m);
            nvc::MAC_47_32.at(at).set(out, mac >> 32);
            nvc::MAC_31_0.at(at).set(out, mac & 0xffff_ffff);
        }
        Ok(())
    }

    pub(super) fn query_vport_state(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::query_vport_state_in as i;
        if i::OTHER_VPORT.get(inp) != 0 || i::VPORT_NUMBER.get(inp) != 0 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_FUNCTION));
        }
        let up = u64::from(codes::VPORT_STATE_UP);
        ifc::query_vport_state_out::STATE.set(out, up);
        ifc::query_vport_state_out::ADMIN_STATE.set(out, up);
        Ok(())
    }

    /// Check a GID table index (and port) against `roce_address_table_size`.
    pub(super) fn gid_index(&self, index: u64, port: u64) -> Result<usize, Fail> {
        if port > 1 {
            return Err(fail(CmdStatus::BadParam, syn::BAD_PORT));
        }
        if index >= ifc::roce_cap::ROCE_ADDRESS_TABLE_SIZE.get(&self.roce_cur) {
            return Err(fail(CmdStatus::BadIndex, syn::INDEX_RANGE));
        }
        Ok(index as usize)
    }

    /// Entries past the model's GIDs, inside `roce_address_table_size`, read as empty.
    pub(super) fn query_roce_address(&mut self, inp: &[u8], out: &mut [u8]) -> Res {
        use ifc::query_roce_address_in as i;
        let index = self.gid_index(i::ROCE_ADDRESS_INDEX.get(inp), i::VHCA_PORT_NUM.get(inp))?;
        let at = ifc::query_roce_address_out::ROCE_ADDRESS;
        let entry = roce_entry(self.shared.gids.get(index));
        out[at.byte()..at.byte() + entry.len()].copy_from_slice(&entry);
        Ok(())
    }

    /// The model's GID table is fixed by its configuration (the engine routes by it): a write
    /// must agree with it, and entries past its end may only be cleared.
    pub(super) fn set_roce_address(&mut self, inp: &[u8]) -> Res {
        use ifc::set_roce_address_in as i;
        let index = self.gid_index(i::ROCE_ADDRESS_INDEX.get(inp), i::VHCA_PORT_NUM.get(inp))?;
        let want = roce_entry(self.shared.gids.get(index));
        let mut got = [0u8; ifc::roce_addr_layout::SIZE];
        got.copy_from_slice(i::ROCE_ADDRESS.slice(inp));
        // VLANs are not modelled; the vlan fields must be clear either way.
        if got != want {
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
    r::SOURCE_L3_ADDRESS.slice_mut(&mut e).copy_from_slice(&g.gid);
    let mut m = [0u8; 8];
    m[2..].copy_from_slice(&g.mac);
    let mac = u64::from_be_bytes(m);
    r::SOURCE_MAC_47_32.set(&mut e, mac >> 32);
    r::SOURCE_MAC_31_0.set(&mut e, mac & 0xffff_ffff);
    let v4 = g.gid[..10].iter().all(|b| *b == 0) && g.gid[10..12] == [0xff, 0xff];
    let l3 = if v4 { codes::ROCE_L3_TYPE_IPV4 } else { codes::ROCE_L3_TYPE_IPV6 };
    r::ROCE_L3_TYPE.set(&mut e, u64::from(l3));
    r::ROCE_VERSION.set(&mut e, u64::from(codes::ROCE_VERSION_2));
    e
}

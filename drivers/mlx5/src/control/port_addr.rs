//! The port's RoCE addressing through firmware commands: its MAC and MTU from the NIC vport
//! context, its GID table (the RoCE address table), and the path MTU from the port's PMTU
//! register. The HCA knows none of these by itself on a function the driver owns: the kernel
//! learns them from its netdev and programs the table (`mlx5/core/lib/gid.c`,
//! `hw/mlx5/main.c` `set_roce_addr`, `mlx5/core/vport.c`, `port.c`); here the user says which
//! IP addresses the port has.
//!
//! Each command is built and decoded by a pure function below (tested on its bytes against
//! `mlx5_ifc.h` through the generated accessors); [`FwControl`](super::fw::FwControl) runs
//! them.

use core::net::IpAddr;

use rdma_pmd::{Error, Gid, Mac};

use crate::control::bringup::{input, HcaCaps};
use crate::layout::ifc::{self, consts, generated::*};

/// `MLX5_ROCE_VERSION_2` (kernel `include/linux/mlx5/device.h`).
pub const ROCE_VERSION_2: u64 = 2;
/// `MLX5_ROCE_L3_TYPE_IPV4`.
pub const ROCE_L3_TYPE_IPV4: u64 = 0;
/// `MLX5_ROCE_L3_TYPE_IPV6`.
pub const ROCE_L3_TYPE_IPV6: u64 = 1;
/// `MLX5_REG_PMTU`: the port MTU register.
pub const REG_PMTU: u64 = 0x5003;
/// `MLX5_REG_ACCESS_OP_READ` (`access_register_in.op_mod`).
pub const REG_ACCESS_OP_READ: u16 = 1;

/// Bytes the kernel's `iboe_get_mtu` takes off an Ethernet MTU for RoCE headers: GRH 40, UDP
/// 8, BTH 12, XRC ETH 4, AtomicETH 28, ICRC 4.
pub const ROCE_HEADERS: u32 = 40 + 8 + 12 + 4 + 28 + 4;

/// Bytes between the hardware MTU (`pmtu_reg.oper_mtu`, `nic_vport_context.mtu`) and the
/// netdev's L3 MTU: the mlx5e driver's `MLX5E_SW2HW_MTU` adds the Ethernet header (14), a VLAN
/// tag (4) and the FCS (4).
pub const HW_MTU_OVERHEAD: u32 = 14 + 4 + 4;

/// `iboe_get_mtu` (kernel `include/rdma/ib_addr.h`) of an L3 MTU: the largest IB MTU (as an
/// `ibv_mtu` value, capped at 4096) that fits with the RoCE headers; `None` below 256.
pub const fn iboe_mtu(l3_mtu: u32) -> Option<u8> {
    let m = l3_mtu.saturating_sub(ROCE_HEADERS);
    if m >= 4096 {
        Some(5)
    } else if m >= 2048 {
        Some(4)
    } else if m >= 1024 {
        Some(3)
    } else if m >= 512 {
        Some(2)
    } else if m >= 256 {
        Some(1)
    } else {
        None
    }
}

/// `iboe_mtu` of a hardware MTU (as the PMTU register and the vport context report it).
pub const fn iboe_mtu_from_hw(hw_mtu: u32) -> Option<u8> {
    iboe_mtu(hw_mtu.saturating_sub(HW_MTU_OVERHEAD))
}

/// Where a path MTU came from ([`PortMtu`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtuSource {
    /// The port's PMTU register (`ACCESS_REG` 0x5003, `oper_mtu`).
    Pmtu,
    /// The NIC vport context's `mtu` (`QUERY_NIC_VPORT_CONTEXT`): firmware refused the
    /// register (a VF may not read it).
    NicVport,
    /// Neither could be read: 1024, what a 1500-byte Ethernet port gives.
    Default,
}

/// A RoCE path MTU and where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortMtu {
    /// As an `ibv_mtu` value (1 = 256 ... 5 = 4096).
    pub mtu: u8,
    /// Its source.
    pub source: MtuSource,
}

/// The MTU used when the port tells none (`IBV_MTU_1024`).
pub const FALLBACK_MTU: u8 = 3;

/// `QUERY_NIC_VPORT_CONTEXT` of our own vport (`other_vport` 0, vport 0), as
/// `mlx5_query_nic_vport_mac_address` sends it.
pub fn query_nic_vport_context_cmd() -> [u8; query_nic_vport_context_in::SIZE] {
    input(consts::CMD_OP_QUERY_NIC_VPORT_CONTEXT, 0)
}

/// The permanent MAC in a `QUERY_NIC_VPORT_CONTEXT` reply (the last six bytes of the
/// 8-byte `mac_address_layout`).
pub fn vport_mac(out: &[u8; query_nic_vport_context_out::SIZE]) -> Mac {
    let at =
        nic_vport_context::PERMANENT_ADDRESS.within(query_nic_vport_context_out::NIC_VPORT_CONTEXT);
    let b = at.byte();
    let mut m = [0u8; 6];
    m.copy_from_slice(&out[b + 2..b + 8]);
    Mac(m)
}

/// The hardware MTU (`nic_vport_context.mtu`, Ethernet frame bytes) in the same reply.
pub fn vport_mtu(out: &[u8; query_nic_vport_context_out::SIZE]) -> u32 {
    ifc::get(out, nic_vport_context::MTU.within(query_nic_vport_context_out::NIC_VPORT_CONTEXT))
        as u32
}

/// `SET_ROCE_ADDRESS` of GID table entry `index`, the image the kernel sends for a RoCE v2
/// GID (`hw/mlx5/main.c` `set_roce_addr`, then `mlx5/core/lib/gid.c`
/// `mlx5_core_roce_gid_set`):
///
/// * `Some((ip, mac))` programs the entry: `source_l3_address` is the whole 16-byte GID (an
///   IPv4 address as its IPv4-mapped GID `::ffff:a.b.c.d`, [`Gid::from_ipv4`]; an IPv6
///   address as it is), the MAC, `roce_l3_type` IPv4 for an IPv4-mapped GID
///   (`ipv6_addr_v4mapped`) else IPv6, `roce_version` 2. No VLAN.
/// * `None` clears it (`mlx5_ib_del_gid`): no address, no MAC, but still `roce_version` 2 and
///   `roce_l3_type` IPv6 (the kernel sets both for every call since its April 2021 fix,
///   and `set_roce_addr` without a GID takes the not-v4-mapped branch). Firmware on a
///   function without RoCE v1 refuses a version of 0 (`BAD_PARAM`, syndrome 0x12822d).
///
/// `vhca_port_num` is set only where the device has several vHCA ports, as the kernel does.
pub fn set_roce_address_cmd(
    index: u16,
    entry: Option<(IpAddr, Mac)>,
    port: u8,
    caps: &HcaCaps,
) -> Result<[u8; set_roce_address_in::SIZE], Error> {
    if caps.gid_table_size != 0 && index >= caps.gid_table_size {
        return Err(Error::InvalidArgument("GID index beyond the RoCE address table"));
    }
    let mut c: [u8; set_roce_address_in::SIZE] = input(consts::CMD_OP_SET_ROCE_ADDRESS, 0);
    ifc::set(&mut c, set_roce_address_in::ROCE_ADDRESS_INDEX, index as u64);
    if caps.num_vhca_ports > 0 {
        ifc::set(&mut c, set_roce_address_in::VHCA_PORT_NUM, port as u64);
    }
    let ra = set_roce_address_in::ROCE_ADDRESS;
    // A cleared entry: the not-v4-mapped branch of `set_roce_addr`.
    let mut l3_type = ROCE_L3_TYPE_IPV6;
    if let Some((ip, mac)) = entry {
        // `roce_cap.l3_type` 0 is a device that does not report its L3 types: both are tried.
        let gid = match ip {
            IpAddr::V4(v4) => {
                if caps.roce_l3_types != 0 && caps.roce_l3_types & 0b10 == 0 {
                    return Err(Error::Unsupported("IPv4 RoCE addresses"));
                }
                Gid::from_ipv4(v4.octets())
            }
            IpAddr::V6(v6) => {
                if caps.roce_l3_types != 0 && caps.roce_l3_types & 0b100 == 0 {
                    return Err(Error::Unsupported("IPv6 RoCE addresses"));
                }
                Gid(v6.octets())
            }
        };
        if gid.ipv4().is_some() {
            l3_type = ROCE_L3_TYPE_IPV4;
        }
        let l3 = roce_addr_layout::SOURCE_L3_ADDRESS.within(ra).byte();
        c[l3..l3 + 16].copy_from_slice(&gid.0);
        let m = mac.0;
        ifc::set(
            &mut c,
            roce_addr_layout::SOURCE_MAC_47_32.within(ra),
            u16::from_be_bytes([m[0], m[1]]) as u64,
        );
        ifc::set(
            &mut c,
            roce_addr_layout::SOURCE_MAC_31_0.within(ra),
            u32::from_be_bytes([m[2], m[3], m[4], m[5]]) as u64,
        );
    }
    ifc::set(&mut c, roce_addr_layout::ROCE_VERSION.within(ra), ROCE_VERSION_2);
    ifc::set(&mut c, roce_addr_layout::ROCE_L3_TYPE.within(ra), l3_type);
    Ok(c)
}

/// `QUERY_ROCE_ADDRESS` of entry `index`.
pub fn query_roce_address_cmd(
    index: u16,
    port: u8,
    caps: &HcaCaps,
) -> [u8; query_roce_address_in::SIZE] {
    let mut c: [u8; query_roce_address_in::SIZE] = input(consts::CMD_OP_QUERY_ROCE_ADDRESS, 0);
    ifc::set(&mut c, query_roce_address_in::ROCE_ADDRESS_INDEX, index as u64);
    if caps.num_vhca_ports > 0 {
        ifc::set(&mut c, query_roce_address_in::VHCA_PORT_NUM, port as u64);
    }
    c
}

/// The GID and MAC of a `QUERY_ROCE_ADDRESS` reply; `None` for an empty (or cleared) entry, one
/// that is not RoCE v2, or one whose address disagrees with its L3 type.
///
/// `source_l3_address` is the whole GID, as [`set_roce_address_cmd`] and the kernel write it:
/// an entry of L3 type IPv4 holds the IPv4-mapped GID `::ffff:a.b.c.d`, the only form a RoCE
/// v2 GID over IPv4 has, and is returned as it is. An IPv4 entry in any other form (the
/// deprecated IPv4-compatible `::a.b.c.d` included), or an IPv6 entry holding a v4-mapped GID,
/// is not taken.
pub fn roce_address_entry(out: &[u8; query_roce_address_out::SIZE]) -> Option<(Gid, Mac)> {
    let ra = query_roce_address_out::ROCE_ADDRESS;
    if ifc::get(out, roce_addr_layout::ROCE_VERSION.within(ra)) != ROCE_VERSION_2 {
        return None;
    }
    let l3 = roce_addr_layout::SOURCE_L3_ADDRESS.within(ra).byte();
    let mut g = [0u8; 16];
    g.copy_from_slice(&out[l3..l3 + 16]);
    let gid = match ifc::get(out, roce_addr_layout::ROCE_L3_TYPE.within(ra)) {
        ROCE_L3_TYPE_IPV4 => {
            if Gid(g).ipv4().is_none_or(|v4| v4 == [0; 4]) {
                return None;
            }
            Gid(g)
        }
        ROCE_L3_TYPE_IPV6 if Gid(g).ipv4().is_none() && g != [0; 16] => Gid(g),
        _ => return None,
    };
    let hi = ifc::get(out, roce_addr_layout::SOURCE_MAC_47_32.within(ra)) as u16;
    let lo = ifc::get(out, roce_addr_layout::SOURCE_MAC_31_0.within(ra)) as u32;
    let (h, l) = (hi.to_be_bytes(), lo.to_be_bytes());
    Some((gid, Mac([h[0], h[1], l[0], l[1], l[2], l[3]])))
}

/// Bytes of an `ACCESS_REG` of the PMTU register.
pub const PMTU_CMD_LEN: usize = access_register_in::SIZE + pmtu_reg::SIZE;

/// `ACCESS_REG` read of the PMTU register of `port`, as `mlx5_query_port_oper_mtu` sends it.
pub fn query_pmtu_cmd(port: u8) -> [u8; PMTU_CMD_LEN] {
    let mut c: [u8; PMTU_CMD_LEN] = input(consts::CMD_OP_ACCESS_REG, REG_ACCESS_OP_READ);
    ifc::set(&mut c, access_register_in::REGISTER_ID, REG_PMTU);
    ifc::set(&mut c, pmtu_reg::LOCAL_PORT.within(access_register_in::REGISTER_DATA), port as u64);
    c
}

/// `oper_mtu` of an `ACCESS_REG` PMTU reply (hardware MTU, Ethernet frame bytes).
pub fn pmtu_oper(out: &[u8; PMTU_CMD_LEN]) -> u32 {
    ifc::get(out, pmtu_reg::OPER_MTU.within(access_register_out::REGISTER_DATA)) as u32
}

/// The RoCE path MTU from what the port reported: the PMTU register's `oper_mtu` where it
/// was read, else the vport context's MTU, else [`FALLBACK_MTU`]; each converted as
/// `mlx5_ib` converts the netdev MTU (`iboe_get_mtu`), a value too small to carry 256 bytes
/// falling through to the next source.
pub fn choose_mtu(pmtu: Option<u32>, vport: Option<u32>) -> PortMtu {
    if let Some(mtu) = pmtu.and_then(iboe_mtu_from_hw) {
        return PortMtu { mtu, source: MtuSource::Pmtu };
    }
    if let Some(mtu) = vport.and_then(iboe_mtu_from_hw) {
        return PortMtu { mtu, source: MtuSource::NicVport };
    }
    PortMtu { mtu: FALLBACK_MTU, source: MtuSource::Default }
}

#[cfg(test)]
mod tests;

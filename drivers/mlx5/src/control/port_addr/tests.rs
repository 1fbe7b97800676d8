use core::net::{Ipv4Addr, Ipv6Addr};

use super::*;

use crate::testing::fw::example_caps as caps;

const MAC: Mac = Mac([0x02, 0x4d, 0x11, 0x22, 0x33, 0x44]);

#[test]
fn query_nic_vport_context_reads_our_own_vport() {
    let c = query_nic_vport_context_cmd();
    assert_eq!(&c[0..2], &[0x07, 0x54], "opcode 0x754, big-endian");
    assert!(c[2..].iter().all(|&b| b == 0), "op_mod, other_vport, vport_number all 0");
}

#[test]
fn vport_reply_decodes_mac_and_mtu_at_the_ifc_offsets() {
    let mut out = [0u8; query_nic_vport_context_out::SIZE];
    // nic_vport_context at byte 0x10 of the reply; permanent_address (mac_address_layout,
    // 16 reserved bits then the 48-bit MAC) at bit 0x7a0 = byte 0xf4 of the context; mtu at
    // bit 0x130 = byte 0x26 (16 bits).
    assert_eq!(query_nic_vport_context_out::NIC_VPORT_CONTEXT.byte(), 0x10);
    out[0x10 + 0xf4 + 2..0x10 + 0xf4 + 8].copy_from_slice(&MAC.0);
    out[0x10 + 0x26..0x10 + 0x28].copy_from_slice(&1522u16.to_be_bytes());
    assert_eq!(vport_mac(&out), MAC);
    assert_eq!(vport_mtu(&out), 1522);
}

#[test]
fn set_roce_address_ipv4_as_mlx5_core_roce_gid_set() {
    let c =
        set_roce_address_cmd(3, Some((IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), MAC)), 1, &caps())
            .unwrap();
    assert_eq!(c.len(), 48);
    assert_eq!(&c[0..2], &[0x07, 0x61], "SET_ROCE_ADDRESS");
    assert_eq!(u16::from_be_bytes([c[8], c[9]]), 3, "roce_address_index at byte 8");
    assert_eq!(c[11] & 0x0f, 0, "no vhca_port_num on a single-port function");
    // roce_address (roce_addr_layout) at byte 16: source_l3_address 16 bytes, IPv4 in the last
    // four, the rest zero (not the ::ffff: prefix); MAC at bytes 18..24 of the layout;
    // roce_l3_type the low nibble of byte 26, roce_version byte 27.
    let ra = &c[16..48];
    assert_eq!(&ra[0..12], &[0; 12]);
    assert_eq!(&ra[12..16], &[10, 0, 0, 2]);
    assert_eq!(&ra[16..18], &[0, 0], "vlan_valid/vlan_id clear");
    assert_eq!(&ra[18..24], &MAC.0);
    assert_eq!(ra[26] & 0x0f, 0, "L3 type IPv4");
    assert_eq!(ra[27], 2, "RoCE v2");
    assert!(ra[28..].iter().all(|&b| b == 0));
}

#[test]
fn set_roce_address_ipv6_clear_and_bounds() {
    let v6 = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x4d, 0x11ff, 0xfe22, 0x3344);
    let multi = HcaCaps { num_vhca_ports: 2, ..caps() };
    let c = set_roce_address_cmd(1, Some((IpAddr::V6(v6), MAC)), 2, &multi).unwrap();
    assert_eq!(c[11] & 0x0f, 2, "vhca_port_num where the device has several");
    assert_eq!(&c[16..32], &v6.octets());
    assert_eq!(c[16 + 26] & 0x0f, 1, "L3 type IPv6");
    let cleared = set_roce_address_cmd(1, None, 1, &caps()).unwrap();
    assert!(cleared[16..].iter().all(|&b| b == 0), "del_gid writes a zeroed entry");
    assert!(matches!(set_roce_address_cmd(16, None, 1, &caps()), Err(Error::InvalidArgument(_))));
    let v4_only = HcaCaps { roce_l3_types: 0b10, ..caps() };
    assert!(matches!(
        set_roce_address_cmd(0, Some((IpAddr::V6(v6), MAC)), 1, &v4_only),
        Err(Error::Unsupported(_))
    ));
}

#[test]
fn query_roce_address_round_trips_what_set_wrote() {
    let q = query_roce_address_cmd(5, 1, &caps());
    assert_eq!(&q[0..2], &[0x07, 0x60]);
    assert_eq!(u16::from_be_bytes([q[8], q[9]]), 5);
    let set =
        set_roce_address_cmd(5, Some((IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7)), MAC)), 1, &caps())
            .unwrap();
    // The reply carries the same roce_addr_layout at the same offset (byte 16).
    let mut out = [0u8; query_roce_address_out::SIZE];
    out[16..48].copy_from_slice(&set[16..48]);
    assert_eq!(roce_address_entry(&out), Some((Gid::from_ipv4([192, 0, 2, 7]), MAC)));
    assert_eq!(roce_address_entry(&[0u8; query_roce_address_out::SIZE]), None, "empty");
    out[16 + 27] = 0;
    assert_eq!(roce_address_entry(&out), None, "RoCE v1 entries are not ours");
}

#[test]
fn pmtu_read_and_mtu_choice() {
    let c = query_pmtu_cmd(1);
    assert_eq!(c.len(), 32);
    assert_eq!(&c[0..2], &[0x08, 0x05], "ACCESS_REG");
    assert_eq!(u16::from_be_bytes([c[6], c[7]]), 1, "op_mod read");
    assert_eq!(u16::from_be_bytes([c[10], c[11]]), 0x5003, "register_id PMTU");
    assert_eq!(c[16 + 1], 1, "pmtu_reg.local_port");
    let mut out = [0u8; PMTU_CMD_LEN];
    out[16 + 12..16 + 14].copy_from_slice(&9022u16.to_be_bytes());
    assert_eq!(pmtu_oper(&out), 9022, "oper_mtu at byte 12 of the register");
    assert_eq!(choose_mtu(Some(1522), Some(9022)), PortMtu { mtu: 3, source: MtuSource::Pmtu });
    assert_eq!(choose_mtu(Some(9022), None), PortMtu { mtu: 5, source: MtuSource::Pmtu });
    assert_eq!(
        choose_mtu(None, Some(4096 + 96 + 22)),
        PortMtu { mtu: 5, source: MtuSource::NicVport }
    );
    assert_eq!(
        choose_mtu(None, Some(4096 + 96 + 21)),
        PortMtu { mtu: 4, source: MtuSource::NicVport }
    );
    assert_eq!(choose_mtu(Some(100), Some(2200)), PortMtu { mtu: 4, source: MtuSource::NicVport });
    assert_eq!(choose_mtu(None, None), PortMtu { mtu: 3, source: MtuSource::Default });
}

#[test]
fn roce_mtu_from_an_ethernet_mtu() {
    // `iboe_get_mtu`: the L3 MTU less 96 bytes of RoCE headers, rounded down to an IB MTU.
    assert_eq!(iboe_mtu(1500), Some(3), "1024");
    assert_eq!(iboe_mtu(1024 + 96), Some(3));
    assert_eq!(iboe_mtu(1024 + 95), Some(2));
    assert_eq!(iboe_mtu(9000), Some(5), "4096");
    assert_eq!(iboe_mtu(256 + 95), None);
    assert_eq!(iboe_mtu_from_hw(1500 + 22), Some(3));
}

#[test]
fn a_roce_address_reply_from_hostile_firmware_decodes_or_is_none() {
    // Every byte pattern decodes without panicking; only a RoCE v2 entry of a known L3 type
    // with a non-zero address is taken.
    let mut out = [0u8; query_roce_address_out::SIZE];
    let mut x: u32 = 0x9e37_79b9;
    for round in 0..2000 {
        for b in out.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        if round % 2 == 0 {
            out[16 + 27] = 2;
        }
        if let Some((gid, _)) = roce_address_entry(&out) {
            assert_eq!(out[16 + 27], 2);
            assert!(out[16 + 26] & 0x0f <= 1, "a known L3 type");
            assert_ne!(gid.0, [0; 16]);
        }
    }
    let mut bad_type = [0u8; query_roce_address_out::SIZE];
    bad_type[16 + 15] = 1;
    bad_type[16 + 26] = 7;
    bad_type[16 + 27] = 2;
    assert_eq!(roce_address_entry(&bad_type), None, "unknown L3 type");
}

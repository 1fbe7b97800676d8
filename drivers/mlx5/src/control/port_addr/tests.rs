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

/// The 48-byte `set_roce_address_in` image, written field by field from `mlx5_ifc.h`
/// (`opcode` bytes 0..2, `roce_address_index` bytes 8..10, `vhca_port_num` the low nibble of
/// byte 11, `roce_address` at byte 16: `source_l3_address` 16 bytes, `vlan_valid`/`vlan_id`
/// bytes 16..18, `source_mac_47_32` 18..20, `source_mac_31_0` 20..24, `roce_l3_type` the low
/// nibble of byte 26, `roce_version` byte 27) with the values the kernel's `set_roce_addr` and
/// `mlx5_core_roce_gid_set` put in them; independent of the driver's accessors.
fn kernel_image(index: u16, gid: Option<[u8; 16]>, mac: [u8; 6], l3_type: u8) -> [u8; 48] {
    let mut c = [0u8; 48];
    c[0..2].copy_from_slice(&[0x07, 0x61]);
    c[8..10].copy_from_slice(&index.to_be_bytes());
    if let Some(g) = gid {
        c[16..32].copy_from_slice(&g);
        c[34..40].copy_from_slice(&mac);
    }
    c[16 + 26] = l3_type;
    c[16 + 27] = 2;
    c
}

#[test]
fn set_roce_address_ipv4_is_the_kernels_image_with_the_v4_mapped_gid() {
    let c =
        set_roce_address_cmd(3, Some((IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), MAC)), 1, &caps())
            .unwrap();
    // `memcpy(addr_l3_addr, gid, 16)` of the GID `::ffff:10.0.0.2`, L3 type IPv4 (0).
    let gid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2];
    assert_eq!(c, kernel_image(3, Some(gid), MAC.0, 0));
    assert_eq!(&c[16 + 10..16 + 16], &[0xff, 0xff, 10, 0, 0, 2], "not ::10.0.0.2");
}

#[test]
fn set_roce_address_ipv6_is_the_kernels_image() {
    let v6 = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x4d, 0x11ff, 0xfe22, 0x3344);
    let c = set_roce_address_cmd(1, Some((IpAddr::V6(v6), MAC)), 2, &caps()).unwrap();
    assert_eq!(c, kernel_image(1, Some(v6.octets()), MAC.0, 1));
    // An IPv4-mapped IPv6 address is an IPv4 GID (`ipv6_addr_v4mapped`).
    let mapped = Ipv4Addr::new(192, 0, 2, 9).to_ipv6_mapped();
    let c = set_roce_address_cmd(1, Some((IpAddr::V6(mapped), MAC)), 1, &caps()).unwrap();
    assert_eq!(c, kernel_image(1, Some(mapped.octets()), MAC.0, 0));
}

#[test]
fn clearing_a_gid_sends_roce_v2_and_ipv6_as_the_kernel_does() {
    // `mlx5_ib_del_gid` -> `set_roce_addr(.., NULL, attr)`: RoCE v2 GID, no address, so the
    // not-v4-mapped branch: version 2, L3 type IPv6; no address, no MAC.
    let cleared = set_roce_address_cmd(1, None, 1, &caps()).unwrap();
    assert_eq!(cleared, kernel_image(1, None, [0; 6], 1));
    assert_eq!((cleared[16 + 26], cleared[16 + 27]), (1, 2), "not version 0, type 0");
}

#[test]
fn set_roce_address_ports_and_bounds() {
    let v6 = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x4d, 0x11ff, 0xfe22, 0x3344);
    let multi = HcaCaps { num_vhca_ports: 2, ..caps() };
    let c = set_roce_address_cmd(1, Some((IpAddr::V6(v6), MAC)), 2, &multi).unwrap();
    assert_eq!(c[11] & 0x0f, 2, "vhca_port_num where the device has several");
    let c = set_roce_address_cmd(1, None, 2, &multi).unwrap();
    assert_eq!(c[11] & 0x0f, 2, "on a clear too");
    assert_eq!(set_roce_address_cmd(1, None, 2, &caps()).unwrap()[11], 0, "not on one port");
    assert!(matches!(set_roce_address_cmd(16, None, 1, &caps()), Err(Error::InvalidArgument(_))));
    let v4_only = HcaCaps { roce_l3_types: 0b10, ..caps() };
    assert!(matches!(
        set_roce_address_cmd(0, Some((IpAddr::V6(v6), MAC)), 1, &v4_only),
        Err(Error::Unsupported(_))
    ));
}

#[test]
fn a_read_back_entry_must_hold_the_gid_its_l3_type_says() {
    let mut out = [0u8; query_roce_address_out::SIZE];
    out[16..48]
        .copy_from_slice(&kernel_image(0, Some(Gid::from_ipv4([10, 0, 0, 2]).0), MAC.0, 0)[16..48]);
    assert_eq!(roce_address_entry(&out), Some((Gid::from_ipv4([10, 0, 0, 2]), MAC)));
    // The deprecated IPv4-compatible form `::10.0.0.2` under L3 type IPv4 is another GID than
    // the one the port has for that address: not taken.
    let mut compat = out;
    compat[16 + 10..16 + 12].copy_from_slice(&[0, 0]);
    assert_eq!(roce_address_entry(&compat), None);
    // Any other prefix under L3 type IPv4 is not an IPv4 GID.
    let mut junk = out;
    junk[16 + 3] = 7;
    assert_eq!(roce_address_entry(&junk), None);
    // A v4-mapped GID under L3 type IPv6: inconsistent.
    let mut mistyped = out;
    mistyped[16 + 26] = 1;
    assert_eq!(roce_address_entry(&mistyped), None);
    // What a clear leaves (version 2, type IPv6, no address) is an empty entry.
    let mut cleared = [0u8; query_roce_address_out::SIZE];
    cleared[16..48].copy_from_slice(&kernel_image(0, None, [0; 6], 1)[16..48]);
    assert_eq!(roce_address_entry(&cleared), None);
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

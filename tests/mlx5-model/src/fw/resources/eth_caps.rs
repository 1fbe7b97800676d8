//! The Ethernet capability pages: what the model offers the Ethernet path, in the layouts
//! of `per_protocol_networking_offload_caps` and `flow_table_nic_cap` (`mlx5_ifc.h`).

use crate::fw::codes::CAP_INLINE_MODE_L2;
use crate::fw::ifc::{
    flow_table_nic_cap as ft, flow_table_prop_layout as prop,
    per_protocol_networking_offload_caps as eth, query_hca_cap_out,
};

/// Capability type 1: no checksum, LSO or VLAN offloads; L2 headers always inline
/// (`MLX5_CAP_INLINE_MODE_L2`: the kernel's `mlx5_query_min_inline` then inlines the
/// Ethernet header, and the model requires it).
pub(crate) fn ethernet_offloads() -> Vec<u8> {
    let mut c = vec![0u8; query_hca_cap_out::SIZE - 16];
    eth::CSUM_CAP.set(&mut c, 0);
    eth::VLAN_CAP.set(&mut c, 0);
    eth::WQE_INLINE_MODE.set(&mut c, u64::from(CAP_INLINE_MODE_L2));
    c
}

/// log2 of the largest flow table the model accepts.
pub(crate) const LOG_MAX_FT_SIZE: u8 = 10;
/// log2 of the number of flow tables.
pub(crate) const LOG_MAX_FT_NUM: u8 = 6;

/// The deepest NIC RX flow table level. The kernel builds its NIC RX namespace tree only
/// from the priorities whose `min_ft_level` is at most this (6.12 `fs_core.c`
/// `init_root_tree_recursive`), and then needs the ANCHOR priority (`ANCHOR_MIN_LEVEL` =
/// `BY_PASS_MIN_LEVEL` + 1 = 39) to create its anchor table: below that the probe fails
/// (`create_anchor_flow_table`: "WARN_ON(!ns)"). 63 is the model's choice above it.
pub(crate) const MAX_FT_LEVEL: u8 = 63;

/// Capability type 7: NIC RX flow tables at levels up to [`MAX_FT_LEVEL`] (only the root
/// table steers: no chaining, so the kernel's chaining priorities, which need
/// `flow_modify_en`, stay out of its tree), 1 Ki entries, one destination per entry, the root
/// modifiable.
pub(crate) fn flow_table() -> Vec<u8> {
    let mut c = vec![0u8; query_hca_cap_out::SIZE - 16];
    let rx = ft::FLOW_TABLE_PROPERTIES_NIC_RECEIVE;
    prop::FT_SUPPORT.at(rx).set(&mut c, 1);
    prop::MODIFY_ROOT.at(rx).set(&mut c, 1);
    prop::FLOW_MODIFY_EN.at(rx).set(&mut c, 0);
    prop::LOG_MAX_FT_SIZE.at(rx).set(&mut c, u64::from(LOG_MAX_FT_SIZE));
    prop::MAX_FT_LEVEL.at(rx).set(&mut c, u64::from(MAX_FT_LEVEL));
    prop::LOG_MAX_FT_NUM.at(rx).set(&mut c, u64::from(LOG_MAX_FT_NUM));
    prop::LOG_MAX_DESTINATION.at(rx).set(&mut c, 0);
    prop::LOG_MAX_FLOW.at(rx).set(&mut c, u64::from(LOG_MAX_FT_SIZE));
    c
}

//! `MAD_IFC` (0x50d) on an Ethernet port.
//!
//! In a 6.12 guest the one `MAD_IFC` (op_mod 3: no work completion, so `mlx5_MAD_IFC` ignores
//! M_Key and B_Key) came from ib_core asking the performance-management class for
//! ClassPortInfo while it registered `mlx5_0` (`sysfs.c` `get_counter_table` ->
//! `get_perf_mad` -> `mlx5_ib_process_mad`). A ConnectX reports `vport_counters`, and with it
//! `mlx5_ib_process_mad` answers every performance-management Get itself (`process_pma_cmd`):
//! ClassPortInfo with no command at all. So real firmware never sees that MAD; the model
//! reports the capability and still refuses `MAD_IFC` itself (no subnet agent on Ethernet).

use super::*;
use crate::fw::codes::syndrome as syn;

#[test]
fn vport_counters_keep_the_perf_class_away_from_mad_ifc() {
    let mut d = up();
    for cur in [false, true] {
        let caps = d.query_caps(CapType::General, cur);
        assert_eq!(ifc::cmd_hca_cap::VPORT_COUNTERS.get(&caps), 1, "cur {cur}");
    }
    let inp = input(Opcode::MadIfc, 3, 16 + 8 + 256);
    assert_eq!(d.status(&inp, 16 + 256), (CmdStatus::BadOp, syn::NOT_ON_ETHERNET));
}

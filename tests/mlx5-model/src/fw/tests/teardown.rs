//! Teardown as the kernel's `mlx5_core` (6.12) does it at unbind.

use super::*;

fn nic_rx_table(d: &mut Dev) -> u32 {
    use ifc::create_flow_table_in as i;
    let mut inp = input(Opcode::CreateFlowTable, 0, i::SIZE);
    i::TABLE_TYPE.set(&mut inp, u64::from(FLOW_TABLE_TYPE_NIC_RX));
    set_in(&mut inp, i::FLOW_TABLE_CONTEXT, ifc::flow_table_context::LOG_SIZE, 4);
    ifc::create_flow_table_out::TABLE_ID.get(&d.ok(&inp, 16)) as u32
}

fn set_root(d: &mut Dev, table: u32) -> (CmdStatus, u32) {
    use ifc::set_flow_table_root_in as i;
    let mut inp = input(Opcode::SetFlowTableRoot, 0, i::SIZE);
    i::TABLE_TYPE.set(&mut inp, u64::from(FLOW_TABLE_TYPE_NIC_RX));
    i::TABLE_ID.set(&mut inp, u64::from(table));
    d.status(&inp, 16)
}

fn destroy_table(d: &mut Dev, table: u32) -> (CmdStatus, u32) {
    use ifc::destroy_flow_table_in as i;
    let mut inp = input(Opcode::DestroyFlowTable, 0, i::SIZE);
    i::TABLE_TYPE.set(&mut inp, u64::from(FLOW_TABLE_TYPE_NIC_RX));
    i::TABLE_ID.set(&mut inp, u64::from(table));
    d.status(&inp, 16)
}

/// 6.12 `fs_core.c` `update_root_ft_destroy`: the root table with no table after it is
/// destroyed without a `SET_FLOW_TABLE_ROOT` first (`root_ft = NULL`, no command). The firmware
/// takes it and the type has no root; a later table can be made root again. Then
/// `TEARDOWN_HCA` finds nothing left and succeeds.
#[test]
fn the_root_table_is_destroyed_as_the_kernel_leaves_it_and_teardown_follows() {
    let mut d = up();
    let ft = nic_rx_table(&mut d);
    assert_eq!(set_root(&mut d, ft), (CmdStatus::Ok, 0));
    assert_eq!(destroy_table(&mut d, ft), (CmdStatus::Ok, 0), "root table destroyed");
    assert_eq!(destroy_table(&mut d, ft).0, CmdStatus::BadResource, "gone");
    // Rootless now: a new table can become root.
    let ft2 = nic_rx_table(&mut d);
    assert_eq!(set_root(&mut d, ft2), (CmdStatus::Ok, 0));
    assert_eq!(destroy_table(&mut d, ft2), (CmdStatus::Ok, 0));
    assert_eq!(d.fw.live_objects(), 0);
    let mut td = input(Opcode::TeardownHca, 0, 16);
    ifc::teardown_hca_in::PROFILE.set(&mut td, u64::from(TEARDOWN_GRACEFUL));
    assert_eq!(d.status(&td, 16), (CmdStatus::Ok, 0));
}

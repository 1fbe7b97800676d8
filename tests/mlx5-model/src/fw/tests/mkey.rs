//! Memory keys as the kernel's `mlx5_ib` (6.12 `mr.c`, `umr.h`) makes them.

use super::*;

/// `mlx5r_umr_can_load_pas` (6.12 `drivers/infiniband/hw/mlx5/umr.h`) is false when
/// `umr_modify_entity_size_disabled` is set: the MR cache then keeps no pre-made `free` keys
/// (its entries' limit is 0) and `create_real_mr` registers a user MR with `reg_create`, a
/// `CREATE_MKEY` carrying the page list. The model has no UMR engine, so it says so.
#[test]
fn umr_cannot_change_the_entity_size_so_mlx5_ib_registers_with_create_mkey() {
    let mut d = up();
    for cur in [false, true] {
        let caps = d.query_caps(CapType::General, cur);
        assert_eq!(ifc::cmd_hca_cap::UMR_MODIFY_ENTITY_SIZE_DISABLED.get(&caps), 1, "cur {cur}");
    }
}

/// `reg_create` (6.12 `mr.c`): `umr_en` 1, `qpn` 0xffffff, `start_addr` the user's virtual
/// address (not page aligned: the offset into the first page is kept), `len`, `log_page_size`,
/// and the umem's pages in any order (`mlx5_ib_populate_pas`, entries flagged present).
#[test]
fn a_user_mr_as_reg_create_makes_it_is_taken() {
    use ifc::create_mkey_in as i;
    use ifc::mkc;
    let mut d = up();
    let pd = d.alloc_pd();
    let (mut inp, _) = d.mkey_input(pd, 3 * 4096, 0x5a);
    let m = |b: &mut Vec<u8>, f: Field, v: u64| set_in(b, i::MKEY_CONTEXT, f, v);
    m(&mut inp, mkc::UMR_EN, 1);
    m(&mut inp, mkc::QPN, 0xff_ffff);
    m(&mut inp, mkc::START_ADDR, 0x7f12_3456_7100);
    m(&mut inp, mkc::LEN, 2 * 4096 + 0x100);
    let out = d.ok(&inp, 16);
    assert_ne!(ifc::create_mkey_out::MKEY_INDEX.get(&out), 0);
}

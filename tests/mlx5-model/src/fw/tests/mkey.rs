//! Memory keys as the kernel's `mlx5_ib` (6.12 `mr.c`, `umr.h`) makes them.

use super::*;
use crate::fw::codes::syndrome as syn;

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

/// The MR cache's keys (6.12 `mr.c` `set_cache_mkc`, made in batches by `add_keys` with
/// `CREATE_MKEY` and no page list): `free` 1, `umr_en` 1, access mode MTT (or KSM for
/// implicit ODP), `translations_octword_size` for the descriptors a UMR loads later,
/// `log_page_size` 12, `qpn` 0xffffff. Real firmware takes them; the key is disabled until a
/// UMR enables it, and `DESTROY_MKEY` frees it.
#[test]
fn free_keys_as_the_mr_cache_makes_them_are_taken_and_destroyed() {
    use ifc::create_mkey_in as i;
    use ifc::mkc;
    let mut d = up();
    let pd = d.alloc_pd();
    let cache_key = |mode: u8, octs: u64, variant: u8| {
        let mut inp = input(Opcode::CreateMkey, 0, i::SIZE);
        let m = |b: &mut Vec<u8>, f: Field, v: u64| set_in(b, i::MKEY_CONTEXT, f, v);
        m(&mut inp, mkc::FREE, 1);
        m(&mut inp, mkc::UMR_EN, 1);
        m(&mut inp, mkc::ACCESS_MODE_1_0, u64::from(mode & 3));
        m(&mut inp, mkc::ACCESS_MODE_4_2, u64::from(mode >> 2));
        m(&mut inp, mkc::LW, 1);
        m(&mut inp, mkc::LR, 1);
        m(&mut inp, mkc::PD, u64::from(pd));
        m(&mut inp, mkc::QPN, 0xff_ffff);
        m(&mut inp, mkc::MKEY_7_0, u64::from(variant));
        m(&mut inp, mkc::TRANSLATIONS_OCTWORD_SIZE, octs);
        m(&mut inp, mkc::LOG_PAGE_SIZE, 12);
        inp
    };
    // ndescs 4 (the smallest cache entry): get_mkc_octo_size = 2 octwords.
    let mut keys = Vec::new();
    for (mode, variant) in [(MKC_ACCESS_MODE_MTT, 0x10), (MKC_ACCESS_MODE_KSM, 0x20)] {
        let out = d.ok(&cache_key(mode, 2, variant), 16);
        keys.push(ifc::create_mkey_out::MKEY_INDEX.get(&out));
    }
    assert_ne!(keys[0], keys[1]);
    // Refused: no descriptors to load, or a mode UMR cannot load (PA).
    let bad = (CmdStatus::BadParam, syn::EMPTY_RANGE);
    assert_eq!(d.status(&cache_key(MKC_ACCESS_MODE_MTT, 0, 0x30), 16), bad);
    let pa = (CmdStatus::BadParam, syn::UNSUPPORTED_CONTEXT);
    assert_eq!(d.status(&cache_key(MKC_ACCESS_MODE_PA, 2, 0x31), 16), pa);
    for k in keys {
        let mut del = input(Opcode::DestroyMkey, 0, 16);
        ifc::destroy_mkey_in::MKEY_INDEX.set(&mut del, k);
        d.ok(&del, 16);
    }
    assert_eq!(d.fw.live_objects(), 1, "only the PD is left");
}

//! The generated command layouts against the kernel's `include/linux/mlx5/mlx5_ifc.h`.
//!
//! Re-parses the header (Debian's `linux-headers-*-common`, which CI installs; or `$MLX5_IFC_H`)
//! and checks every emitted constant, layout size and enum value, then that the committed file
//! is exactly what `cargo xtask ifc` would write. Without the header the test says so and
//! passes, unless `CI` is set, where a missing header is a failure.

#[path = "../ifc/gen.rs"]
mod gen;

use rdma_pmd_mlx5::layout::ifc::generated::{CONSTS, FIELDS, SIZES};

fn header() -> Option<gen::Header> {
    match gen::find_header() {
        Some(p) => Some(gen::Header::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))),
        None if std::env::var_os("CI").is_some() => {
            panic!("mlx5_ifc.h not found on CI: install linux-headers-amd64 or set MLX5_IFC_H")
        }
        None => {
            eprintln!(
                "SKIPPED: mlx5_ifc.h not found (install linux-headers-amd64 or set MLX5_IFC_H); \
                 generated layouts not checked against the kernel header"
            );
            None
        }
    }
}

#[test]
fn every_generated_field_matches_the_header() {
    let Some(h) = header() else { return };
    let mut bad = Vec::new();
    for (layout, member, f) in FIELDS {
        match h.field(layout, member) {
            Ok(r) if r.bit == f.bit as u64 && r.width == f.width as u64 => {}
            Ok(r) => bad.push(format!(
                "{layout}.{member}: generated ({:#x}, {:#x}), header ({:#x}, {:#x})",
                f.bit, f.width, r.bit, r.width
            )),
            Err(e) => bad.push(e),
        }
    }
    for (layout, bits) in SIZES {
        match h.size_bits(layout) {
            Ok(b) if b == *bits as u64 => {}
            Ok(b) => bad.push(format!("{layout}: generated {bits:#x} bits, header {b:#x}")),
            Err(e) => bad.push(e),
        }
    }
    for (name, v) in CONSTS {
        match h.consts.get(*name) {
            Some(hv) if *hv == *v as u64 => {}
            other => bad.push(format!("{name}: generated {v:#x}, header {other:?}")),
        }
    }
    assert!(bad.is_empty(), "{} mismatches:\n{}", bad.len(), bad.join("\n"));
    assert!(FIELDS.len() > 250, "only {} fields checked", FIELDS.len());
}

#[test]
fn committed_file_is_what_the_generator_writes() {
    let Some(h) = header() else { return };
    let fresh = gen::generate(&h).expect("generate");
    let committed = include_str!("../src/layout/ifc/generated.rs");
    if fresh != committed {
        let diff: Vec<String> = fresh
            .lines()
            .zip(committed.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(10)
            .map(|(i, (a, b))| format!("line {}: header gives `{a}`, file has `{b}`", i + 1))
            .collect();
        panic!("generated.rs is stale; run `cargo xtask ifc`\n{}", diff.join("\n"));
    }
}

#[test]
fn parser_handles_the_header_constructs() {
    // A miniature header with every construct the generator relies on.
    let src = r#"
        enum { MLX5_X_A = 0x3, MLX5_X_B = 1 << 4, MLX5_X_C = MLX5_X_A, };
        #define MLX5_X_N 2
        struct mlx5_ifc_inner_bits { u8 a[0x4]; u8 reserved_at_4[0x1c]; };
        struct mlx5_ifc_outer_bits {
            u8 op[0x10];  /* a comment */
            u8 reserved_at_10[0x10];
            struct mlx5_ifc_inner_bits in;
            union { struct mlx5_ifc_inner_bits x; u8 reserved_at_0[0x40]; } u;
            u8 arr[MLX5_X_N][0x8];
            u8 flex[][0x40];
        };
    "#;
    let h = gen::Header::parse(&[src.to_string()]).unwrap();
    assert_eq!(h.consts["MLX5_X_B"], 16);
    assert_eq!(h.consts["MLX5_X_C"], 3);
    assert_eq!(h.size_bits("inner").unwrap(), 0x20);
    assert_eq!(h.size_bits("outer").unwrap(), 0x20 + 0x20 + 0x40 + 0x10);
    let f = h.field("outer", "u").unwrap();
    assert_eq!((f.bit, f.width), (0x40, 0x40));
    let f = h.field("outer", "arr").unwrap();
    assert_eq!((f.bit, f.width, f.count, f.array), (0x80, 8, 2, true));
    let f = h.field("outer", "flex").unwrap();
    assert_eq!((f.bit, f.width, f.count), (0x90, 0x40, 0));
    assert!(h.field("outer", "missing").is_err());
}

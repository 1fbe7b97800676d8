//! The numbers and layouts above against the installed `<linux/vfio.h>` (linux-libc-dev): a
//! small C program prints what the header says, and every line must match.

use super::*;
use std::collections::BTreeMap;
use std::process::Command;

/// (name as printed by the C program, C expression, our value).
fn expected() -> Vec<(&'static str, &'static str, u64)> {
    macro_rules! num {
        ($($n:ident),* $(,)?) => { vec![$((stringify!($n), stringify!($n), $n as u64)),*] };
    }
    macro_rules! layout {
        ($c:literal, $t:ty { $($f:ident),* }) => {{
            let mut v = vec![(concat!("sizeof ", $c), concat!("sizeof(struct ", $c, ")"),
                              size_of::<$t>() as u64)];
            $(v.push((concat!("offsetof ", $c, ".", stringify!($f)),
                      concat!("offsetof(struct ", $c, ", ", stringify!($f), ")"),
                      offset_of!($t, $f) as u64));)*
            v
        }};
    }
    let mut all = num![
        VFIO_GET_API_VERSION,
        VFIO_CHECK_EXTENSION,
        VFIO_SET_IOMMU,
        VFIO_GROUP_GET_STATUS,
        VFIO_GROUP_SET_CONTAINER,
        VFIO_GROUP_UNSET_CONTAINER,
        VFIO_GROUP_GET_DEVICE_FD,
        VFIO_DEVICE_GET_INFO,
        VFIO_DEVICE_GET_REGION_INFO,
        VFIO_DEVICE_RESET,
        VFIO_IOMMU_GET_INFO,
        VFIO_IOMMU_MAP_DMA,
        VFIO_IOMMU_UNMAP_DMA,
        VFIO_API_VERSION,
        VFIO_GROUP_FLAGS_VIABLE,
        VFIO_GROUP_FLAGS_CONTAINER_SET,
        VFIO_DEVICE_FLAGS_RESET,
        VFIO_DEVICE_FLAGS_PCI,
        VFIO_REGION_INFO_FLAG_READ,
        VFIO_REGION_INFO_FLAG_WRITE,
        VFIO_REGION_INFO_FLAG_MMAP,
        VFIO_PCI_BAR0_REGION_INDEX,
        VFIO_PCI_CONFIG_REGION_INDEX,
        VFIO_DMA_MAP_FLAG_READ,
        VFIO_DMA_MAP_FLAG_WRITE,
        VFIO_IOMMU_INFO_CAPS,
        VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE,
    ];
    all.push(("VFIO_TYPE1v2_IOMMU", "VFIO_TYPE1v2_IOMMU", VFIO_TYPE1V2_IOMMU));
    all.extend(layout!("vfio_group_status", VfioGroupStatus { argsz, flags }));
    all.extend(layout!(
        "vfio_device_info",
        VfioDeviceInfo { argsz, flags, num_regions, num_irqs, cap_offset }
    ));
    all.extend(layout!(
        "vfio_region_info",
        VfioRegionInfo { argsz, flags, index, cap_offset, size, offset }
    ));
    all.extend(layout!(
        "vfio_iommu_type1_info",
        VfioIommuType1Info { argsz, flags, iova_pgsizes, cap_offset }
    ));
    all.extend(layout!("vfio_info_cap_header", VfioInfoCapHeader { id, version, next }));
    all.extend(layout!(
        "vfio_iommu_type1_info_cap_iova_range",
        VfioIommuType1InfoCapIovaRange { header, nr_iovas, reserved }
    ));
    all.extend(layout!("vfio_iova_range", VfioIovaRange { start, end }));
    all.extend(layout!(
        "vfio_iommu_type1_dma_map",
        VfioIommuType1DmaMap { argsz, flags, vaddr, iova, size }
    ));
    all.extend(layout!(
        "vfio_iommu_type1_dma_unmap",
        VfioIommuType1DmaUnmap { argsz, flags, iova, size }
    ));
    all
}

/// Compile and run the C program; returns name → value.
fn from_header(items: &[(&str, &str, u64)]) -> BTreeMap<String, u64> {
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <linux/vfio.h>\nint main(void) {\n",
    );
    for (name, expr, _) in items {
        c.push_str(&format!(
            "  printf(\"%s=%llu\\n\", \"{name}\", (unsigned long long)({expr}));\n"
        ));
    }
    c.push_str("  return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("rdma-pmd-vfio-uapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("uapi.c"), dir.join("uapi"));
    std::fs::write(&src, c).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} (install a C compiler): {e}"));
    assert!(
        out.status.success(),
        "{cc} failed on <linux/vfio.h> (install linux-libc-dev):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the uapi probe");
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8(run.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('=').expect("name=value");
            (k.to_string(), v.parse().expect("a number"))
        })
        .collect()
}

#[test]
fn ioctl_numbers_and_layouts_match_the_installed_header() {
    let items = expected();
    let header = from_header(&items);
    let mismatches: Vec<String> = items
        .iter()
        .filter(|(name, _, ours)| header.get(*name) != Some(ours))
        // Headers before Linux 6.8 end `vfio_device_info` at `cap_offset`, without the `pad`
        // that later ones name; the kernel accepts either size as `argsz`.
        .filter(|(name, _, ours)| {
            !(*name == "sizeof vfio_device_info" && header.get(*name) == Some(&(ours - 4)))
        })
        .map(|(name, _, ours)| match header.get(*name) {
            Some(h) => format!("{name}: ours {ours:#x}, header {h:#x}"),
            None => format!("{name}: ours {ours:#x}, not printed by the probe"),
        })
        .collect();
    assert!(mismatches.is_empty(), "differences from <linux/vfio.h>:\n{}", mismatches.join("\n"));
    assert_eq!(header.len(), items.len());
}

#[test]
fn io_encoding_matches_the_documented_examples() {
    // `_IO(';', 100)` is 0x3b64: type in bits 8..16, number in bits 0..8, no size or direction.
    assert_eq!(VFIO_GET_API_VERSION, 0x3b64);
    assert_eq!(VFIO_IOMMU_UNMAP_DMA, 0x3b72);
    // The generic `_IOC` puts the direction at bit 30 and the size at bit 16.
    assert_eq!(ioc(2, b'T', 1, 4), 0x8004_5401);
}

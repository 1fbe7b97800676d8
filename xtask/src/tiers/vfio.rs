//! Tier `vfio`: the VFIO backend against real vfio-pci devices.
//!
//! Boots a QEMU guest (see [`crate::vm`]): q35 with an emulated Intel IOMMU (interrupt remapping
//! on, without which `VFIO_SET_IOMMU` fails with EPERM), three QEMU `edu` PCI devices (28-bit
//! DMA mask, their default): the device under test, a second one for a container shared by two
//! devices, a third in a non-viable IOMMU group; Debian's kernel with `intel_iommu=on`, the vfio
//! modules, and 2 MiB hugepages reserved. `/init` binds the `edu`s to vfio-pci and runs the
//! statically linked test binaries of `rdma-pmd-hal` (`vfio::edu`) and `rdma-pmd-mlx5`
//! (`vfio::tests`) with `--ignored --test-threads=1`; their libtest summaries come back over the
//! serial console and become this tier's counts.

use std::path::PathBuf;
use std::time::Duration;

use super::Outcome;
use crate::util;
use crate::vm::{Guest, GuestFile};

/// Tests the guest must run: 13 in the HAL, 1 in mlx5. Fewer means a binary died early.
const EXPECTED: u32 = 14;

/// The test binaries' target: explicit, so that RUSTFLAGS reach only them (not build scripts).
const TARGET: &str = "x86_64-unknown-linux-gnu";

/// In load order. vfio_iommu_type1 is only a soft dependency of vfio, which `insmod` ignores.
/// virtio_pci claims the virtio device that makes the second edu's group non-viable.
const MODULES: &[&str] = &["vfio", "vfio_iommu_type1", "vfio_pci", "virtio_pci"];

/// `/init`'s script: find edu, bind it to vfio-pci, reserve hugepages, run the tests.
const SCRIPT: &str = r#"
addr=
addr2=
shared=
for d in /sys/bus/pci/devices/*; do
  if [ "$(cat $d/vendor)" = 0x1234 ] && [ "$(cat $d/device)" = 0x11e8 ]; then
    if [ "$(ls $d/iommu_group/devices | wc -l)" != 1 ]; then shared=${d##*/}
    elif [ -z "$addr" ]; then addr=${d##*/}
    else addr2=${d##*/}; fi
  fi
done
if [ -z "$addr" ] || [ -z "$addr2" ] || [ -z "$shared" ]; then echo "vfio-tier: edu devices missing"; exit 2; fi
for a in $addr $addr2 $shared; do
  echo vfio-pci > /sys/bus/pci/devices/$a/driver_override
  echo $a > /sys/bus/pci/drivers_probe
  g=$(readlink -f /sys/bus/pci/devices/$a/iommu_group)
  echo "vfio-tier: edu $a, IOMMU group ${g##*/}:"
  for m in $g/devices/*; do
    drv=$(readlink $m/driver); echo "vfio-tier:   ${m##*/} $(cat $m/vendor):$(cat $m/device) ${drv##*/}"
  done
done
echo "vfio-tier: /dev/vfio: $(ls /dev/vfio | tr '\n' ' ')"
echo 16 > /proc/sys/vm/nr_hugepages
grep -E 'HugePages_(Total|Free)|Hugepagesize' /proc/meminfo
export RDMA_PMD_VFIO_EDU=$addr RDMA_PMD_VFIO_EDU2=$addr2 RDMA_PMD_VFIO_EDU_SHARED=$shared RUST_BACKTRACE=1
/t/hal-tests --ignored --test-threads=1 --show-output vfio::edu::
hal=$?
/t/mlx5-tests --ignored --test-threads=1 vfio::tests::
mlx5=$?
echo "vfio-tier: DMAR faults logged: $(dmesg | grep -c 'DMAR: \[DMA')"
[ $hal = 0 ] && [ $mlx5 = 0 ]
"#;

/// Build the two test binaries statically; returns (hal, mlx5) paths.
fn build_tests() -> Result<(PathBuf, PathBuf), String> {
    let target_dir = util::root().join("target").join("vfio-guest");
    let mut cmd = util::cargo();
    cmd.args(["test", "--no-run", "--lib", "--message-format=json", "--target", TARGET])
        .args(["-p", "rdma-pmd-hal", "-p", "rdma-pmd-mlx5"])
        .args(["--features", "rdma-pmd-hal/vfio,rdma-pmd-mlx5/vfio"])
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("RUSTFLAGS", "-C target-feature=+crt-static");
    eprintln!("$ {cmd:?}");
    let out = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building the static test binaries failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let json = String::from_utf8_lossy(&out.stdout);
    let find = |krate: &str| {
        util::executables(&json)
            .into_iter()
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{krate}-")))
            })
            .ok_or_else(|| format!("cargo built no test binary for {krate}"))
    };
    Ok((find("rdma_pmd_hal")?, find("rdma_pmd_mlx5")?))
}

/// The guest: q35, Intel IOMMU with interrupt remapping; two edus each alone in its IOMMU group
/// (the device under test, and a second one for the shared-container test) and, behind a PCI
/// bridge, a third edu sharing a group with a virtio device (the non-viable group). TCG unless
/// KVM works.
fn guest(hal: PathBuf, mlx5: PathBuf) -> Guest {
    Guest {
        name: "vfio".into(),
        modules: MODULES.iter().map(|s| s.to_string()).collect(),
        files: vec![GuestFile::plain(hal, "/t/hal-tests"), GuestFile::plain(mlx5, "/t/mlx5-tests")],
        init_script: SCRIPT.into(),
        // The IOMMU must be created before the devices it translates for.
        qemu_args: [
            "-machine",
            "q35,kernel-irqchip=split",
            "-device",
            "intel-iommu,intremap=on",
            "-device",
            "edu",
            "-device",
            "edu",
            "-device",
            "pci-bridge,id=br0,chassis_nr=1",
            "-device",
            "edu,bus=br0,addr=1",
            "-device",
            "virtio-rng-pci,bus=br0,addr=2",
        ]
        .into_iter()
        .map(String::from)
        .collect(),
        cmdline: "intel_iommu=on".into(),
        memory_mib: 1024,
        cpus: 2,
        ..Guest::default()
    }
}

/// Counts from the guest's serial output: libtest summaries, plus one failure if the script
/// failed without a failing test, or if fewer tests ran than expected.
fn outcome(script_output: &str, exit: Option<i32>) -> Outcome {
    let (passed, mut failed) = util::count_libtest(script_output);
    let reported = passed + failed;
    if exit != Some(0) && failed == 0 {
        eprintln!("xtask: vfio: the guest script exited with {exit:?}");
        failed = 1;
    }
    if reported < EXPECTED {
        eprintln!("xtask: vfio: {reported} tests reported, {EXPECTED} expected");
        failed += 1;
    }
    Outcome { passed, failed, skipped: None }
}

pub fn run() -> Outcome {
    let (hal, mlx5) = match build_tests() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("xtask: vfio: {e}");
            return Outcome::check(false);
        }
    };
    match guest(hal, mlx5).boot(Duration::from_secs(300)) {
        Ok(s) => {
            eprintln!("\nvfio: guest exit {:?}, {:?}, {:.1?}", s.exit, s.accel, s.elapsed);
            if s.timed_out {
                eprintln!("xtask: vfio: the guest timed out");
            }
            outcome(s.script_output(), s.exit)
        }
        Err(crate::vm::VmError::MissingTools(apt)) => {
            Outcome::skip(format!("host tools missing; install with: {apt}"))
        }
        Err(e) => {
            eprintln!("xtask: vfio: {e}");
            Outcome::check(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_from_libtest_and_missing_tests_fail() {
        let good =
            "test result: ok. 13 passed; 0 failed; 0 ignored\ntest result: ok. 1 passed; 0 failed\n";
        let o = outcome(good, Some(0));
        assert_eq!((o.passed, o.failed), (14, 0));
        let crashed = "test result: ok. 13 passed; 0 failed; 0 ignored\n";
        let o = outcome(crashed, Some(1));
        assert_eq!((o.passed, o.failed), (13, 2), "script failure and a missing test");
        let o = outcome("", None);
        assert_eq!((o.passed, o.failed), (0, 2));
    }
}

//! Debian packages for the guest: `apt-get download` into `target/vm/debs/`, `dpkg -x` into
//! `target/vm/pkgs/<deb>/`, both once; the shared-library closure from `apt-cache depends`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{io_err, VmError};

/// The guest kernel: image, version and the unpacked package holding `lib/modules/<version>`.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// `boot/vmlinuz-<version>` inside the unpacked package.
    pub image: PathBuf,
    /// `uname -r` of the guest.
    pub version: String,
    /// Root of the unpacked package (`-b` of depmod, `-d` of modprobe).
    pub tree: PathBuf,
}

pub(crate) fn output(cmd: &mut Command) -> Result<String, VmError> {
    let shown = format!("{cmd:?}");
    let o =
        cmd.output().map_err(|e| VmError::Command { cmd: shown.clone(), detail: e.to_string() })?;
    if !o.status.success() {
        return Err(VmError::Command {
            cmd: shown,
            detail: String::from_utf8_lossy(&o.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The cached `.deb` of `pkg`, if one was downloaded before.
/// `pkg` may be `name=version` (apt writes the epoch's colon as `%3a` in file names).
fn cached_deb(debs: &Path, pkg: &str) -> Option<PathBuf> {
    let prefix = match pkg.split_once('=') {
        Some((name, version)) => format!("{name}_{}_", version.replace(':', "%3a")),
        None => format!("{pkg}_"),
    };
    let mut found: Vec<PathBuf> = fs::read_dir(debs)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            n.starts_with(&prefix) && n.ends_with(".deb")
        })
        .collect();
    found.sort();
    found.pop()
}

/// Download (once) the `.deb` of every package in `pkgs`; returns their paths in order.
fn download(cache: &Path, pkgs: &[String]) -> Result<Vec<PathBuf>, VmError> {
    download_with(cache, pkgs, &[])
}

/// [`download`] with extra `apt-get` options (another suite's lists).
pub(crate) fn download_with(
    cache: &Path,
    pkgs: &[String],
    apt: &[String],
) -> Result<Vec<PathBuf>, VmError> {
    let debs = cache.join("debs");
    fs::create_dir_all(&debs).map_err(io_err(&debs))?;
    let missing: Vec<&String> = pkgs.iter().filter(|p| cached_deb(&debs, p).is_none()).collect();
    if !missing.is_empty() {
        // Download into a private directory, then move: concurrent boots never see half a file.
        let tmp = debs.join(format!(".dl-{}", std::process::id()));
        fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        eprintln!(
            "vm: apt-get download {}",
            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
        );
        let r = output(
            Command::new("apt-get").args(apt).arg("download").args(&missing).current_dir(&tmp),
        );
        for e in fs::read_dir(&tmp).map_err(io_err(&tmp))?.flatten() {
            let to = debs.join(e.file_name());
            fs::rename(e.path(), &to).map_err(io_err(&to))?;
        }
        let _ = fs::remove_dir_all(&tmp);
        r?;
    }
    pkgs.iter()
        .map(|p| cached_deb(&debs, p).ok_or_else(|| VmError::NotFound(format!("package {p}"))))
        .collect()
}

/// Unpack (once) a `.deb`; returns the tree.
fn unpack(cache: &Path, deb: &Path) -> Result<PathBuf, VmError> {
    let stem = deb.file_stem().expect("a .deb file name").to_string_lossy().into_owned();
    let pkgs = cache.join("pkgs");
    let dest = pkgs.join(&stem);
    if dest.is_dir() {
        return Ok(dest);
    }
    let tmp = pkgs.join(format!(".x-{}-{stem}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
    output(Command::new("dpkg").arg("-x").arg(deb).arg(&tmp))?;
    if let Err(e) = fs::rename(&tmp, &dest) {
        // Another boot unpacked the same package meanwhile.
        let _ = fs::remove_dir_all(&tmp);
        if !dest.is_dir() {
            return Err(VmError::Io { path: dest, err: e });
        }
    }
    Ok(dest)
}

/// Direct `Depends`/`PreDepends` of `pkgs` (first of each alternative, virtual ones skipped).
fn depends(pkgs: &[String]) -> Result<BTreeSet<String>, VmError> {
    depends_with(pkgs, &[])
}

/// [`depends`] with extra `apt-cache` options.
pub(crate) fn depends_with(pkgs: &[String], apt: &[String]) -> Result<BTreeSet<String>, VmError> {
    let text = output(
        Command::new("apt-cache")
            .args(apt)
            .args(["depends", "--no-recommends", "--no-suggests", "--no-conflicts"])
            .args(["--no-breaks", "--no-replaces", "--no-enhances"])
            .args(pkgs),
    )?;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let t = line.trim_start();
        let rest = ["Depends:", "PreDepends:"].iter().find_map(|k| t.strip_prefix(k));
        if let Some(rest) = rest {
            let name = rest.trim();
            if !name.starts_with('<') {
                out.insert(name.trim_end_matches(":any").to_string());
            }
        }
    }
    Ok(out)
}

/// The subset of `pkgs` that Debian files under section `libs` (shared libraries), in the apt
/// state `apt` names.
fn libraries_with(pkgs: &[String], apt: &[String]) -> Result<BTreeSet<String>, VmError> {
    if pkgs.is_empty() {
        return Ok(BTreeSet::new());
    }
    let text =
        output(Command::new("apt-cache").args(apt).args(["show", "--no-all-versions"]).args(pkgs))?;
    let mut out = BTreeSet::new();
    let mut name = "";
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("Package: ") {
            name = n.trim();
        } else if let Some(sec) = line.strip_prefix("Section: ") {
            if sec.trim().rsplit('/').next() == Some("libs") {
                out.insert(name.to_string());
            }
        }
    }
    Ok(out)
}

/// Packages in `pkgs` plus their shared-library closure: every dependency in section `libs`,
/// recursively. Other dependencies (debconf, udev, adduser, ...) are left out: the guest runs
/// no package scripts.
pub fn closure(pkgs: &[String]) -> Result<Vec<String>, VmError> {
    closure_with(pkgs, &[])
}

/// [`closure`] in the apt state `apt` names. A name in `pkgs` may carry `=version`; the
/// dependencies are those of that version, and the result keeps the name as given.
pub(crate) fn closure_with(pkgs: &[String], apt: &[String]) -> Result<Vec<String>, VmError> {
    let bare = |p: &String| p.split('=').next().unwrap_or_default().to_string();
    let mut all: BTreeSet<String> = pkgs.iter().cloned().collect();
    let mut seen: BTreeSet<String> = pkgs.iter().map(bare).collect();
    let mut frontier: Vec<String> = pkgs.to_vec();
    while !frontier.is_empty() {
        let new: Vec<String> =
            depends_with(&frontier, apt)?.into_iter().filter(|d| !seen.contains(d)).collect();
        let next: Vec<String> = libraries_with(&new, apt)?.into_iter().collect();
        seen.extend(next.iter().cloned());
        all.extend(next.iter().cloned());
        frontier = next;
    }
    Ok(all.into_iter().collect())
}

/// Download and unpack `pkgs` and their library closure; returns the unpacked trees.
pub fn fetch_closure(cache: &Path, pkgs: &[String]) -> Result<Vec<PathBuf>, VmError> {
    let all = closure(pkgs)?;
    let debs = download(cache, &all)?;
    debs.iter().map(|d| unpack(cache, d)).collect()
}

/// Where the guest kernel comes from. The rest of the guest is bookworm's either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelSource {
    /// Debian bookworm's 6.1 kernel (rdma_rxe works in the initial network namespace only).
    #[default]
    Bookworm,
    /// The newest kernel of Debian's trixie-backports (7.x; its rdma_rxe creates its RoCE UDP
    /// socket in the namespace of the netdev, so rxe devices work in network namespaces). Its
    /// lists live in a private apt state under the cache (the host's sources are untouched).
    TrixieBackports,
    /// Debian trixie's 6.12 kernel (the series is pinned: `linux-image-6.12.*-amd64`; the first
    /// one downloaded stays cached), from the private trixie apt state. The `kernel` tier's
    /// guest: its mlx5_core/mlx5_ib judge the device model.
    Trixie612,
}

/// The kernel `source` names, downloaded and unpacked once, with `depmod -b` run on its modules.
pub fn kernel_from(cache: &Path, source: KernelSource) -> Result<Kernel, VmError> {
    match source {
        KernelSource::Bookworm => kernel(cache),
        KernelSource::TrixieBackports => backports_kernel(cache),
        KernelSource::Trixie612 => trixie_kernel(cache),
    }
}

/// `apt-get`/`apt-cache` options for a private apt state under `cache/<dir>/` whose sources
/// are `suites` of Debian's archive (main, signed by the Debian archive keyring), with its own
/// lists, cache, (empty) dpkg status and preferences: the host's sources, pins and installed
/// packages play no part, and nothing is installed. The lists are fetched once.
pub(crate) fn private_apt(
    cache: &Path,
    dir: &str,
    suites: &[&str],
) -> Result<Vec<String>, VmError> {
    let dir = cache.join(dir);
    let lists = dir.join("lists");
    fs::create_dir_all(lists.join("partial")).map_err(io_err(&lists))?;
    let prefs = dir.join("preferences.d");
    fs::create_dir_all(&prefs).map_err(io_err(&prefs))?;
    let status = dir.join("status");
    if !status.exists() {
        fs::write(&status, "").map_err(io_err(&status))?;
    }
    let sources = dir.join("sources.list");
    let text: String = suites
        .iter()
        .map(|s| {
            format!(
                "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] \
                 http://deb.debian.org/debian {s} main\n"
            )
        })
        .collect();
    fs::write(&sources, text).map_err(io_err(&sources))?;
    let opts = vec![
        format!("-oDir::Etc::SourceList={}", sources.display()),
        "-oDir::Etc::SourceParts=-".to_string(),
        format!("-oDir::State::Lists={}", lists.display()),
        format!("-oDir::State::status={}", status.display()),
        format!("-oDir::Cache={}", dir.join("cache").display()),
        "-oDir::Etc::Preferences=/dev/null".to_string(),
        format!("-oDir::Etc::PreferencesParts={}", prefs.display()),
        "-oAPT::Get::List-Cleanup=0".to_string(),
    ];
    let have = |suite: &str| {
        let want = format!("_dists_{suite}_main_binary-amd64_Packages");
        fs::read_dir(&lists)
            .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().contains(&want)))
            .unwrap_or(false)
    };
    if !suites.iter().all(|s| have(s)) {
        eprintln!("vm: fetching the package lists of {} (private apt state)", suites.join(", "));
        output(Command::new("apt-get").args(&opts).args(["update", "-qq"]))?;
    }
    Ok(opts)
}

/// The private trixie-backports state of the wire tier's kernel.
fn backports_apt(cache: &Path) -> Result<Vec<String>, VmError> {
    private_apt(cache, "apt-trixie-backports", &["trixie-backports"])
}

/// The private trixie + trixie-backports state: the `kernel` tier's guest kernel (trixie) and
/// QEMU 11.1 (trixie-backports) with its libraries (trixie).
pub(crate) fn trixie_apt(cache: &Path) -> Result<Vec<String>, VmError> {
    private_apt(cache, "apt-trixie", &["trixie", "trixie-backports"])
}

/// trixie-backports' `linux-image-amd64`: since 6.18 Debian splits the image package into
/// `linux-binary-<v>` (the `vmlinuz`, under `usr/lib/modules/<v>/`) and `linux-modules-<v>`
/// (xz-compressed modules, also under `usr/`).
fn backports_kernel(cache: &Path) -> Result<Kernel, VmError> {
    let apt = backports_apt(cache)?;
    let image = depends_with(&["linux-image-amd64".to_string()], &apt)?
        .into_iter()
        .find(|d| d.starts_with("linux-image-") && d.ends_with("-amd64"))
        .ok_or_else(|| VmError::NotFound("linux-image-*-amd64 in trixie-backports".into()))?;
    let version = image["linux-image-".len()..].to_string();
    let parts = [format!("linux-binary-{version}"), format!("linux-modules-{version}")];
    let debs = download_with(cache, &parts, &apt)?;
    let binary = unpack(cache, &debs[0])?;
    let modules = unpack(cache, &debs[1])?.join("usr");
    let image = binary.join("usr/lib/modules").join(&version).join("vmlinuz");
    if !image.is_file() {
        return Err(VmError::NotFound(format!("{}", image.display())));
    }
    if !modules.join("lib/modules").join(&version).join("modules.dep").exists() {
        output(Command::new("depmod").arg("-b").arg(&modules).arg(&version))?;
    }
    Ok(Kernel { image, version, tree: modules })
}

/// trixie's `linux-image-6.12.*-amd64` (see [`KernelSource::Trixie612`]).
fn trixie_kernel(cache: &Path) -> Result<Kernel, VmError> {
    const PREFIX: &str = "linux-image-6.12.";
    let pkg = match cached_kernel_package(cache, PREFIX) {
        Some(p) => p,
        None => {
            let apt = trixie_apt(cache)?;
            let pkg = depends_with(&["linux-image-amd64".to_string()], &apt)?
                .into_iter()
                .find(|d| d.starts_with(PREFIX) && d.ends_with("-amd64"))
                .ok_or_else(|| VmError::NotFound(format!("{PREFIX}*-amd64 in trixie")))?;
            download_with(cache, std::slice::from_ref(&pkg), &apt)?;
            pkg
        }
    };
    let deb = download(cache, std::slice::from_ref(&pkg))?.remove(0);
    unpacked_kernel(cache, &deb)
}

/// The newest cached `.deb` whose package name starts with `prefix` and ends with `-amd64`.
fn cached_kernel_package(cache: &Path, prefix: &str) -> Option<String> {
    fs::read_dir(cache.join("debs")).ok().and_then(|d| {
        d.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(prefix) && n.ends_with(".deb"))
            .filter_map(|n| n.split('_').next().map(str::to_string))
            .filter(|n| n.ends_with("-amd64"))
            .max()
    })
}

/// A kernel image package unpacked, its `vmlinuz` found and its modules `depmod`ed; the
/// modules may sit under `lib/modules` or (merged `/usr`) `usr/lib/modules`.
fn unpacked_kernel(cache: &Path, deb: &Path) -> Result<Kernel, VmError> {
    let tree = unpack(cache, deb)?;
    let boot = tree.join("boot");
    let image = fs::read_dir(&boot)
        .map_err(io_err(&boot))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))
        .ok_or_else(|| VmError::NotFound(format!("vmlinuz in {}", boot.display())))?;
    let version = image.file_name().unwrap().to_string_lossy()["vmlinuz-".len()..].to_string();
    let tree =
        if tree.join("usr/lib/modules").join(&version).is_dir() { tree.join("usr") } else { tree };
    if !tree.join("lib/modules").join(&version).join("modules.dep").exists() {
        output(Command::new("depmod").arg("-b").arg(&tree).arg(&version))?;
    }
    Ok(Kernel { image, version, tree })
}

/// The bookworm kernel `linux-image-amd64` points at (the first one downloaded stays cached),
/// unpacked, with `depmod -b` run on its modules.
fn kernel(cache: &Path) -> Result<Kernel, VmError> {
    let debs = cache.join("debs");
    let existing = fs::read_dir(&debs).ok().and_then(|d| {
        d.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("linux-image-6.1.0-") && n.ends_with(".deb"))
            .filter_map(|n| n.split('_').next().map(str::to_string))
            .max()
    });
    let find = || -> Result<Option<String>, VmError> {
        Ok(depends(&["linux-image-amd64".to_string()])?
            .into_iter()
            .find(|d| d.starts_with("linux-image-6.1.0-") && d.ends_with("-amd64")))
    };
    let pkg = match existing {
        Some(p) => p,
        None => match find() {
            Ok(Some(p)) => p,
            // Fresh machines (CI images) often ship without package lists.
            first if crate::util::is_root() => {
                eprintln!("vm: no usable apt lists ({first:?}); running apt-get update");
                output(Command::new("apt-get").args(["update", "-qq"]))?;
                find()?
                    .ok_or_else(|| VmError::NotFound("linux-image-6.1.0-*-amd64 in apt".into()))?
            }
            first => first?
                .ok_or_else(|| VmError::NotFound("linux-image-6.1.0-*-amd64 in apt".into()))?,
        },
    };
    let deb = download(cache, std::slice::from_ref(&pkg))?.remove(0);
    unpacked_kernel(cache, &deb)
}

/// The `.ko` files to load for `modules`, dependencies first, each once.
pub fn module_files(kernel: &Kernel, modules: &[String]) -> Result<Vec<PathBuf>, VmError> {
    let mut out: Vec<PathBuf> = Vec::new();
    for m in modules {
        let text = output(Command::new("modprobe").arg("-d").arg(&kernel.tree).args([
            "-S",
            &kernel.version,
            "--show-depends",
            m,
        ]))?;
        let mut any = false;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("insmod ") {
                let path = PathBuf::from(rest.split_whitespace().next().unwrap_or_default());
                if !out.contains(&path) {
                    out.push(path);
                }
                any = true;
            } else if line.starts_with("builtin ") {
                any = true;
            }
        }
        if !any {
            return Err(VmError::NotFound(format!("kernel module {m}")));
        }
    }
    Ok(out)
}

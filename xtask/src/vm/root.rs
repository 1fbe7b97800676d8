//! The guest's root file system, assembled in memory and written as one initramfs.

use std::collections::BTreeMap;
use std::fs;
use std::io::BufWriter;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::cpio;
use super::debs::{self, Kernel};
use super::{io_err, GuestFile, VmError, EXIT_MARKER, START_MARKER};

/// One entry of the root.
#[derive(Clone, Debug)]
enum Node {
    Dir,
    /// A host file and its permission bits.
    File(PathBuf, u32),
    /// Bytes and permission bits.
    Data(Vec<u8>, u32),
    Symlink(String),
}

/// Package paths not worth shipping.
const SKIP: &[&str] =
    &["usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian"];

/// Debian's merged `/usr`: these top-level directories are symlinks into `/usr`.
const MERGED: &[&str] = &["bin", "sbin", "lib", "lib64"];

/// Map a package path onto the merged-`/usr` layout (`lib/x` becomes `usr/lib/x`).
fn merged(rel: &str) -> String {
    let rel = rel.trim_start_matches('/');
    let first = rel.split('/').next().unwrap_or_default();
    if MERGED.contains(&first) {
        format!("usr/{rel}")
    } else {
        rel.to_string()
    }
}

struct Root(BTreeMap<String, Node>);

impl Root {
    fn new() -> Self {
        let mut r = Root(BTreeMap::new());
        for d in ["usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "proc", "sys", "dev", "tmp"] {
            r.dir(d);
        }
        for d in ["run", "etc", "bbin", "var/tmp", "mnt", "root", "xtask"] {
            r.dir(d);
        }
        for m in MERGED {
            r.0.insert(m.to_string(), Node::Symlink(format!("usr/{m}")));
        }
        r
    }

    /// A directory and its parents.
    fn dir(&mut self, path: &str) {
        let mut cur = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            if !cur.is_empty() {
                cur.push('/');
            }
            cur.push_str(part);
            self.0.entry(cur.clone()).or_insert(Node::Dir);
        }
    }

    fn put(&mut self, path: &str, node: Node) {
        let path = merged(path);
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.0.insert(path, node);
    }

    fn has(&self, path: &str) -> bool {
        self.0.contains_key(&merged(path))
    }

    /// Every file, link and directory of an unpacked package.
    fn add_tree(&mut self, tree: &Path) -> Result<(), VmError> {
        let mut stack = vec![tree.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for e in fs::read_dir(&dir).map_err(io_err(&dir))?.flatten() {
                let path = e.path();
                let rel =
                    path.strip_prefix(tree).expect("under tree").to_string_lossy().into_owned();
                if SKIP.iter().any(|s| rel.starts_with(s)) {
                    continue;
                }
                let meta = fs::symlink_metadata(&path).map_err(io_err(&path))?;
                if meta.file_type().is_symlink() {
                    let to = fs::read_link(&path).map_err(io_err(&path))?;
                    self.put(&rel, Node::Symlink(to.to_string_lossy().into_owned()));
                } else if meta.is_dir() {
                    if !MERGED.contains(&rel.as_str()) {
                        self.dir(&merged(&rel));
                    }
                    stack.push(path);
                } else if meta.is_file() {
                    self.put(&rel, Node::File(path.clone(), meta.permissions().mode() & 0o7777));
                }
            }
        }
        Ok(())
    }

    /// A host file, plus (when asked) the host libraries it needs that the root lacks.
    fn add_file(&mut self, f: &GuestFile) -> Result<(), VmError> {
        let meta = fs::metadata(&f.host).map_err(io_err(&f.host))?;
        self.put(&f.guest, Node::File(f.host.clone(), meta.permissions().mode() & 0o7777));
        if !f.with_libs {
            return Ok(());
        }
        let shown = format!("ldd {}", f.host.display());
        let o = Command::new("ldd")
            .arg(&f.host)
            .output()
            .map_err(|e| VmError::Command { cmd: shown.clone(), detail: e.to_string() })?;
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            // "libx.so.1 => /lib/x86_64-linux-gnu/libx.so.1 (0x...)" or "/lib64/ld-linux... (0x...)"
            let path = match line.split_once("=> ") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => line.split_whitespace().next(),
            };
            let Some(path) = path.filter(|p| p.starts_with('/')) else { continue };
            if self.has(path) {
                continue;
            }
            let real = fs::canonicalize(path).map_err(io_err(Path::new(path)))?;
            self.put(path, Node::File(real, 0o755));
        }
        Ok(())
    }

    fn write(&self, out: &Path) -> Result<(), VmError> {
        let tmp = out.with_extension(format!("tmp{}", std::process::id()));
        let file = fs::File::create(&tmp).map_err(io_err(&tmp))?;
        let mut w = cpio::Writer::new(BufWriter::new(file));
        for (path, node) in &self.0 {
            match node {
                Node::Dir => w.dir(path),
                Node::Symlink(to) => w.symlink(path, to),
                Node::Data(bytes, perm) => w.file(path, *perm, bytes),
                Node::File(host, perm) => {
                    let bytes = fs::read(host).map_err(io_err(host))?;
                    w.file(path, *perm, &bytes)
                }
            }
            .map_err(io_err(&tmp))?;
        }
        w.finish().map_err(io_err(&tmp))?;
        fs::rename(&tmp, out).map_err(io_err(out))
    }
}

/// The `/init` program: mounts, `lo` up, modules, the tier's script, exit marker, power off.
pub fn init_script() -> String {
    format!(
        "#!/bin/busybox sh\n\
         /bin/busybox --install -s /bbin\n\
         export PATH=/usr/sbin:/usr/bin:/bbin HOME=/root\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sysfs /sys\n\
         mount -t devtmpfs devtmpfs /dev\n\
         mount -t tmpfs tmpfs /tmp\n\
         mount -t tmpfs tmpfs /run\n\
         ip link set lo up\n\
         printf '{START_MARKER}'\n\
         while read -r m; do\n\
         \x20 insmod \"$m\" || echo \"XTASK-VM-MODULE-FAILED $m\"\n\
         done < /xtask/modules\n\
         dash /xtask/script.sh\n\
         echo \"{EXIT_MARKER}$?\"\n\
         sync\n\
         poweroff -f\n"
    )
}

/// The decompressed bytes of an `.xz` file (`xz -dc`).
fn unxz(path: &Path) -> Result<Vec<u8>, VmError> {
    let o = std::process::Command::new("xz").arg("-dc").arg(path).output().map_err(|e| {
        VmError::Command { cmd: format!("xz -dc {}", path.display()), detail: e.to_string() }
    })?;
    if !o.status.success() {
        return Err(VmError::Command {
            cmd: format!("xz -dc {}", path.display()),
            detail: String::from_utf8_lossy(&o.stderr).trim().to_string(),
        });
    }
    Ok(o.stdout)
}

/// Assemble the root and write it to `out`.
pub fn build(
    kernel: &Kernel,
    trees: &[PathBuf],
    modules: &[String],
    files: &[GuestFile],
    init: &str,
    user_script: &str,
    out: &Path,
) -> Result<(), VmError> {
    let mut root = Root::new();
    for t in trees {
        root.add_tree(t)?;
    }
    if !root.has("usr/bin/sh") {
        root.put("usr/bin/sh", Node::Symlink("dash".into()));
    }
    let mut list = String::new();
    for (i, ko) in debs::module_files(kernel, modules)?.iter().enumerate() {
        let name = ko.file_name().expect("a .ko file").to_string_lossy().into_owned();
        // busybox's insmod hands the file to init_module as it is: unpack compressed modules.
        let (name, node) = match name.strip_suffix(".xz") {
            Some(plain) => (plain.to_string(), Node::Data(unxz(ko)?, 0o644)),
            None => (name, Node::File(ko.clone(), 0o644)),
        };
        let guest = format!("usr/lib/modules/{}/xtask/{i:03}-{name}", kernel.version);
        list.push_str(&format!("/{guest}\n"));
        root.put(&guest, node);
    }
    root.put("xtask/modules", Node::Data(list.into_bytes(), 0o644));
    root.put("xtask/script.sh", Node::Data(user_script.as_bytes().to_vec(), 0o755));
    for f in files {
        root.add_file(f)?;
    }
    root.put("init", Node::Data(init.as_bytes().to_vec(), 0o755));
    root.write(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_usr_mapping() {
        assert_eq!(merged("lib/x86_64-linux-gnu/libc.so.6"), "usr/lib/x86_64-linux-gnu/libc.so.6");
        assert_eq!(merged("/bin/busybox"), "usr/bin/busybox");
        assert_eq!(merged("etc/libibverbs.d/rxe.driver"), "etc/libibverbs.d/rxe.driver");
        assert_eq!(merged("usr/lib/x"), "usr/lib/x");
    }
}

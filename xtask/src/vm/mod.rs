//! Boot a throw-away QEMU guest built from Debian bookworm packages and collect its serial output.
//!
//! This is the machinery behind the VM test tiers (`rxe`, `vfio`, ...). A tier describes its guest
//! with a [`Guest`] and calls [`Guest::boot`]; everything else (fetching packages, the kernel and
//! its modules, the initramfs, QEMU) happens here.
//!
//! ```no_run
//! # use std::time::Duration;
//! use crate::vm::{Guest, GuestFile};
//! let guest = Guest {
//!     name: "rxe".into(),
//!     packages: vec!["rdma-core".into(), "iproute2".into()],
//!     modules: vec!["crc32_generic".into(), "rdma_rxe".into()],
//!     files: vec![GuestFile::dynamic("target/debug/deps/rxe-1234", "/t/rxe")],
//!     init_script: "rdma link add rxe0 type rxe netdev lo\n/t/rxe --ignored".into(),
//!     ..Guest::default()
//! };
//! let run = guest.boot(Duration::from_secs(300))?;
//! assert_eq!(run.exit, Some(0));
//! print!("{}", run.serial);
//! # Ok::<(), crate::vm::VmError>(())
//! ```
//!
//! # What the guest is
//!
//! * **Kernel**: Debian bookworm's `linux-image-6.1.0-*-amd64` (whatever `linux-image-amd64`
//!   depends on today), booted with `-kernel`; its modules tree gets `depmod -b`. Other
//!   sources ([`KernelSource`]) come from private apt states under `target/vm/apt-*/` (the
//!   host's sources are untouched): trixie-backports' newest, or trixie's pinned 6.12.
//! * **Root**: an uncompressed initramfs (cpio `newc`, written here) holding busybox-static (its
//!   applets in `/bbin`, last on `PATH`), every file of [`Guest::packages`] except
//!   documentation, and the shared-library closure of those packages (their `lib*` dependencies,
//!   followed recursively). Debian's merged-`/usr` layout is kept: `/bin`, `/sbin`, `/lib` and
//!   `/lib64` are symlinks into `/usr`.
//! * **Modules**: each name of [`Guest::modules`] is expanded with
//!   `modprobe --show-depends` on the guest's tree, in order, without duplicates, and the `.ko`
//!   files are `insmod`ed by `/init` in that order. Modules a `modules.dep` does not list (such
//!   as rxe's crc32 shash) must be named before the module that needs them.
//! * **Files**: [`Guest::files`] are copied in; [`GuestFile::dynamic`] also copies the host's
//!   shared libraries of the file (from `ldd`) that the guest root does not already have.
//! * **Init**: `/init` mounts `proc`, `sys`, `devtmpfs` (so `/dev/infiniband/*` appears without
//!   udev), `tmpfs` on `/tmp` and `/run`, brings `lo` up, loads the modules, then runs
//!   [`Guest::init_script`] with `dash` (not busybox `sh`: Debian's static busybox prefers its own
//!   applets over `PATH`, so its shell would run busybox `ip` instead of iproute2's), prints
//!   `XTASK-VM-EXIT <status>` and powers off.
//! * **QEMU**: `qemu-system-x86_64 -nodefaults -nic none -display none -serial stdio -no-reboot`,
//!   TCG (`-accel tcg,thread=multi -cpu max`) unless `kvm_intel`/`kvm_amd` is loaded, in which
//!   case KVM is tried first and TCG is used if the KVM guest never reaches `/init`. No network
//!   device exists: nothing leaves the guest. [`Guest::qemu_args`] are appended (machine type,
//!   IOMMU, devices, ...). [`Guest::emulator`] may pick the private QEMU 11.1 (its vfio-user
//!   client), [`Guest::memfd_ram`] puts guest RAM in a shared memfd (a device process maps it),
//!   and [`Guest::companion`] is a host process (a vfio-user server) started before QEMU, its
//!   socket awaited, and reaped (killed if it lingers) after QEMU, its output kept in
//!   [`Serial::companion`].
//!
//! # Caching
//!
//! Everything lives under `target/vm/` of the workspace: `debs/` (the `.deb` files, fetched with
//! `apt-get download`), `pkgs/<deb>/` (each package unpacked with `dpkg -x`, once), and
//! `<name>/` (the guest's initramfs, rebuilt on every boot since test binaries change). Nothing
//! needs root except installing missing host tools; see [`host_tools_missing`].

mod companion;
mod cpio;
mod debs;
mod qemu;
mod qemu11;
mod root;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use debs::KernelSource;
pub use qemu::Accel;
pub use qemu11::PrivateQemu;

/// A guest to boot: the packages, modules, files and script that make it.
#[derive(Clone, Debug)]
pub struct Guest {
    /// Cache directory name under `target/vm/` (one per tier, e.g. `"rxe"`, `"vfio"`).
    pub name: String,
    /// Debian packages unpacked into the root, besides the kernel, busybox-static and dash. Their
    /// `lib*` dependencies are added recursively.
    pub packages: Vec<String>,
    /// Kernel modules to load, in order; each is preceded by its `modules.dep` dependencies.
    pub modules: Vec<String>,
    /// Host files to copy into the guest.
    pub files: Vec<GuestFile>,
    /// Shell script (run by `dash`) run by `/init` once the modules are loaded; its exit status becomes
    /// [`Serial::exit`].
    pub init_script: String,
    /// Extra QEMU arguments, appended after the defaults (e.g. `-M q35`, `-device edu`).
    pub qemu_args: Vec<String>,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Virtual CPUs (TCG runs one host thread per vCPU).
    pub cpus: u32,
    /// Extra kernel command line, after `console=ttyS0 panic=-1 ...`.
    pub cmdline: String,
    /// Echo the serial console to stderr while the guest runs.
    pub echo: bool,
    /// Which Debian kernel boots it.
    pub kernel: KernelSource,
    /// Which QEMU runs it.
    pub emulator: Emulator,
    /// Guest RAM as a shared memfd (`-object memory-backend-memfd,...,share=on -machine
    /// q35,memory-backend=mem`), so that a device process can map it. Implies the q35 machine:
    /// [`Guest::qemu_args`] must not name another `-machine`.
    pub memfd_ram: bool,
    /// A host process started before QEMU (a vfio-user device server) and reaped after it.
    pub companion: Option<Companion>,
}

/// Which QEMU binary boots a guest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Emulator {
    /// The host's `qemu-system-x86_64`.
    #[default]
    System,
    /// QEMU 11.1 from trixie-backports, provisioned under `target/vm/qemu-11.1/` (see
    /// [`private_qemu`]); it has the vfio-user client.
    Private11,
}

/// A host process that serves the guest (a vfio-user device server): started before QEMU, its
/// UNIX socket awaited, then reaped after QEMU exits (killed if it does not exit by itself).
#[derive(Clone, Debug)]
pub struct Companion {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// The socket it listens on; QEMU starts once it exists. Removed before the start.
    pub socket: PathBuf,
    /// How long to wait for the socket.
    pub ready_within: Duration,
    /// How long it may take to exit after QEMU has.
    pub exit_within: Duration,
}

/// What the companion process did.
#[derive(Clone, Debug, Default)]
pub struct CompanionRun {
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    /// Its exit status; `None` if it was killed by a signal (or never started).
    pub exit: Option<i32>,
    /// Whether it had to be killed (it did not exit within [`Companion::exit_within`]).
    pub killed: bool,
}

impl Default for Guest {
    fn default() -> Self {
        Guest {
            name: "guest".into(),
            packages: Vec::new(),
            modules: Vec::new(),
            files: Vec::new(),
            init_script: String::new(),
            qemu_args: Vec::new(),
            memory_mib: 1024,
            cpus: 2,
            cmdline: String::new(),
            echo: true,
            kernel: KernelSource::Bookworm,
            emulator: Emulator::System,
            memfd_ram: false,
            companion: None,
        }
    }
}

/// A host file to put into the guest.
#[derive(Clone, Debug)]
pub struct GuestFile {
    /// Path on the host.
    pub host: PathBuf,
    /// Absolute path in the guest.
    pub guest: String,
    /// Also copy the host shared libraries the file needs (`ldd`) that the guest lacks.
    pub with_libs: bool,
}

impl GuestFile {
    /// A data file or statically linked program, copied as is (mode kept).
    pub fn plain(host: impl Into<PathBuf>, guest: impl Into<String>) -> Self {
        GuestFile { host: host.into(), guest: guest.into(), with_libs: false }
    }

    /// A dynamically linked program: copied with the host libraries it needs that the guest's
    /// packages do not already provide.
    pub fn dynamic(host: impl Into<PathBuf>, guest: impl Into<String>) -> Self {
        GuestFile { host: host.into(), guest: guest.into(), with_libs: true }
    }
}

/// What a boot produced.
#[derive(Clone, Debug)]
pub struct Serial {
    /// Everything the guest wrote to its serial console (kernel log and `/init`'s output).
    pub serial: String,
    /// Exit status of [`Guest::init_script`], or `None` if the guest never reported one (it
    /// crashed, hung or timed out).
    pub exit: Option<i32>,
    /// How the guest ran.
    pub accel: Accel,
    /// Whether the guest was killed at the timeout.
    pub timed_out: bool,
    /// Wall time of the boot, QEMU start to exit.
    pub elapsed: Duration,
    /// The companion process's output and status, when the guest had one.
    pub companion: Option<CompanionRun>,
}

impl Serial {
    /// The lines `/init` and the script printed (the serial text after the start marker).
    pub fn script_output(&self) -> &str {
        match self.serial.find(START_MARKER) {
            Some(i) => &self.serial[i + START_MARKER.len()..],
            None => "",
        }
    }
}

/// Printed by `/init` before it loads modules; its absence means the kernel never ran `/init`.
pub(crate) const START_MARKER: &str = "XTASK-VM-INIT\n";
/// Printed by `/init` with the script's exit status.
pub(crate) const EXIT_MARKER: &str = "XTASK-VM-EXIT ";

/// Why a guest could not be built or booted.
#[derive(Debug)]
pub enum VmError {
    /// A host tool is missing; the text is the apt command that installs it.
    MissingTools(String),
    /// A host command failed.
    Command {
        /// The command line.
        cmd: String,
        /// Its stderr (or why it could not start).
        detail: String,
    },
    /// A file operation failed.
    Io {
        /// The path involved.
        path: PathBuf,
        /// The error.
        err: std::io::Error,
    },
    /// Something expected was not found (a package, a module, the kernel image).
    NotFound(String),
}

impl fmt::Display for VmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmError::MissingTools(apt) => {
                write!(
                    f,
                    "missing host tools; install with: sudo {apt} (or: sudo cargo xtask setup)"
                )
            }
            VmError::Command { cmd, detail } => write!(f, "`{cmd}` failed: {detail}"),
            VmError::Io { path, err } => write!(f, "{}: {err}", path.display()),
            VmError::NotFound(what) => write!(f, "not found: {what}"),
        }
    }
}

impl std::error::Error for VmError {}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> VmError + '_ {
    move |err| VmError::Io { path: path.to_path_buf(), err }
}

/// The Debian packages that provide the host tools a boot needs, for those missing here.
/// Empty when everything is installed.
pub fn host_tools_missing() -> Vec<&'static str> {
    let tools = [
        ("qemu-system-x86_64", "qemu-system-x86"),
        ("apt-get", "apt"),
        ("dpkg", "dpkg"),
        ("depmod", "kmod"),
        ("modprobe", "kmod"),
        ("ldd", "libc-bin"),
        ("xz", "xz-utils"),
    ];
    let mut missing: Vec<&str> =
        tools.iter().filter(|(t, _)| !crate::util::have(t)).map(|(_, p)| *p).collect();
    missing.dedup();
    missing
}

/// The apt command that installs `pkgs`.
pub fn apt_install_command(pkgs: &[&str]) -> String {
    format!("apt-get install -y --no-install-recommends --no-remove {}", pkgs.join(" "))
}

/// The cache root, `target/vm/` of the workspace.
pub fn cache_dir() -> PathBuf {
    crate::util::root().join("target").join("vm")
}

/// QEMU 11.1 (with the vfio-user client), provisioned once under `target/vm/qemu-11.1/`.
pub fn private_qemu() -> Result<PrivateQemu, VmError> {
    qemu11::provision(&cache_dir())
}

impl Guest {
    /// Build the guest and boot it, killing it after `timeout`. Returns its serial output; the
    /// caller decides what passed by reading it.
    pub fn boot(&self, timeout: Duration) -> Result<Serial, VmError> {
        let mut missing = host_tools_missing();
        if self.emulator == Emulator::Private11 {
            missing.retain(|p| *p != "qemu-system-x86");
        }
        if !missing.is_empty() {
            return Err(VmError::MissingTools(apt_install_command(&missing)));
        }
        let cache = cache_dir();
        let kernel = debs::kernel_from(&cache, self.kernel)?;
        let mut pkgs = vec!["busybox-static".to_string(), "dash".to_string()];
        pkgs.extend(self.packages.iter().cloned());
        let trees = debs::fetch_closure(&cache, &pkgs)?;
        let work = cache.join(&self.name);
        std::fs::create_dir_all(&work).map_err(io_err(&work))?;
        let initrd = work.join("initrd.cpio");
        let init = root::init_script();
        root::build(
            &kernel,
            &trees,
            &self.modules,
            &self.files,
            &init,
            &self.init_script,
            &initrd,
        )?;
        let private = match self.emulator {
            Emulator::System => None,
            Emulator::Private11 => Some(qemu11::provision(&cache)?),
        };
        qemu::boot(self, private.as_ref(), &kernel.image, &initrd, timeout)
    }
}

//! Compile the C reference loops of `bench_post` and `bench_poll` (they use rdma-core's public
//! `mlx5dv.h`, shipped by Debian's `libibverbs-dev`), when the `c-bench` feature asks for them.
//!
//! They are compiled as Debian compiles rdma-core's providers, so that they run as fast as the
//! provider they follow: `debian/rules` builds with `CMAKE_BUILD_TYPE=Release`, which rdma-core
//! (`buildlib/RDMA_BuildType.cmake`) maps to `-O2 -g -DNDEBUG`, in gnu11, with
//! `DEB_BUILD_MAINT_OPTIONS=hardening=+all`, whose compiler flags on Debian 12 amd64 are
//! `-fstack-protector-strong -Wformat -Werror=format-security` and `-D_FORTIFY_SOURCE=2`
//! (`dpkg-buildflags`), into a shared object (`-fPIC`).

const SOURCES: &[&str] = &["c/post_mlx5dv.c", "c/poll_mlx5.c"];

fn main() {
    println!("cargo:rerun-if-changed=c/bench_mlx5.h");
    for s in SOURCES {
        println!("cargo:rerun-if-changed={s}");
    }
    if std::env::var_os("CARGO_FEATURE_C_BENCH").is_none() {
        return;
    }
    cc::Build::new()
        .files(SOURCES)
        .opt_level(2)
        .debug(true)
        .pic(true)
        .std("gnu11")
        .define("NDEBUG", None)
        .define("_FORTIFY_SOURCE", "2")
        .flag("-fstack-protector-strong")
        .flag("-Wformat")
        .flag("-Werror=format-security")
        .warnings(true)
        .compile("benchc");
}

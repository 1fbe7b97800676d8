//! Compile the C reference loops of `bench_post` (they use rdma-core's public `mlx5dv.h`,
//! shipped by Debian's `libibverbs-dev`), when the `c-bench` feature asks for them.

fn main() {
    println!("cargo:rerun-if-changed=c/post_mlx5dv.c");
    if std::env::var_os("CARGO_FEATURE_C_BENCH").is_none() {
        return;
    }
    cc::Build::new().file("c/post_mlx5dv.c").opt_level(2).warnings(true).compile("postc");
}

//! Compile the C shim and the C interop peer, and link the system's rdma-core.
//!
//! `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are `static inline` in
//! `infiniband/verbs.h` (they jump through the provider's ops table), so Rust cannot link them;
//! `c/shim.c` hands out the provider's `post_send`/`poll_cq` entry points and gives
//! `ibv_post_recv` a real symbol. `c/peer.c` is an ordinary librdmacm program used by the
//! interop tests and as the control of `bench rxe`'s latency runs.

fn main() {
    println!("cargo:rerun-if-changed=c/shim.c");
    println!("cargo:rerun-if-changed=c/peer.c");
    cc::Build::new()
        .file("c/shim.c")
        .file("c/peer.c")
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .warnings_into_errors(true)
        .compile("rxe_shim");
    println!("cargo:rustc-link-lib=dylib=rdmacm");
    println!("cargo:rustc-link-lib=dylib=ibverbs");
}

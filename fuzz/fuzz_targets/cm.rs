//! libFuzzer entry of the `cm` target; the body is [`rdma_pmd_fuzz::cm`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rdma_pmd_fuzz::cm(data));

//! libFuzzer entry of the `cqe` target; the body is [`rdma_pmd_fuzz::cqe`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rdma_pmd_fuzz::cqe(data));

//! libFuzzer entry of the `fw` target; the body is [`rdma_pmd_fuzz::fw`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| rdma_pmd_fuzz::fw(data));

//! Connection management: the IB CM protocol over QP1 with rdma_cm's IP addressing.
//!
//! * [`mad`]: the MAD header and the CM messages as typed views ([`field`] reads their bits);
//! * [`cma`]: rdma_cm's private-data header and service IDs.
//!
//! Nothing here allocates; every layout is checked against the kernel's
//! `include/rdma/ibta_vol1_c12.h` in this module's tests.

pub mod cma;
pub mod field;
pub mod mad;

#[cfg(test)]
mod tests;
